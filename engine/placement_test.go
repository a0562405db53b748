package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
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
	group := builder.Gang("ml", "train", 4, map[string]string{"tier": "gpu"})
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
		wantErr       string
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
			wantErr: "SchedulingPolicy gangs, rule missing: spec.placement.filters[0].expression: no such key: zone",
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
			in, err := NewPlacementInput("p", tc.nodes, group, group.Namespace, group.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := p.PlacementFilter(context.Background(), in)
			got := want{Verdict: d.Verdict, Rule: d.Rule, Message: d.Message, Ignored: len(d.Ignored)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if tc.wantErr != "" && (d.Err == nil || !strings.HasPrefix(d.Err.Error(), tc.wantErr)) {
				t.Errorf("error:\n got %v\nwant prefix %s", d.Err, tc.wantErr)
			}
			if tc.wantMessage != "" {
				if got := PlacementRejection("p", &d); got != tc.wantMessage {
					t.Errorf("message:\n got %s\nwant %s", got, tc.wantMessage)
				}
			}
		})
	}
}

func placementScorePolicy(failurePolicy schedv1alpha1.FailurePolicyType, scores ...schedv1alpha1.PlacementScore) *schedv1alpha1.SchedulingPolicy {
	p := placementPolicy(failurePolicy)
	p.Spec.Placement.Scores = scores
	return p
}

func TestPlacementScoreCompileErrors(t *testing.T) {
	c := NewCompiler(testEnv(t))
	tests := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		want   string
	}{
		"not a number": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "gold", Expression: "placement.count > 1"}),
			want:   "spec.placement.scores[0].expression: Invalid value: \"placement.count > 1\": must evaluate to int, uint or double, but evaluates to bool",
		},
		"no such field": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "gold", Expression: "placement.zones.size()"}),
			want:   "spec.placement.scores[0].expression: Invalid value: \"placement.zones.size()\": compilation failed: ERROR: <input>:1:10: undefined field 'zones'",
		},
		"node not available": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "gold", Expression: "node.metadata.labels.size()"}),
			want:   "spec.placement.scores[0].expression: Invalid value: \"node.metadata.labels.size()\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'node'",
		},
		"estimated cost over the limit": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "pairs",
				Expression: "placement.nodes.filter(a, placement.nodes.exists(b, a.metadata.name != b.metadata.name && a.metadata.labels == b.metadata.labels)).size()"}),
			want: "spec.placement.scores[0].expression: Forbidden: estimated cost",
		},
		// Filters run before any pod is proposed for the placement.
		"a filter reads assignedNodes": {
			policy: placementPolicy("", schedv1alpha1.PlacementFilter{Name: "spread", Expression: "placement.assignedNodes.size() > 1"}),
			want:   "spec.placement.filters[0].expression: Invalid value: \"placement.assignedNodes.size() > 1\": compilation failed: ERROR: <input>:1:10: undefined field 'assignedNodes'",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(tc.policy, CompileOptions{})
			if len(p.Errors) != 1 {
				t.Fatalf("want one error, got %v", p.Errors)
			}
			if got := p.Errors[0].Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error:\n got %s\nwant prefix %s", got, tc.want)
			}
		})
	}
}

