package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

const oneRack = "placement.nodes.all(n, n.metadata.labels['rack'] == placement.nodes[0].metadata.labels['rack'])"

func placementPolicy(failurePolicy schedv1alpha1.FailurePolicyType, filters ...schedv1alpha1.PlacementFilter) *schedv1alpha1.SchedulingPolicy {
	return &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "gangs"},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			FailurePolicy: failurePolicy,
			Placement:     &schedv1alpha1.PlacementRules{Filters: filters},
		},
	}
}

func TestPlacementFilterCompileErrors(t *testing.T) {
	c := NewCompiler(testEnv(t))
	tests := map[string]struct {
		expression string
		want       string
	}{
		"not bool":          {expression: "placement.count", want: "spec.placement.filters[1].expression: Invalid value: \"placement.count\": must evaluate to bool, but evaluates to int"},
		"no such field":     {expression: "placement.zones.size() > 0", want: "spec.placement.filters[1].expression: Invalid value: \"placement.zones.size() > 0\": compilation failed: ERROR: <input>:1:10: undefined field 'zones'"},
		"pod not available": {expression: "pod.metadata.name == ''", want: "spec.placement.filters[1].expression: Invalid value: \"pod.metadata.name == ''\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'pod'"},
		"loop over the nodes in a loop over the nodes": {
			expression: "placement.nodes.all(a, placement.nodes.all(b, a.metadata.name == b.metadata.name || a.metadata.labels['rack'] != ''))",
			want:       "spec.placement.filters[1].expression: Forbidden: estimated cost",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(placementPolicy("", schedv1alpha1.PlacementFilter{Name: "ok", Expression: oneRack},
				schedv1alpha1.PlacementFilter{Name: "bad", Expression: tc.expression}), CompileOptions{})
			if len(p.Errors) != 1 {
				t.Fatalf("want one error, got %v", p.Errors)
			}
			if got := p.Errors[0].Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error:\n got %s\nwant prefix %s", got, tc.want)
			}
		})
	}
}

func rackNodes(racks ...string) []*corev1.Node {
	out := make([]*corev1.Node, len(racks))
	for i, r := range racks {
		out[i] = makeNode("n"+string(rune('0'+i)), map[string]string{"rack": r})
	}
	return out
}

func TestPlacementFilter(t *testing.T) {
	c := NewCompiler(testEnv(t))
	group := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", Labels: map[string]string{"tier": "gpu"}},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}}},
	}
	type want struct {
		Verdict Verdict
		Rule    string
		Message string
		Ignored int
	}
	tests := map[string]struct {
		failurePolicy schedv1alpha1.FailurePolicyType
		filters       []schedv1alpha1.PlacementFilter
		nodes         []*corev1.Node
		want          want
		wantMessage   string
	}{
		"one rack passes": {
			filters: []schedv1alpha1.PlacementFilter{{Name: "one-rack", Expression: oneRack}},
			nodes:   rackNodes("a", "a"),
		},
		"two racks rejected": {
			filters:     []schedv1alpha1.PlacementFilter{{Name: "one-rack", Expression: oneRack, Message: "a gang stays in one rack"}},
			nodes:       rackNodes("a", "b"),
			want:        want{Verdict: Reject, Rule: "one-rack", Message: "a gang stays in one rack"},
			wantMessage: "placement p rejected by SchedulingPolicy gangs, rule placement.filters/one-rack: a gang stays in one rack",
		},
		"podGroup and count": {
			filters: []schedv1alpha1.PlacementFilter{{Name: "enough", Expression: "placement.count >= podGroup.minCount && podGroup.metadata.namespace == 'ml' && podGroup.metadata.name == 'train' && podGroup.metadata.labels['tier'] == 'gpu'"}},
			nodes:   rackNodes("a", "a", "b"),
			want:    want{Verdict: Reject, Rule: "enough", Message: "expression is false"},
		},
		"error under Fail": {
			filters: []schedv1alpha1.PlacementFilter{{Name: "missing", Expression: "placement.nodes.all(n, n.metadata.labels['zone'] != '')"}},
			nodes:   rackNodes("a"),
			want:    want{Verdict: Error, Rule: "missing"},
		},
		"error under Ignore, the next rule still applies": {
			failurePolicy: schedv1alpha1.Ignore,
			filters: []schedv1alpha1.PlacementFilter{
				{Name: "missing", Expression: "placement.nodes.all(n, n.metadata.labels['zone'] != '')"},
				{Name: "one-rack", Expression: oneRack},
			},
			nodes: rackNodes("a", "b"),
			want:  want{Verdict: Reject, Rule: "one-rack", Message: "expression is false", Ignored: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(placementPolicy(tc.failurePolicy, tc.filters...), CompileOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			in, err := NewPlacementInput("p", tc.nodes, group, group.Namespace, group.Name)
			if err != nil {
				t.Fatal(err)
			}
			d := p.PlacementFilter(context.Background(), in)
			got := want{Verdict: d.Verdict, Rule: d.Rule, Message: d.Message, Ignored: len(d.Ignored)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if tc.wantMessage != "" {
				if got := PlacementRejection("p", &d); got != tc.wantMessage {
					t.Errorf("message:\n got %s\nwant %s", got, tc.wantMessage)
				}
			}
		})
	}
}

// TestPlacementFilterCostLimit: a placement rule is tracked at runtime, so
// a rule whose estimate passes with the declared sizes (placements of
// celcost.MaxPlacementNodes nodes, 64 labels each) is still cut off at the
// per-expression limit on a larger placement, and follows failurePolicy.
func TestPlacementFilterCostLimit(t *testing.T) {
	c := NewCompiler(testEnv(t))
	p := c.Compile(placementPolicy("", schedv1alpha1.PlacementFilter{Name: "labels",
		Expression: "placement.nodes.all(n, n.metadata.labels.all(k, k != ''))"}), CompileOptions{})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for i := range 200 {
		labels[fmt.Sprintf("l%d", i)] = "x"
	}
	nodes := make([]*corev1.Node, 3000)
	for i := range nodes {
		nodes[i] = makeNode(fmt.Sprintf("n%d", i), labels)
	}
	in, err := NewPlacementInput("big", nodes, nil, "ml", "train")
	if err != nil {
		t.Fatal(err)
	}
	d := p.PlacementFilter(context.Background(), in)
	if d.Verdict != Error || !errors.Is(d.Err, celcost.ErrCostLimitExceeded) {
		t.Fatalf("decision %v, err %v: want Error with the cost limit exceeded", d.Verdict, d.Err)
	}
	small, err := NewPlacementInput("small", nodes[:10], nil, "ml", "train")
	if err != nil {
		t.Fatal(err)
	}
	if d := p.PlacementFilter(context.Background(), small); d.Verdict != Pass {
		t.Fatalf("decision on 10 nodes %v (%v), want Pass", d.Verdict, d.Err)
	}
}
