package filter

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/test/builder"
)

// BenchmarkFilterPodAndNodeCluster: one scheduling cycle's Filter calls on
// 1000 nodes (ten racks) for the replicas of ten Deployments in three
// namespaces, each replica labelled with its Deployment's rack, under
// test/performance's PodAndNode rule: per op, one pod filtered on every
// node, as kube-scheduler does when no node hint applies. Each pod also
// has a label of its own, as a StatefulSet's pods do (and scheduler_perf's
// pods, labelled "signature"), which the rule does not read.
func BenchmarkFilterPodAndNodeCluster(b *testing.B) {
	policy := builder.MakePolicy("same-rack").
		Filter("same-rack", "node.metadata.labels[?'perf.celsched.io/rack'].orValue('') == pod.metadata.labels['perf.celsched.io/rack']").Obj()
	pl := &Filter{rt: plugintest.Runtime(b, []*schedv1alpha1.SchedulingPolicy{policy},
		plugintest.Namespace("celsched-1", nil), plugintest.Namespace("celsched-2", nil), plugintest.Namespace("celsched-3", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute
	nodes := make([]fwk.NodeInfo, 1000)
	for i := range nodes {
		node := st.MakeNode().Name(fmt.Sprintf("perf-node-%04d", i)).Label("perf.celsched.io/rack", fmt.Sprintf("rack%d", i%10)).
			Label("statefulset.kubernetes.io/pod-name", fmt.Sprintf("pod-%d", i)).Obj()
		node.ResourceVersion = strconv.Itoa(i + 1)
		ni := framework.NewNodeInfo()
		ni.SetNode(node)
		nodes[i] = ni
	}
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		pod := st.MakePod().Namespace(fmt.Sprintf("celsched-%d", 1+(i/3000)%3)).Name(fmt.Sprintf("pod-%d", i)).UID(fmt.Sprintf("uid-%d", i)).
			SchedulerName("celsched").Label("app", fmt.Sprintf("deploy-%d", i%10)).Label("perf.celsched.io/rack", fmt.Sprintf("rack%d", i%10)).
			Label("statefulset.kubernetes.io/pod-name", fmt.Sprintf("pod-%d", i)).Obj()
		i++
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(ctx, state, pod, nil); !status.IsSuccess() {
			b.Fatal(status)
		}
		feasible := 0
		for _, ni := range nodes {
			if pl.Filter(ctx, state, pod, ni).IsSuccess() {
				feasible++
			}
		}
		if feasible != 100 {
			b.Fatalf("pod %d: %d feasible nodes, want 100", i, feasible)
		}
		// The pod lands on a node of its rack, as the scheduler would
		// place it: that NodeInfo's generation moves.
		bound := pod.DeepCopy()
		bound.Spec.NodeName = nodes[(i*7)%100*10+(i-1)%10].Node().Name
		nodes[(i*7)%100*10+(i-1)%10].(*framework.NodeInfo).AddPod(bound)
	}
}
