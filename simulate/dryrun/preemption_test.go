package dryrun

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/builder"
)

// TestRunPreemption: eval of a pod no node fits says what preemption
// would do with the shipped profile (CELPreemption): the victim in the
// preemptor's namespace, and the other tenant's pod the rule protected;
// a pod that fits has no preemption in its report.
func TestRunPreemption(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	running := func(ns, name, node string) *corev1.Pod {
		return st.MakePod().Namespace(ns).Name(name).UID("uid-" + ns + "-" + name).SchedulerName("celsched").Priority(10).
			Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "3"}).Node(node).Obj()
	}
	in := Input{
		Policies: []*schedv1alpha1.SchedulingPolicy{
			builder.MakePolicy("own-tenant").Victim("own-namespace", "victim.metadata.namespace == pod.metadata.namespace", "another tenant's pod").Obj(),
		},
		Nodes:  []*corev1.Node{node("n1", nil, "4"), node("n2", nil, "4")},
		Pods:   []*corev1.Pod{running("team-b", "theirs", "n1"), running("team-a", "mine", "n2")},
		Config: cfg,
		Pod: st.MakePod().Namespace("team-a").Name("urgent").UID("uid-urgent").SchedulerName("celsched").Priority(100).
			Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "2"}).Obj(),
	}
	r, err := Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := &PreemptionResult{Node: "n2", Victims: []string{"team-a/mine"},
		Protected: []string{"pod team-b/theirs protected by SchedulingPolicy own-tenant, rule preemption.victims/own-namespace: another tenant's pod"}}
	if diff := cmp.Diff(want, r.Preemption); diff != "" {
		t.Errorf("Preemption (-want +got):\n%s", diff)
	}
	in.Pod = st.MakePod().Namespace("team-a").Name("small").UID("uid-small").SchedulerName("celsched").Priority(100).
		Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "500m"}).Obj()
	if r, err = Run(context.Background(), in); err != nil || r.Preemption != nil {
		t.Errorf("a pod that fits: preemption %+v, %v; want none", r.Preemption, err)
	}
}
