package filter

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/engine"
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
	nodes := benchNodes(func(i int) *st.NodeWrapper {
		return st.MakeNode().Label("perf.celsched.io/rack", fmt.Sprintf("rack%d", i%10)).
			Label("statefulset.kubernetes.io/pod-name", fmt.Sprintf("pod-%d", i))
	})
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

// BenchmarkFilterPodGroupCluster: BenchmarkFilterPodAndNodeCluster's
// cycle for the members of ten gangs (minCount 2 to 11) under a rule
// reading podGroup (the gangs of more than 4 only on large nodes, a
// tenth of the nodes): the group's value is resolved once per cycle and
// keys the rule's results, which the members of a gang share.
func BenchmarkFilterPodGroupCluster(b *testing.B) {
	policy := builder.MakePolicy("gang-size").
		Filter("small-or-large", "podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'").Obj()
	rt := plugintest.Runtime(b, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("celsched-1", nil))
	var groups []*schedulingv1beta1.PodGroup
	for g := range 10 {
		groups = append(groups, builder.Gang("celsched-1", fmt.Sprintf("gang-%d", g), int32(2+g), nil))
	}
	rt.Inputs.PodGroups = engine.NewStaticPodGroups(groups, nil)
	pl := &Filter{rt: rt}
	pl.args.EvaluationBudget.Duration = time.Minute
	nodes := benchNodes(func(i int) *st.NodeWrapper {
		size := "small"
		if i%10 == 0 {
			size = "large"
		}
		return st.MakeNode().Label("size", size)
	})
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		g := i % 10
		group := fmt.Sprintf("gang-%d", g)
		pod := st.MakePod().Namespace("celsched-1").Name(fmt.Sprintf("pod-%d", i)).UID(fmt.Sprintf("uid-%d", i)).SchedulerName("celsched").Obj()
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
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
		if want := map[bool]int{true: 1000, false: 100}[2+g <= 4]; feasible != want {
			b.Fatalf("pod %d of %s: %d feasible nodes, want %d", i, group, feasible, want)
		}
	}
}

// benchNodes returns 1000 nodes perf-node-0000 to perf-node-0999, each as
// node(i) makes it, at resourceVersion i+1.
func benchNodes(node func(i int) *st.NodeWrapper) []fwk.NodeInfo {
	nodes := make([]fwk.NodeInfo, 1000)
	for i := range nodes {
		n := node(i).Name(fmt.Sprintf("perf-node-%04d", i)).Obj()
		n.ResourceVersion = strconv.Itoa(i + 1)
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		nodes[i] = ni
	}
	return nodes
}
