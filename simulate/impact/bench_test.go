package impact

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/test/builder"
)

// largeInput is builder.LargeCluster as impact's input, with a draft.
func largeInput(tb testing.TB, nodes, pods, pending int, draft *schedv1alpha1.SchedulingPolicy) Input {
	tb.Helper()
	c := builder.LargeCluster(nodes, pods, pending)
	in := Input{Input: source.Input{Nodes: c.Nodes, Namespaces: c.Namespaces, Pods: c.Pods, Policies: c.Live, Config: config(tb),
		Drafts: []*schedv1alpha1.SchedulingPolicy{draft}}}
	for _, cm := range c.ConfigMaps {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
		if err != nil {
			tb.Fatal(err)
		}
		in.Params = append(in.Params, &unstructured.Unstructured{Object: content})
	}
	return in
}

// BenchmarkRun1000Nodes3000Pods: 1000 nodes, 3000 pods (500 pending), a
// draft that changes a policy every pod matches, so every pod is
// evaluated with both policy sets. One op is one whole impact run.
//
//	go test ./simulate/impact -run '^$' -bench Run1000Nodes3000Pods -benchtime 1x
func BenchmarkRun1000Nodes3000Pods(b *testing.B) {
	benchmarkRun(b, largeInput(b, 1000, 3000, 500, builder.HomeZonesDraft()), 3000)
}

// BenchmarkRun5000Nodes10000Pods: 5000 nodes, 10,000 pods (1000 pending),
// a draft of the parameterized policy that the tenants' pods (half of
// them) match, each tenant with its params ConfigMap.
//
//	go test ./simulate/impact -run '^$' -bench Run5000Nodes10000Pods -benchtime 1x
func BenchmarkRun5000Nodes10000Pods(b *testing.B) {
	benchmarkRun(b, largeInput(b, 5000, 10000, 1000, builder.TenantZonesDraft()), 5000)
}

// BenchmarkRunSmall is the first at a tenth of the size, for profiles.
func BenchmarkRunSmall(b *testing.B) {
	benchmarkRun(b, largeInput(b, 300, 300, 50, builder.HomeZonesDraft()), 300)
}

// benchmarkRun runs impact on the input; affected pods are evaluated with
// both policy sets.
func benchmarkRun(b *testing.B, in Input, affected int) {
	b.ReportAllocs()
	for b.Loop() {
		r, err := Run(context.Background(), in)
		if err != nil {
			b.Fatal(err)
		}
		if r.Summary.Pending+r.Summary.Bound != len(in.Pods) || len(in.Pods)-r.Summary.NotAffected != affected || len(r.Pods) == 0 {
			b.Fatalf("summary %+v, %d changed pods: want %d pods, %d affected, some changed", r.Summary, len(r.Pods), len(in.Pods), affected)
		}
		b.ReportMetric(float64(len(r.Pods)), "changed-pods")
	}
}
