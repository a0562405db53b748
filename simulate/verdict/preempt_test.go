package verdict

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestPreempt: for a pod no node fits, the dry run says what
// DefaultPreemption would do with the profile's victim rules, acting on
// nothing: another tenant's pod is protected (and named), the
// preemptor's own namespace's pod of lower priority is the victim; with
// only the protected pod's node to go to, preemption cannot place the
// pod and says why; a pod that fits has no preemption result.
func TestPreempt(t *testing.T) {
	prio := func(p int32) func(*corev1.Pod) { return func(pod *corev1.Pod) { pod.Spec.Priority = &p } }
	on := func(node string) func(*corev1.Pod) { return func(pod *corev1.Pod) { pod.Spec.NodeName = node } }
	newPod := func(ns, name string, opts ...func(*corev1.Pod)) *corev1.Pod {
		p := pod(ns, name, nil)
		for _, o := range opts {
			o(p)
		}
		return p
	}
	nodes := []*corev1.Node{node("n1", map[string]string{corev1.LabelHostname: "n1"}), node("n2", map[string]string{corev1.LabelHostname: "n2"})}
	running := []*corev1.Pod{
		newPod("team-b", "theirs", requesting("3"), prio(10), on("n1")),
		newPod("team-a", "mine", requesting("3"), prio(10), on("n2")),
	}
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("own-tenant").Victim("own-namespace", "victim.metadata.namespace == pod.metadata.namespace", "another tenant's pod").Obj(),
	}
	e := newEvaluatorOver(t, NewCluster([]*corev1.Namespace{namespace("team-a", nil), namespace("team-b", nil)}, nodes, running, nil), policies, func(*schedulerconfig.KubeSchedulerConfiguration) {})
	ctx := context.Background()
	protected := "pod team-b/theirs protected by SchedulingPolicy own-tenant, rule preemption.victims/own-namespace: another tenant's pod"

	_, got, err := e.Preempt(ctx, newPod("team-a", "urgent", requesting("2"), prio(100)))
	if err != nil {
		t.Fatal(err)
	}
	want := &PreemptionResult{Node: "n2", Victims: []string{"team-a/mine"}, Protected: []string{protected}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Preempt (-want +got):\n%s", diff)
	}

	pinned := newPod("team-a", "pinned", requesting("2"), prio(100))
	pinned.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n1"}
	if _, got, err = e.Preempt(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Node != "" || len(got.Protected) != 1 || got.Reason != "no node where evicting pods of lower priority makes room; victims protected: "+protected {
		t.Errorf("pinned to the protected pod's node: %+v", got)
	}

	if r, got, err := e.Preempt(ctx, newPod("team-a", "small", requesting("500m"), prio(100))); err != nil || got != nil || len(r.Feasible) != 2 {
		t.Errorf("a pod that fits: %+v, %+v, %v; want no preemption and 2 feasible nodes", r, got, err)
	}
	// Nothing was acted on: the victims are still on their nodes.
	for _, name := range []string{"n1", "n2"} {
		ni, err := e.cluster.NodeInfo(name)
		if err != nil || len(ni.GetPods()) != 1 {
			t.Errorf("node %s after the dry runs: %v pods, %v", name, len(ni.GetPods()), err)
		}
	}
}
