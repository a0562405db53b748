package engine

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// benchNamespaces is the number of tenants of BenchmarkTenantZones.
const benchNamespaces = 500

// benchNodes is the number of nodes each pod is filtered on.
const benchNodes = 100

// BenchmarkTenantZones is the cost per pod (matching, then the filter on
// benchNodes nodes) of keeping 500 tenants in their zones:
//
//   - unparameterized: one policy with the zones as constants (the same for
//     every tenant: what a parameterized policy replaces, at its cheapest:
//     a node-only rule, cached per node version);
//   - copies: one policy per tenant, each selecting its namespace, with its
//     zones as constants (what admins write today);
//   - parameterized: one policy reading the zones from each namespace's
//     ConfigMap (500 of them).
func BenchmarkTenantZones(b *testing.B) {
	env := testEnv(b)
	compiler := NewCompiler(env)
	zonesOf := func(i int) string { return []string{"a", "b", "c"}[i%3] + ",d" }
	constFilter := func(zones string) string {
		return fmt.Sprintf("node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in %q.split(',')", zones)
	}

	var copies []*CompiledPolicy
	objs := make([]*unstructured.Unstructured, 0, benchNamespaces)
	for i := range benchNamespaces {
		ns := fmt.Sprintf("tenant-%d", i)
		copies = append(copies, compiler.Compile(builder.MakePolicy("tenant-"+ns).Stored().NamespaceLabels(map[string]string{"tenant": ns}).
			Filter("zone", constFilter(zonesOf(i))).Obj(), CompileOptions{Stored: true}))
		objs = append(objs, configMap(b, ns, "placement", map[string]string{"zones": zonesOf(i)}, nil))
	}
	params, err := NewStaticParams(env, objs)
	if err != nil {
		b.Fatal(err)
	}
	cases := map[string]*Snapshot{
		"unparameterized": NewSnapshot(compiler.Compile(builder.MakePolicy("zones").Stored().
			Filter("zone", constFilter("a,d")).Obj(), CompileOptions{Stored: true})),
		"copies": NewSnapshot(copies...),
		"parameterized": NewSnapshot(compiler.Compile(builder.MakePolicy("tenant-zones").Stored().
			ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
			Filter("zone", tenantFilter).Obj(), CompileOptions{Stored: true})),
		// The zones split once per params version (a variable that reads
		// only params), the filter per node.
		"parameterized-variable": NewSnapshot(compiler.Compile(builder.MakePolicy("tenant-zones").Stored().
			ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
			Variable("zones", "params.data['zones'].split(',')").
			Filter("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in variables.zones").Obj(), CompileOptions{Stored: true})),
	}
	conv := NewConverter(env, 0)
	nodes := make([]*NodeInput, benchNodes)
	for i := range nodes {
		node := makeNode(fmt.Sprintf("n%d", i), map[string]string{"topology.kubernetes.io/zone": []string{"a", "b", "c", "d"}[i%4]})
		if nodes[i], err = conv.Node(node, nil); err != nil {
			b.Fatal(err)
		}
	}
	// The pods of tenant 7 (zones b,d), converted once as in PreFilter.
	pod, err := conv.Pod(makePod("tenant-7", "p", nil), makeNamespace("tenant-7", map[string]string{"tenant": "tenant-7"}))
	if err != nil {
		b.Fatal(err)
	}
	pod.Params = params
	for _, name := range []string{"unparameterized", "copies", "parameterized", "parameterized-variable"} {
		snapshot := cases[name]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				feasible := 0
				matches := snapshot.Match(ctx, pod, nil)
				for i := range matches {
					for _, n := range nodes {
						if matches[i].Decision.Policy.Filter(ctx, pod, n).Verdict == Pass {
							feasible++
						}
					}
				}
				if feasible != benchNodes/2 {
					b.Fatalf("%d feasible nodes, want %d", feasible, benchNodes/2)
				}
			}
		})
	}
}
