package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

func compileOK(t *testing.T, p *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	t.Helper()
	compiled := NewCompiler(testEnv(t)).Compile(p, CompileOptions{})
	if err := compiled.Err(); err != nil {
		t.Fatalf("compile: %v", err)
	}
	return compiled
}

func podInput(t *testing.T, conv *Converter, podLabels, nsLabels map[string]string) *PodInput {
	t.Helper()
	in, err := conv.Pod(makePod("team-a", "p", podLabels), makeNamespace("team-a", nsLabels))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func nodeInput(t *testing.T, conv *Converter, name string, nodeLabels map[string]string, info *NodeInfo) *NodeInput {
	t.Helper()
	in, err := conv.Node(makeNode(name, nodeLabels), func() *NodeInfo { return info })
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// rejection is the part of a Reject decision TestFilter compares.
type rejection struct{ Rule, Message string }

func TestFilter(t *testing.T) {
	t.Parallel()
	zoneFilter := "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in ['a', 'b']"
	tests := map[string]struct {
		policy     *schedv1alpha1.SchedulingPolicy
		nodeLabels map[string]string
		info       *NodeInfo
		want       *rejection
		wantErr    string
	}{
		"label passes": {
			policy:     builder.MakePolicy("p").Filter("zone", zoneFilter).Obj(),
			nodeLabels: map[string]string{"topology.kubernetes.io/zone": "a"},
		},
		"label fails with default message": {
			policy:     builder.MakePolicy("p").Filter("zone", zoneFilter).Obj(),
			nodeLabels: map[string]string{"topology.kubernetes.io/zone": "c"},
			want:       &rejection{Rule: "zone", Message: "expression is false"},
		},
		"static message": {
			policy:     builder.MakePolicy("p").FilterMsg("zone", zoneFilter, "node is not in zone a or b", "").Obj(),
			nodeLabels: map[string]string{},
			want:       &rejection{Rule: "zone", Message: "node is not in zone a or b"},
		},
		"messageExpression wins over message": {
			policy: builder.MakePolicy("p").FilterMsg("zone", zoneFilter, "static",
				"'zone ' + node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('none') + ' is not allowed'").Obj(),
			nodeLabels: map[string]string{"topology.kubernetes.io/zone": "c"},
			want:       &rejection{Rule: "zone", Message: "zone c is not allowed"},
		},
		"messageExpression failing falls back to message": {
			policy:     builder.MakePolicy("p").FilterMsg("zone", zoneFilter, "static", "node.metadata.labels['missing']").Obj(),
			nodeLabels: map[string]string{"topology.kubernetes.io/zone": "c"},
			want:       &rejection{Rule: "zone", Message: "static"},
		},
		"first false rule of several": {
			policy:     builder.MakePolicy("p").Filter("one", "true").Filter("two", "false").Filter("three", "false").Obj(),
			nodeLabels: map[string]string{},
			want:       &rejection{Rule: "two", Message: "expression is false"},
		},
		"variables": {
			policy: builder.MakePolicy("p").Variable("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('')").
				Variable("allowed", "variables.zone in ['a']").Filter("zone", "variables.allowed").Obj(),
			nodeLabels: map[string]string{"topology.kubernetes.io/zone": "b"},
			want:       &rejection{Rule: "zone", Message: "expression is false"},
		},
		"nodeInfo": {
			policy:     builder.MakePolicy("p").Filter("room", "nodeInfo.podCount < 2 && nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu'] >= 500").Obj(),
			nodeLabels: map[string]string{},
			info: &NodeInfo{
				Allocatable: map[string]int64{"cpu": 8000}, Requested: map[string]int64{"cpu": 7600},
				Pods: []PodRef{{Namespace: "a", Name: "x"}},
			},
			want: &rejection{Rule: "room", Message: "expression is false"},
		},
		"nodeInfo pods": {
			policy:     builder.MakePolicy("p").Filter("no-same-app", "!nodeInfo.pods.exists(p, p.labels[?'app'].orValue('') == 'web')").Obj(),
			nodeLabels: map[string]string{},
			info:       &NodeInfo{Pods: []PodRef{{Namespace: "a", Name: "x", Labels: map[string]string{"app": "web"}}}},
			want:       &rejection{Rule: "no-same-app", Message: "expression is false"},
		},
		"pod and namespace": {
			policy:     builder.MakePolicy("p").Filter("ns", "namespaceObject.metadata.labels['team'] == 'ml' && pod.metadata.name == 'p'").Obj(),
			nodeLabels: map[string]string{},
		},
		"runtime error names policy, rule and field": {
			policy:     builder.MakePolicy("p").Filter("missing-label", "node.metadata.labels['gpu'] == 'true'").Obj(),
			nodeLabels: map[string]string{},
			wantErr:    "SchedulingPolicy p, rule missing-label: spec.filters[0].expression: no such key: gpu",
		},
		"runtime error in a variable names the variable": {
			policy: builder.MakePolicy("p").Variable("gpu", "node.metadata.labels['gpu']").
				Filter("gpu", "variables.gpu == 'true'").Obj(),
			nodeLabels: map[string]string{},
			wantErr:    "SchedulingPolicy p, rule gpu: spec.variables[0].expression: no such key: gpu",
		},
	}
	conv := NewConverter(testEnv(t), 0)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compileOK(t, tc.policy)
			pod := podInput(t, conv, nil, map[string]string{"team": "ml"})
			node := nodeInput(t, conv, "n1", tc.nodeLabels, tc.info)
			d := p.Filter(context.Background(), pod, node)
			err := d.Err
			if tc.wantErr != "" {
				if d.Verdict != Error {
					t.Fatalf("verdict %v, want Error", d.Verdict)
				}
				var evalErr *EvalError
				if !errors.As(err, &evalErr) {
					t.Fatalf("want an *EvalError, got %v", err)
				}
				if err.Error() != tc.wantErr {
					t.Fatalf("error:\n got %s\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got *rejection
			if d.Verdict == Reject {
				got = &rejection{Rule: d.Rule, Message: d.Message}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rejection (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVariablesEvaluatedOnce(t *testing.T) {
	t.Parallel()
	// The variable costs a lot; if it were evaluated per reference, the
	// evaluation cost would be three times as large.
	p := compileOK(t, builder.MakePolicy("p").Variable("n", "nodeInfo.pods.filter(p, p.name.startsWith('x')).size()").
		Filter("a", "variables.n >= 0").Filter("b", "variables.n >= 0").Filter("c", "variables.n >= 0").Obj())
	conv := NewConverter(testEnv(t), 0)
	calls := 0
	node, err := conv.Node(makeNode("n", nil), func() *NodeInfo { calls++; return &NodeInfo{Pods: []PodRef{{Name: "x1"}}} })
	if err != nil {
		t.Fatal(err)
	}
	ev := &lazy{ctx: context.Background(), policy: p, pod: podInput(t, conv, nil, nil)}
	d := Decision{Policy: p, Point: PointFilter}
	p.firstFalse(&d, ev, node, p.filters, Reject)
	if d.Verdict != Pass {
		t.Fatalf("got %s", d.String())
	}
	if calls != 1 {
		t.Errorf("nodeInfo built %d times, want 1", calls)
	}
	single := &lazy{ctx: context.Background(), policy: p, pod: podInput(t, conv, nil, nil)}
	if _, err := single.eval(node, &p.filters[0].expr); err != nil {
		t.Fatal(err)
	}
	// Three filters reading the variable cost little more than one.
	if ev.account.spent >= 2*single.account.spent {
		t.Errorf("three filters spent %d, one filter %d: the variable was charged more than once", ev.account.spent, single.account.spent)
	}
}

func TestScore(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").
		Score("free-cpu", "nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu']", 2, schedv1alpha1.MinMax).
		Score("spot", "node.metadata.labels[?'spot'].orValue('') == 'true' ? 100.0 : 0.0", 1, schedv1alpha1.None).
		Score("uint", "1u", 1, schedv1alpha1.None).Obj())
	conv := NewConverter(testEnv(t), 0)
	node := nodeInput(t, conv, "n", map[string]string{"spot": "true"},
		&NodeInfo{Allocatable: map[string]int64{"cpu": 4000}, Requested: map[string]int64{"cpu": 1500}})
	got := make([]float64, 3)
	if d := p.Score(context.Background(), podInput(t, conv, nil, nil), node, got); d.Verdict != Pass {
		t.Fatal(d.String())
	}
	if diff := cmp.Diff([]float64{2500, 100, 1}, got); diff != "" {
		t.Errorf("raw scores (-want +got):\n%s", diff)
	}
	want := []ScoreRuleInfo{
		{Name: "free-cpu", Weight: 2, Normalization: schedv1alpha1.MinMax},
		{Name: "spot", Weight: 1, Normalization: schedv1alpha1.None},
		{Name: "uint", Weight: 1, Normalization: schedv1alpha1.None},
	}
	if diff := cmp.Diff(want, p.ScoreRules()); diff != "" {
		t.Errorf("score rules (-want +got):\n%s", diff)
	}
}

func TestScoreNotFinite(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").Score("nan", "0.0 / 0.0", 1, schedv1alpha1.MinMax).Obj())
	conv := NewConverter(testEnv(t), 0)
	err := p.Score(context.Background(), podInput(t, conv, nil, nil), nodeInput(t, conv, "n", nil, nil), make([]float64, 1)).Err
	if err == nil || !strings.Contains(err.Error(), "want a finite number") {
		t.Fatalf("want a finite-number error, got %v", err)
	}
}

// TestPodConvertedOnlyWhenRead: a pod is converted to its CEL value on the
// first read of `pod`, once per PodInput: node-only policies never pay for
// it, and what a pod-reading rule sees is the pod.
func TestPodConvertedOnlyWhenRead(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	nodeOnly := compileOK(t, builder.MakePolicy("node-only").Filter("zone", "node.metadata.labels[?'zone'].orValue('') != 'blocked'").Obj())
	podReading := compileOK(t, builder.MakePolicy("pod-reading").Filter("app", "pod.metadata.labels[?'app'].orValue('') == 'web'").Obj())
	in := podInput(t, conv, map[string]string{"app": "web"}, nil)
	node := nodeInput(t, conv, "n1", map[string]string{"zone": "a"}, nil)
	if d := nodeOnly.Filter(context.Background(), in, node); d.Verdict != Pass {
		t.Fatalf("node-only: %s", d.String())
	}
	if in.pod.Load() != nil {
		t.Fatal("a node-only policy converted the pod")
	}
	if d := podReading.Filter(context.Background(), in, node); d.Verdict != Pass {
		t.Fatalf("pod-reading: %s", d.String())
	}
	first := in.pod.Load()
	if first == nil {
		t.Fatal("a pod-reading policy passed without the pod's value")
	}
	other := nodeInput(t, conv, "n2", map[string]string{"zone": "b"}, nil)
	if d := podReading.Filter(context.Background(), in, other); d.Verdict != Pass || in.pod.Load() != first {
		t.Fatalf("second node: %s, converted again: %v", d.String(), in.pod.Load() != first)
	}
}

// TestNodeInfoPodsLazy: nodeInfo.pods is converted on first read only,
// and reads as a list in every form a rule may use: through the engine's
// rules, and on one value with CEL alone (where its conversion shows).
func TestNodeInfoPodsLazy(t *testing.T) {
	t.Parallel()
	info := &NodeInfo{
		Allocatable: map[string]int64{"cpu": 8000}, Requested: map[string]int64{"cpu": 100},
		Pods: []PodRef{{Namespace: "a", Name: "x", Labels: map[string]string{"app": "web"}}, {Namespace: "b", Name: "y"}},
	}
	exprs := []string{
		"nodeInfo.pods.exists(p, p.labels[?'app'].orValue('') == 'web')",
		"nodeInfo.pods.all(i, p, i < 2 && p.name.size() == 1)",
		"nodeInfo.pods[1].name == 'y' && nodeInfo.pods[0].namespace == 'a'",
		"nodeInfo.pods.map(p, p.name) == ['x', 'y']",
		"nodeInfo.pods == nodeInfo.pods && nodeInfo.pods != []",
		"size(nodeInfo.pods + nodeInfo.pods) == 4",
		"nodeInfo.pods.filter(p, p.namespace == 'b').size() == 1",
	}
	conv := NewConverter(testEnv(t), 0)
	pod := podInput(t, conv, nil, nil)
	for i, expr := range exprs {
		node := nodeInput(t, conv, fmt.Sprintf("n%d", i), nil, info)
		p := compileOK(t, builder.MakePolicy("p").Filter("pods", expr).Obj())
		if d := p.Filter(context.Background(), pod, node); d.Verdict != Pass {
			t.Errorf("rule %s: %s", expr, d.String())
		}
	}

	env, err := cel.NewEnv(cel.Variable("nodeInfo", cel.DynType), cel.OptionalTypes(), ext.TwoVarComprehensions())
	if err != nil {
		t.Fatal(err)
	}
	eval := func(expr string, v ref.Val) {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"nodeInfo": v})
		if err != nil || out != types.True {
			t.Errorf("%s: %v, %v; want true", expr, out, err)
		}
	}
	pods := func(v ref.Val) *lazyList {
		t.Helper()
		l, ok := v.(traits.Mapper).Get(types.String("pods")).(*lazyList)
		if !ok {
			t.Fatalf("nodeInfo.pods is %T, want the lazy list", v.(traits.Mapper).Get(types.String("pods")))
		}
		return l
	}
	v := info.value()
	eval("nodeInfo.allocatable['cpu'] > nodeInfo.requested['cpu'] && nodeInfo.podCount == 2 && size(nodeInfo.pods) == 2", v)
	if pods(v).list != nil {
		t.Errorf("nodeInfo.pods converted by an expression that reads its size only")
	}
	for _, expr := range exprs {
		v := info.value()
		eval(expr, v)
		if pods(v).list == nil {
			t.Errorf("%s: nodeInfo.pods read and not converted", expr)
		}
	}
}
