package engine

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

var (
	sharedEnvOnce sync.Once
	sharedEnv     *Environment
	sharedEnvErr  error
)

// testEnv returns one Environment for all tests of the package: building it
// resolves large OpenAPI schemas.
func testEnv(tb testing.TB) *Environment {
	tb.Helper()
	sharedEnvOnce.Do(func() { sharedEnv, sharedEnvErr = NewEnvironment() })
	if sharedEnvErr != nil {
		tb.Fatalf("NewEnvironment: %v", sharedEnvErr)
	}
	return sharedEnv
}

// makePod, makeNode and makeNamespace build test objects.
func makePod(namespace, name string, podLabels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: podLabels, UID: ktypes.UID("uid-" + namespace + "-" + name)},
		Spec: corev1.PodSpec{
			SchedulerName: "celsched",
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("500m"),
					corev1.ResourceMemory: resource.MustParse("1Gi"),
				}},
			}},
		},
	}
}

// nodeVersions gives every test node its own resourceVersion, so that the
// Converter's cache never serves one test's node to another.
var nodeVersions atomic.Int64

func makeNode(name string, nodeLabels map[string]string) *corev1.Node {
	all := map[string]string{"kubernetes.io/hostname": name}
	for k, v := range nodeLabels {
		all[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: all, UID: ktypes.UID("uid-" + name),
			ResourceVersion: strconv.FormatInt(nodeVersions.Add(1), 10),
		},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			},
		},
	}
}

func makeNamespace(name string, nsLabels map[string]string) *corev1.Namespace {
	all := map[string]string{"kubernetes.io/metadata.name": name}
	for k, v := range nsLabels {
		all[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all, UID: "ns-uid", ResourceVersion: "3"}}
}

// loadSamples reads the policies of config/samples.
func loadSamples(tb testing.TB) map[string]*schedv1alpha1.SchedulingPolicy {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "scheduling_v1alpha1_*.yaml"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no samples found: %v", err)
	}
	out := map[string]*schedv1alpha1.SchedulingPolicy{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		var p schedv1alpha1.SchedulingPolicy
		if err := yaml.UnmarshalStrict(data, &p); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		out[p.Name] = &p
	}
	return out
}
