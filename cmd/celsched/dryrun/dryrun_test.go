package dryrun

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

func node(name string, labels map[string]string, cpu string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	l := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}}
}

func pod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: "uid-" + "pod"},
		Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

func policy(name string, spec schedv1alpha1.SchedulingPolicySpec) *schedv1alpha1.SchedulingPolicy {
	spec.Enforcement, spec.FailurePolicy = schedv1alpha1.Enforce, schedv1alpha1.Fail
	return &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
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
	notBlue := policy("not-blue", schedv1alpha1.SchedulingPolicySpec{Filters: []schedv1alpha1.Rule{{
		Name: "color", Expression: "node.metadata.labels['color'] != 'blue'", Message: "blue is reserved",
	}}})
	preferGreen := policy("prefer-green", schedv1alpha1.SchedulingPolicySpec{Scores: []schedv1alpha1.ScoreRule{{
		Name: "green", Expression: "node.metadata.labels['color'] == 'green' ? 100 : 0", Weight: 1, Normalization: schedv1alpha1.None,
	}}})
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
	if s := pg.Scores["blue"][0]; s.Normalized != nil {
		t.Errorf("an infeasible node was normalized: %+v", s)
	}
}

func TestRunHeldPod(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	hold := policy("hold", schedv1alpha1.SchedulingPolicySpec{PreEnqueue: []schedv1alpha1.Rule{{
		Name: "cost-center", Expression: "namespaceObject.metadata.labels[?'cost-center'].hasValue()", Message: "no cost-center",
	}}})
	r, err := Run(t.Context(), Input{Policies: []*schedv1alpha1.SchedulingPolicy{hold}, Pod: pod("p", "1"), Nodes: []*corev1.Node{node("n", nil, "4")}, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	want := &Rejection{Plugin: "CELPreEnqueue", Message: "held by SchedulingPolicy hold, rule cost-center: no cost-center"}
	if diff := cmp.Diff(want, r.PreEnqueue); diff != "" || len(r.Feasible) != 0 {
		t.Errorf("preEnqueue (-want +got):\n%s\nfeasible %v", diff, r.Feasible)
	}
}
