package impact

import (
	"context"
	"fmt"
	"testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// largeCluster generates nodes in three zones, namespaces, and pods
// spread over them (bound) plus pending pods, and live policies that keep
// each namespace in two zones and prefer one.
func largeCluster(nodes, pods, pending int) Input {
	zones := []string{"a", "b", "c"}
	in := Input{}
	for i := range nodes {
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("node-%04d", i), zones[i%3]))
	}
	const namespaces = 30
	for i := range namespaces {
		ns := fmt.Sprintf("team-%02d", i)
		in.Namespaces = append(in.Namespaces, namespace(ns, map[string]string{"zone": zones[i%3]}))
	}
	for i := range pods {
		ns := fmt.Sprintf("team-%02d", i%namespaces)
		nodeName := ""
		if i >= pending {
			// on a node of the namespace's zone or the next one
			nodeName = in.Nodes[(i%namespaces%3+i%2+3*(i/7))%nodes].Name
		}
		in.Pods = append(in.Pods, pod(ns, fmt.Sprintf("p-%05d", i), nodeName, map[string]string{"app": fmt.Sprintf("app-%d", i%100)}))
	}
	in.Live = []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("home-zones").Condition("labelled", "has(namespaceObject.metadata.labels) && 'zone' in namespaceObject.metadata.labels").
			Filter("zone", "node.metadata.labels['"+zoneLabel+"'] != 'c' || namespaceObject.metadata.labels['zone'] == 'c'").Obj(),
		builder.MakePolicy("prefer-home").Score("home",
			"node.metadata.labels['"+zoneLabel+"'] == namespaceObject.metadata.?labels[?'zone'].orValue('') ? 100 : 0", 1, schedv1alpha1.None).Obj(),
	}
	return in
}

// BenchmarkRun1000Nodes3000Pods: 1000 nodes, 3000 pods (500 pending), a
// draft that changes a policy every pod matches, so every pod is
// evaluated with both policy sets. One op is one whole impact run.
//
//	go test ./cmd/celsched/impact -run '^$' -bench Run1000Nodes3000Pods -benchtime 1x
func BenchmarkRun1000Nodes3000Pods(b *testing.B) {
	benchmarkRun(b, largeCluster(1000, 3000, 500))
}

// BenchmarkRunSmall is the same at a tenth of the size, for profiles.
func BenchmarkRunSmall(b *testing.B) {
	benchmarkRun(b, largeCluster(300, 300, 50))
}

func benchmarkRun(b *testing.B, in Input) {
	in.Config = config(b)
	in.Drafts = []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("home-zones").Condition("labelled", "has(namespaceObject.metadata.labels) && 'zone' in namespaceObject.metadata.labels").
			Filter("zone", "node.metadata.labels['"+zoneLabel+"'] == namespaceObject.metadata.labels['zone'] || namespaceObject.metadata.labels['zone'] == 'b'").Obj(),
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := Run(context.Background(), in)
		if err != nil {
			b.Fatal(err)
		}
		if r.Summary.Pending+r.Summary.Bound != len(in.Pods) || r.Summary.NotAffected != 0 || len(r.Pods) == 0 {
			b.Fatalf("summary %+v, %d changed pods: want %d pods, all affected, some changed", r.Summary, len(r.Pods), len(in.Pods))
		}
		b.ReportMetric(float64(len(r.Pods)), "changed-pods")
	}
}
