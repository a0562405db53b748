package dryrun

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/builder"
)

func node(name string, labels map[string]string, cpu string) *corev1.Node {
	n := st.MakeNode().Name(name).Label(corev1.LabelHostname, name).Capacity(map[corev1.ResourceName]string{
		corev1.ResourceCPU: cpu, corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "110",
	})
	for k, v := range labels {
		n = n.Label(k, v)
	}
	return n.Obj()
}

func pod(name, cpu string) *corev1.Pod {
	return st.MakePod().Namespace("default").Name(name).UID("uid-pod").SchedulerName("celsched").
		Req(map[corev1.ResourceName]string{corev1.ResourceCPU: cpu}).Obj()
}

func TestRun(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*corev1.Node{
		node("red", map[string]string{"color": "red"}, "4"),
		node("blue", map[string]string{"color": "blue"}, "4"),
		node("small-red", map[string]string{"color": "red"}, "1"),
		node("green", map[string]string{"color": "green"}, "4"),
	}
	notBlue := builder.MakePolicy("not-blue").FilterMsg("color", "node.metadata.labels['color'] != 'blue'", "blue is reserved", "").Obj()
	preferGreen := builder.MakePolicy("prefer-green").Score("green", "node.metadata.labels['color'] == 'green' ? 100 : 0", 1, schedv1alpha1.None).Obj()
	r, err := Run(t.Context(), Input{Policies: []*schedv1alpha1.SchedulingPolicy{notBlue, preferGreen}, Pod: pod("p", "2"), Nodes: nodes, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"green", "red"}, r.Feasible); diff != "" {
		t.Errorf("feasible (-want +got):\n%s", diff)
	}
	if len(r.Ranking) != 2 || r.Ranking[0].Node != "green" {
		t.Errorf("ranking %+v, want green first", r.Ranking)
	}
	wantRejected := map[string]Rejection{
		"blue":      {Plugin: "CELFilter", Message: "node(s) rejected by SchedulingPolicy not-blue, rule color: blue is reserved"},
		"small-red": {Plugin: "NodeResourcesFit", Message: "Insufficient cpu"},
	}
	for _, n := range r.Nodes {
		want, rejected := wantRejected[n.Name]
		switch {
		case rejected && (n.RejectedBy == nil || *n.RejectedBy != want):
			t.Errorf("node %s rejected by %+v, want %+v", n.Name, n.RejectedBy, want)
		case !rejected && !n.Feasible:
			t.Errorf("node %s rejected by %+v, want feasible", n.Name, n.RejectedBy)
		}
	}
	// The engine's detail: every node's filter verdict, scores normalized
	// across the feasible nodes only.
	nb := r.Policies[0]
	if !nb.Matched || len(nb.Filters["blue"]) != 1 || nb.Filters["blue"][0].Passed || !nb.Filters["small-red"][0].Passed {
		t.Errorf("not-blue detail %+v", nb)
	}
	pg := r.Policies[1]
	if s := pg.Scores["green"][0]; s.Raw != 100 || s.Normalized == nil || *s.Normalized != 100 {
		t.Errorf("prefer-green on green: %+v", s)
	}
	if s, ok := pg.Scores["blue"]; ok {
		t.Errorf("an infeasible node has scores: %+v (the scheduler scores feasible nodes only)", s)
	}
}

func TestRunHeldPod(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	hold := builder.MakePolicy("hold").PreEnqueue("cost-center", "namespaceObject.metadata.labels[?'cost-center'].hasValue()", "no cost-center").Obj()
	r, err := Run(t.Context(), Input{Policies: []*schedv1alpha1.SchedulingPolicy{hold}, Pod: pod("p", "1"), Nodes: []*corev1.Node{node("n", nil, "4")}, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	want := &Rejection{Plugin: "CELPreEnqueue", Message: "held by SchedulingPolicy hold, rule cost-center: no cost-center"}
	if diff := cmp.Diff(want, r.PreEnqueue); diff != "" || len(r.Feasible) != 0 {
		t.Errorf("preEnqueue (-want +got):\n%s\nfeasible %v", diff, r.Feasible)
	}
}

// TestRunPodGroup: the dry run reads podGroup from the PodGroups and pods
// given, as the scheduler does from its pod group state: a member of a
// gang of 8 is refused the small node, in the verdict and in the policy's
// detail.
func TestRunPodGroup(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*corev1.Node{node("small", map[string]string{"size": "small"}, "4"), node("large", map[string]string{"size": "large"}, "4")}
	gangSize := builder.MakePolicy("gang-size").FilterMsg("small-or-large",
		"podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'", "gangs of more than 4 need a large node", "").Obj()
	member := pod("train-0", "1")
	group := "train"
	member.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	r, err := Run(t.Context(), Input{Policies: []*schedv1alpha1.SchedulingPolicy{gangSize}, Pod: member, Nodes: nodes, Config: cfg,
		PodGroups: []*schedulingv1beta1.PodGroup{builder.Gang("default", "train", 8, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"large"}, r.Feasible); diff != "" {
		t.Errorf("feasible (-want +got):\n%s", diff)
	}
	want := Rejection{Plugin: "CELFilter", Message: "node(s) rejected by SchedulingPolicy gang-size, rule small-or-large: gangs of more than 4 need a large node"}
	for _, n := range r.Nodes {
		if n.Name == "small" && (n.RejectedBy == nil || *n.RejectedBy != want) {
			t.Errorf("small rejected by %+v, want %+v", n.RejectedBy, want)
		}
	}
	if d := r.Policies[0]; !d.Matched || d.Filters["small"][0].Passed || !d.Filters["large"][0].Passed {
		t.Errorf("gang-size detail %+v, want small refused and large passed", d)
	}
}
