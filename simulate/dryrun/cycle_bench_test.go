package dryrun

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/builder"
)

// BenchmarkCycle: one whole scheduling cycle of a pod through the shipped
// profile (every default plugin plus the CEL plugins), as the dry run runs
// it: PreFilter, Filter on every node, PreScore, Score and NormalizeScore,
// on 1000 and 5000 distinct nodes, with no policy and with ten node-only
// policies that match every pod (a label filter and a label score each, as
// make perf's NodeOnly10). Each iteration is a new pod (a replica), so the
// policies' results are read from the nodes' memo, as for a Deployment's
// pods. ns/op and allocs/op are per pod; ns/node is ns/op over the nodes.
// Compare policies=10 with policies=0 of the same size.
func BenchmarkCycle(b *testing.B) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		b.Fatal(err)
	}
	for _, nodes := range []int{1000, 5000} {
		for _, policies := range []int{0, 10} {
			b.Run(fmt.Sprintf("nodes=%d/policies=%d", nodes, policies), func(b *testing.B) {
				var ns []*corev1.Node
				for i := range nodes {
					labels := map[string]string{}
					for l := range 10 {
						v := "ok"
						switch {
						case i%100 == l:
							v = "blocked"
						case i%10 == (l+1)%10:
							v = "preferred"
						}
						labels[fmt.Sprintf("perf.celsched.io/l%d", l)] = v
					}
					ns = append(ns, node(fmt.Sprintf("node-%05d", i), labels, "4"))
				}
				var ps []*schedv1alpha1.SchedulingPolicy
				for l := range policies {
					label := fmt.Sprintf("perf.celsched.io/l%d", l)
					ps = append(ps, builder.MakePolicy(fmt.Sprintf("node-only-%d", l)).
						FilterMsg("not-blocked", fmt.Sprintf("node.metadata.labels[?%q].orValue('') != 'blocked'", label), "node is blocked for this workload", "").
						Score("preferred", fmt.Sprintf("node.metadata.labels[?%q].orValue('') == 'preferred' ? 100 : 0", label), 1, schedv1alpha1.None).Obj())
				}
				first := pod("p-0", "100m")
				cluster := NewCluster(WithNamespaces(nil, first), ns, nil, nil)
				// The first pod evaluates every rule on every node, one
				// after the other (the scheduler evaluates the nodes it
				// samples, in parallel): at 5000 nodes that outlasts the
				// profile's 100 ms budget.
				cluster.EvaluationBudget = time.Minute
				s, err := cluster.Scheduler(context.Background(), ps, nil, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				if _, err := s.Schedule(ctx, first); err != nil { // fills the memo
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					r, err := s.Schedule(ctx, pod(fmt.Sprintf("p-%d", i), "100m"))
					if err != nil {
						b.Fatal(err)
					}
					if len(r.Ranking) == 0 {
						b.Fatalf("no node for the pod")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
			})
		}
	}
}
