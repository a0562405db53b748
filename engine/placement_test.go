package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
		"normalization not supported": {
			policy: placementScorePolicy("", schedv1alpha1.PlacementScore{Name: "free", Expression: "placement.count", Normalization: "Log"}),
			want:   `spec.placement.scores[0].normalization: Unsupported value: "Log": supported values: "MinMax", "MinMaxReverse", "None"`,
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
		Raw     []float64
		Verdict Verdict
		Rule    string
		Ignored int
	}
	nan := math.NaN()
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
			want:   want{Raw: []float64{50}},
		},
		// Raw values are not rounded or clamped: CombineRows normalizes
		// them across the placements.
		"a double": {
			scores: []schedv1alpha1.PlacementScore{{Name: "d", Expression: "42.5"}},
			want:   want{Raw: []float64{42.5}},
		},
		"above 100": {
			scores: []schedv1alpha1.PlacementScore{{Name: "big", Expression: "250"}},
			want:   want{Raw: []float64{250}},
		},
		"negative": {
			scores: []schedv1alpha1.PlacementScore{{Name: "negative", Expression: "-5.0"}},
			want:   want{Raw: []float64{-5}},
		},
		"two rules, in order": {
			scores: []schedv1alpha1.PlacementScore{{Name: "high", Expression: "100", Weight: 3}, {Name: "low", Expression: "0u"}},
			want:   want{Raw: []float64{100, 0}},
		},
		"the nodes assigned": {
			scores: []schedv1alpha1.PlacementScore{{Name: "gold-pods",
				Expression: "100 * placement.assignedNodes.filter(n, n.metadata.labels[?'tier'] == optional.of('gold')).size() / size(placement.assignedNodes)"}},
			nodes:    []*corev1.Node{makeNode("a", map[string]string{"tier": "gold"}), makeNode("b", nil)},
			assigned: []string{"a", "a", "a", "b"},
			want:     want{Raw: []float64{75}},
		},
		"a node assigned outside the placement has its name": {
			scores:   []schedv1alpha1.PlacementScore{{Name: "names", Expression: "placement.assignedNodes.exists(n, n.metadata.name == 'z' && n.metadata.labels.size() == 0) ? 100 : 0"}},
			assigned: []string{"z"},
			want:     want{Raw: []float64{100}},
		},
		// Under Fail no rule of the policy has a value.
		"error under Fail": {
			scores:  []schedv1alpha1.PlacementScore{{Name: "ok", Expression: "100"}, {Name: "zone", Expression: "int(placement.nodes[0].metadata.labels['zone'])"}},
			nodes:   rackNodes("a"),
			want:    want{Raw: []float64{nan, nan}, Verdict: Error, Rule: "zone"},
			wantErr: "SchedulingPolicy gangs, rule zone: spec.placement.scores[1].expression: no such key: zone",
		},
		// Under Ignore the rule has no value (NaN: no part in the
		// normalization, score 0), the others have theirs.
		"error under Ignore": {
			failurePolicy: schedv1alpha1.Ignore,
			scores:        []schedv1alpha1.PlacementScore{{Name: "zone", Expression: "int(placement.nodes[0].metadata.labels['zone'])"}, {Name: "ok", Expression: "100"}},
			nodes:         rackNodes("a"),
			want:          want{Raw: []float64{nan, 100}, Ignored: 1},
		},
		"a dyn that is not a number": {
			scores:  []schedv1alpha1.PlacementScore{{Name: "dyn", Expression: "dyn(placement.nodes[0].metadata.name)"}},
			nodes:   rackNodes("a"),
			want:    want{Raw: []float64{nan}, Verdict: Error, Rule: "dyn"},
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
			// The buffer holds another placement's values: they must not
			// show.
			raw := slices.Repeat([]float64{7}, p.NumPlacementScores())
			d := p.PlacementScore(context.Background(), in, raw)
			got := want{Raw: raw, Verdict: d.Verdict, Rule: d.Rule, Ignored: len(d.Ignored)}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateNaNs()); diff != "" {
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

// freeGPUs is a placement score over 100: the free GPUs of the
// placement's nodes, from their free-gpus label (an error where a node has
// none).
const freeGPUs = "placement.nodes.map(n, int(n.metadata.labels['free-gpus'])).sum()"

// TestPlacementScoresAcrossPlacements: each placement score is normalized
// across the group's placements as a score rule is across the nodes
// (MinMax by default, MinMaxReverse, None clamping to 0..100), and the
// rules of the enforced policies are combined by weight; an Audit
// policy's rules are combined apart; a rule that failed under Ignore on a
// placement takes no part there and scores 0 for it.
func TestPlacementScoresAcrossPlacements(t *testing.T) {
	c := NewCompiler(testEnv(t))
	rack := func(name string, free ...string) *PlacementInput {
		var nodes []*corev1.Node
		for i, f := range free {
			labels := map[string]string{"rack": name}
			if f != "" {
				labels["free-gpus"] = f
			}
			nodes = append(nodes, makeNode(fmt.Sprintf("%s-%d", name, i), labels))
		}
		in, err := NewPlacementInput(name, nodes, nil, "ml", "train", []string{})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	// Free GPUs: rack a 120, b 300, c 480.
	threeRacks := []*PlacementInput{rack("a", "64", "56"), rack("b", "150", "150"), rack("c", "240", "240")}
	score := func(name string, normalization schedv1alpha1.ScoreNormalization, weight int32) schedv1alpha1.PlacementScore {
		return schedv1alpha1.PlacementScore{Name: name, Expression: freeGPUs, Normalization: normalization, Weight: weight}
	}
	audit := func(p *schedv1alpha1.SchedulingPolicy) *schedv1alpha1.SchedulingPolicy {
		p.Name, p.Spec.Enforcement = "audit", schedv1alpha1.Audit
		return p
	}
	tests := map[string]struct {
		policies   []*schedv1alpha1.SchedulingPolicy
		placements []*PlacementInput
		want       []int64
		wantAudit  []int64
	}{
		"MinMax by default: the most free GPUs wins": {
			policies: []*schedv1alpha1.SchedulingPolicy{placementScorePolicy("", score("free", "", 0))},
			want:     []int64{0, 50, 100},
		},
		"MinMaxReverse: the fewest free GPUs wins": {
			policies: []*schedv1alpha1.SchedulingPolicy{placementScorePolicy("", score("free", schedv1alpha1.MinMaxReverse, 0))},
			want:     []int64{100, 50, 0},
		},
		"None clamps to 0..100": {
			policies: []*schedv1alpha1.SchedulingPolicy{placementScorePolicy("", score("free", schedv1alpha1.None, 0))},
			want:     []int64{100, 100, 100},
		},
		"weights": {
			policies: []*schedv1alpha1.SchedulingPolicy{
				placementScorePolicy("", score("most", schedv1alpha1.MinMax, 3)),
				placementScorePolicy("", score("fewest", schedv1alpha1.MinMaxReverse, 1)),
			},
			want: []int64{25, 50, 75}, // (0*3 + 100)/4, (50*3 + 50)/4, (100*3 + 0)/4
		},
		"an Audit policy is combined apart": {
			policies: []*schedv1alpha1.SchedulingPolicy{
				placementScorePolicy("", score("most", "", 0)),
				audit(placementScorePolicy("", score("fewest", schedv1alpha1.MinMaxReverse, 0))),
			},
			want:      []int64{0, 50, 100},
			wantAudit: []int64{100, 50, 0},
		},
		"equal values all score 100": {
			policies:   []*schedv1alpha1.SchedulingPolicy{placementScorePolicy("", score("free", "", 0))},
			placements: []*PlacementInput{rack("a", "150"), rack("b", "100", "50")},
			want:       []int64{100, 100},
		},
		// Rack d has a node without the label: the rule fails there, and
		// the others are normalized among themselves.
		"an error under Ignore": {
			policies:   []*schedv1alpha1.SchedulingPolicy{placementScorePolicy(schedv1alpha1.Ignore, score("free", "", 0))},
			placements: []*PlacementInput{rack("a", "64", "56"), rack("d", "400", ""), rack("c", "240", "240")},
			want:       []int64{0, 0, 100},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			placements := tc.placements
			if placements == nil {
				placements = threeRacks
			}
			var compiled []*CompiledPolicy
			var rules []WeightedRule
			for _, policy := range tc.policies {
				p := c.Compile(policy, CompileOptions{})
				if err := p.Err(); err != nil {
					t.Fatal(err)
				}
				compiled = append(compiled, p)
				rules = append(rules, p.PlacementScoreRules()...)
			}
			rows := make([][]float64, len(placements))
			for i, in := range placements {
				for _, p := range compiled {
					raw := make([]float64, p.NumPlacementScores())
					if d := p.PlacementScore(context.Background(), in, raw); d.Verdict != Pass {
						t.Fatalf("placement %s: %v (%v)", in.Name, d.Verdict, d.Err)
					}
					rows[i] = append(rows[i], raw...)
				}
			}
			var b CombineBuffers
			if diff := cmp.Diff(tc.want, CombineRows(make([]int64, len(rows)), rows, rules, false, &b)); diff != "" {
				t.Errorf("enforced (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAudit, CombineRows(make([]int64, len(rows)), rows, rules, true, &b)); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
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
				raw := make([]float64, 1)
				d := p.PlacementScore(context.Background(), in, raw)
				return d, int64(raw[0])
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