func TestPlacementScore(t *testing.T) {
	c := NewCompiler(testEnv(t))
	const goldShare = "100 * placement.nodes.filter(n, n.metadata.labels[?'tier'] == optional.of('gold')).size() / placement.count"
	type want struct {
		Score   int64
		Verdict Verdict
		Rule    string
		Ignored int
	}
	tests := map[string]struct {
		failurePolicy schedv1alpha1.FailurePolicyType
		scores        []schedv1alpha1.PlacementScore
		nodes         []*corev1.Node
		assigned      []string
		want          want
		wantErr       string
	}{
		"an int": {
			scores: []schedv1alpha1.PlacementScore{{Name: "gold", Expression: goldShare}},
			nodes:  []*corev1.Node{makeNode("a", map[string]string{"tier": "gold"}), makeNode("b", nil), makeNode("c", nil), makeNode("d", map[string]string{"tier": "gold"})},
			want:   want{Score: 50},
		},
		"a double, rounded": {
			scores: []schedv1alpha1.PlacementScore{{Name: "d", Expression: "42.5"}},
			want:   want{Score: 43},
		},
		"clamped above": {
			scores: []schedv1alpha1.PlacementScore{{Name: "big", Expression: "250"}},
			want:   want{Score: 100},
		},
		"clamped below": {
			scores: []schedv1alpha1.PlacementScore{{Name: "negative", Expression: "-5.0"}},
			want:   want{Score: 0},
		},
		"weighted mean": {
			scores: []schedv1alpha1.PlacementScore{{Name: "high", Expression: "100", Weight: 3}, {Name: "low", Expression: "0"}},
			want:   want{Score: 75},
		},
		"the nodes assigned": {
			scores: []schedv1alpha1.PlacementScore{{Name: "gold-pods",
				Expression: "100 * placement.assignedNodes.filter(n, n.metadata.labels[?'tier'] == optional.of('gold')).size() / size(placement.assignedNodes)"}},
			nodes:    []*corev1.Node{makeNode("a", map[string]string{"tier": "gold"}), makeNode("b", nil)},
			assigned: []string{"a", "a", "a", "b"},
			want:     want{Score: 75},
		},
		"a node assigned outside the placement has its name": {
			scores:   []schedv1alpha1.PlacementScore{{Name: "names", Expression: "placement.assignedNodes.exists(n, n.metadata.name == 'z' && n.metadata.labels.size() == 0) ? 100 : 0"}},
			assigned: []string{"z"},
			want:     want{Score: 100},
		},
		"error under Fail": {
			scores:  []schedv1alpha1.PlacementScore{{Name: "ok", Expression: "100"}, {Name: "zone", Expression: "int(placement.nodes[0].metadata.labels['zone'])"}},
			nodes:   rackNodes("a"),
			want:    want{Verdict: Error, Rule: "zone"},
			wantErr: "SchedulingPolicy gangs, rule zone: spec.placement.scores[1].expression: no such key: zone",
		},
		"error under Ignore scores 0 with its weight": {
			failurePolicy: schedv1alpha1.Ignore,
			scores:        []schedv1alpha1.PlacementScore{{Name: "zone", Expression: "int(placement.nodes[0].metadata.labels['zone'])"}, {Name: "ok", Expression: "100"}},
			nodes:         rackNodes("a"),
			want:          want{Score: 50, Ignored: 1},
		},
		"a dyn that is not a number": {
			scores:  []schedv1alpha1.PlacementScore{{Name: "dyn", Expression: "dyn(placement.nodes[0].metadata.name)"}},
			nodes:   rackNodes("a"),
			want:    want{Verdict: Error, Rule: "dyn"},
			wantErr: "SchedulingPolicy gangs, rule dyn: spec.placement.scores[0].expression: evaluated to string, want int, uint or double",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(placementScorePolicy(tc.failurePolicy, tc.scores...), CompileOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			nodes := tc.nodes
			if nodes == nil {
				nodes = rackNodes("a")
			}
			assigned := tc.assigned
			if assigned == nil {
				assigned = []string{}
			}
			in, err := NewPlacementInput("p", nodes, nil, "ml", "train", assigned)
			if err != nil {
				t.Fatal(err)
			}
			scores := NewScoreCombiner(1)
			d := p.PlacementScore(context.Background(), in, scores)
			got := want{Score: scores.Mean()[0], Verdict: d.Verdict, Rule: d.Rule, Ignored: len(d.Ignored)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("score and decision (-want +got):\n%s", diff)
			}
			if tc.wantErr != "" {
				if d.Err == nil || !strings.HasPrefix(d.Err.Error(), tc.wantErr) {
					t.Errorf("error:\n got %v\nwant prefix %s", d.Err, tc.wantErr)
				}
			}
			if d.Verdict == Error {
				if got, want := d.RuleLabel(), "placement.scores/"+tc.want.Rule; got != want {
					t.Errorf("rule label %s, want %s", got, want)
				}
			}
		})
	}
}

// TestPlacementCostLimit: placement rules are tracked at runtime, so a
// rule whose estimate passes with the declared sizes (placements of
// celcost.MaxPlacementNodes nodes, 64 labels each) is still cut off at the
// per-expression limit on a larger placement, and follows failurePolicy;
// on a small placement it evaluates.
func TestPlacementCostLimit(t *testing.T) {
	c := NewCompiler(testEnv(t))
	labels := map[string]string{}
	for i := range 200 {
		labels[fmt.Sprintf("l%d", i)] = "x"
	}
	nodes := make([]*corev1.Node, 3000)
	for i := range nodes {
		nodes[i] = makeNode(fmt.Sprintf("n%d", i), labels)
	}
	tests := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		// decide decides the policy's placement rules on in, and returns
		// the score of a placement score (0 for a filter).
		decide func(p *CompiledPolicy, in *PlacementInput) (Decision, int64)
		// wantSmall is the score on the small placement.
		wantSmall int64
	}{
		"filter": {
			policy: placementPolicy("", schedv1alpha1.PlacementFilter{Name: "labels", Expression: "placement.nodes.all(n, n.metadata.labels.all(k, k != ''))"}),
			decide: func(p *CompiledPolicy, in *PlacementInput) (Decision, int64) {
				return p.PlacementFilter(context.Background(), in), 0
			},
		},
		"score": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "labels", Expression: "placement.nodes.filter(n, n.metadata.labels.all(k, k != '')).size()"}),
			decide: func(p *CompiledPolicy, in *PlacementInput) (Decision, int64) {
				scores := NewScoreCombiner(1)
				d := p.PlacementScore(context.Background(), in, scores)
				return d, scores.Mean()[0]
			},
			wantSmall: 10,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(tc.policy, CompileOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			in, err := NewPlacementInput("big", nodes, nil, "ml", "train", []string{})
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := tc.decide(p, in); d.Verdict != Error || !errors.Is(d.Err, celcost.ErrCostLimitExceeded) {
				t.Fatalf("decision %v, err %v: want Error with the cost limit exceeded", d.Verdict, d.Err)
			}
			small, err := NewPlacementInput("small", nodes[:10], nil, "ml", "train", []string{})
			if err != nil {
				t.Fatal(err)
			}
			d, score := tc.decide(p, small)
			if d.Verdict != Pass {
				t.Fatalf("decision on 10 nodes %v (%v), want Pass", d.Verdict, d.Err)
			}
			if score != tc.wantSmall {
				t.Errorf("score on 10 nodes %d, want %d", score, tc.wantSmall)
			}
		})
	}
}
