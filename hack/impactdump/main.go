// Command impactdump writes a generated cluster (test/builder.LargeCluster)
// as a dump for `celsched impact --dump`, and a draft policy, to measure
// impact as users run it (docs/cli.md):
//
//	go run ./hack/impactdump -nodes 5000 -pods 10000 -out bin/impactdump
//	celsched impact --dump bin/impactdump/cluster.yaml -f bin/impactdump/draft.yaml -o json
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

func main() {
	nodes := flag.Int("nodes", 5000, "nodes")
	pods := flag.Int("pods", 10000, "pods")
	pending := flag.Int("pending", 1000, "pods of them pending")
	draft := flag.String("draft", "tenant-zones", "the draft: tenant-zones (the parameterized policy, half of the pods) or home-zones (every pod)")
	out := flag.String("out", "bin/impactdump", "output directory")
	flag.Parse()
	if err := run(*nodes, *pods, *pending, *draft, *out); err != nil {
		fmt.Fprintln(os.Stderr, "impactdump:", err)
		os.Exit(1)
	}
}

func run(nodes, pods, pending int, draft, out string) error {
	c := builder.LargeCluster(nodes, pods, pending)
	var d *schedv1alpha1.SchedulingPolicy
	switch draft {
	case "tenant-zones":
		d = builder.TenantZonesDraft()
	case "home-zones":
		d = builder.HomeZonesDraft()
	default:
		return fmt.Errorf("-draft %q: want tenant-zones or home-zones", draft)
	}
	list := &corev1.List{TypeMeta: typeMeta("v1", "List")}
	add := func(obj runtime.Object, apiVersion, kind string) error {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		u["apiVersion"], u["kind"] = apiVersion, kind
		data, err := yaml.Marshal(u)
		if err != nil {
			return err
		}
		json, err := yaml.YAMLToJSON(data)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, runtime.RawExtension{Raw: json})
		return nil
	}
	var err error
	for _, n := range c.Nodes {
		err = firstErr(err, add(n, "v1", "Node"))
	}
	for _, ns := range c.Namespaces {
		err = firstErr(err, add(ns, "v1", "Namespace"))
	}
	for _, p := range c.Pods {
		err = firstErr(err, add(p, "v1", "Pod"))
	}
	for _, cm := range c.ConfigMaps {
		err = firstErr(err, add(cm, "v1", "ConfigMap"))
	}
	for _, p := range c.Live {
		err = firstErr(err, add(p, schedv1alpha1.GroupVersion.String(), "SchedulingPolicy"))
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := write(filepath.Join(out, "cluster.yaml"), list); err != nil {
		return err
	}
	d.TypeMeta = typeMeta(schedv1alpha1.GroupVersion.String(), "SchedulingPolicy")
	return write(filepath.Join(out, "draft.yaml"), d)
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func write(path string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
