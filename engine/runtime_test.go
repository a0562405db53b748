package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
)

// manyPods is a node with n pods, for expressions that loop over them.
func manyPods(n int) *NodeInfo {
	info := &NodeInfo{}
	for i := range n {
		info.Pods = append(info.Pods, PodRef{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": "web"}})
	}
	return info
}

// TestRuntimeCostLimit: an expression that loops over a long list is cut off
// by the per-expression limit with a clear error, quickly, and the error
// names policy, rule and field.
func TestRuntimeCostLimit(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("loops").
		Filter("quadratic", "nodeInfo.pods.all(a, nodeInfo.pods.all(b, a.name != ''))").Obj())
	conv := NewConverter(testEnv(t), 0)
	node := nodeInput(t, conv, "big", nil, manyPods(5000))
	err := p.Filter(context.Background(), podInput(t, conv, nil, nil), node).Err
	var evalErr *EvalError
	if !errors.As(err, &evalErr) {
		t.Fatalf("want *EvalError, got %v", err)
	}
	if evalErr.Policy != "loops" || evalErr.Rule != "quadratic" || evalErr.Field != "spec.filters[0].expression" {
		t.Errorf("error names %s/%s/%s", evalErr.Policy, evalErr.Rule, evalErr.Field)
	}
	if !strings.Contains(err.Error(), "operation cancelled: actual cost limit exceeded") {
		t.Errorf("error %q does not say the cost limit was exceeded", err)
	}
}

// TestPolicyCostBudget: the costs of the expressions of one evaluation add
// up, and the evaluation stops once they pass the policy's budget. (Filling
// the budget of 1e7 with real loops takes tens of seconds with cel-go's cost
// tracker, so the evaluation starts just under it.)
func TestPolicyCostBudget(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("budget").
		Filter("loop", "nodeInfo.pods.all(p, p.name != '')").
		Filter("label", zoneFilter).Obj())
	conv := NewConverter(testEnv(t), 0)
	node := nodeInput(t, conv, "n", map[string]string{"topology.kubernetes.io/zone": "a"}, manyPods(100))

	ev := &lazy{ctx: context.Background(), policy: p, pod: podInput(t, conv, nil, nil)}
	if _, err := ev.evalBool(node, &p.filters[0].expr); err != nil {
		t.Fatal(err)
	}
	if ev.account.spent < 100 {
		t.Fatalf("a loop over 100 pods was charged %d", ev.account.spent)
	}
	afterLoop := ev.account.spent
	if _, err := ev.evalBool(node, &p.filters[1].expr); err != nil {
		t.Fatal(err)
	}
	if ev.account.spent <= afterLoop {
		t.Fatalf("the second filter charged nothing (%d then %d)", afterLoop, ev.account.spent)
	}

	ev = &lazy{ctx: context.Background(), policy: p, pod: podInput(t, conv, nil, nil)}
	ev.account.spent = celcost.PolicyEvaluationCostBudget - 1
	d := Decision{Policy: p, Point: PointFilter}
	p.firstFalse(&d, ev, node, p.filters, Reject)
	err := d.Err
	if !errors.Is(err, ErrCostBudgetExceeded) {
		t.Fatalf("want ErrCostBudgetExceeded, got %v", err)
	}
	if want := "SchedulingPolicy budget, rule loop: spec.filters[0].expression: policy evaluation exceeded its cost budget of 10000000"; err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
}

// TestCancellation: a cancelled context stops evaluation with the context's
// cause, for bounded and tracked programs alike.
func TestCancellation(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	for name, expression := range map[string]string{
		"bounded": "node.metadata.name != ''",
		"tracked": "nodeInfo.pods.all(a, nodeInfo.pods.all(b, a.name != ''))",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compileOK(t, builder.MakePolicy("p").Stored().Filter("f", expression).Obj())
			ctx, cancel := context.WithCancelCause(context.Background())
			cause := errors.New("scheduling cycle aborted")
			cancel(cause)
			err := p.Filter(ctx, podInput(t, conv, nil, nil), nodeInput(t, conv, "n", nil, manyPods(10))).Err
			if !errors.Is(err, cause) {
				t.Fatalf("want the context's cause, got %v", err)
			}
		})
	}
}

// TestBoundedAndTrackedAgree evaluates expressions with both kinds of
// program and requires the same values: the bounded planner must not change
// the language.
func TestBoundedAndTrackedAgree(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	conv := NewConverter(env, 0)
	pod := podInput(t, conv, map[string]string{"app": "web"}, map[string]string{"team": "ml", "cost-center": "42"})
	node := nodeInput(t, conv, "n1", map[string]string{"topology.kubernetes.io/zone": "a", "spot": "true"},
		&NodeInfo{Allocatable: map[string]int64{"cpu": 4000}, Requested: map[string]int64{"cpu": 1000}, Pods: []PodRef{{Namespace: "a", Name: "x"}}})
	expressions := []string{
		zoneFilter,
		"node.metadata.labels[?'missing'].or(optional.of('x')).value() == 'x'",
		"node.metadata.?labels[?'spot'].orValue('false') == 'true'",
		"node.metadata.name.matches('^n[0-9]+$')",
		"node.metadata.name.find('[0-9]+') == '1'",
		"quantity(node.status.allocatable['cpu']).isGreaterThan(quantity('2'))",
		"namespaceObject.metadata.labels['team'] + '-' + pod.metadata.labels['app']",
		"pod.metadata.namespace",
		"pod.metadata.__namespace__ == pod.metadata.namespace",
		"cel.bind(z, node.metadata.labels[?'topology.kubernetes.io/zone'].orValue(''), z + z)",
		"sets.contains(['a', 'b'], ['a'])",
		"[3, 1, 2].sort()",
		"'a,b'.split(',')",
		"ip('10.0.0.1').family()",
		"cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))",
		"isSemver('1.2.3') && semver('1.2.3').major() == 1",
		"format.dns1123Label().validate('Not_Valid').hasValue()",
		"pod.metadata.creationTimestamp == null || true",
		"nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu']",
		"pod.spec.containers.map(c, c.name)",
		"duration('1h') > duration('30m')",
		"1 / 0",
	}
	for _, x := range expressions {
		t.Run(x, func(t *testing.T) {
			pe, err := env.newPolicyEnv()
			if err != nil {
				t.Fatal(err)
			}
			pc := &policyCompiler{env: pe, out: &CompiledPolicy{Program: &Program{variableIndex: map[string]int{}}}, stored: func(string) bool { return false }, scalarVariables: map[string]bool{}}
			c := pc.check(nil, x, outputAny, nodeScope, "")
			if c == nil {
				t.Fatalf("compile: %v", pc.out.Errors)
			}
			bounded, err := celcost.NewBounded(c.env, c.ast, 0)
			if err != nil {
				t.Fatal(err)
			}
			tracked, err := celcost.NewTracked(c.env, c.ast, celcost.PerExpressionCostLimit)
			if err != nil {
				t.Fatal(err)
			}
			p := &CompiledPolicy{Program: &Program{Name: "p"}}
			bv, berr := asError(bounded.Eval(context.Background(), p.newEvaluation(context.Background(), pod, node)))
			tv, terr := asError(tracked.Eval(context.Background(), p.newEvaluation(context.Background(), pod, node)))
			if (berr == nil) != (terr == nil) {
				t.Fatalf("bounded error %v, tracked error %v", berr, terr)
			}
			if bv == nil || tv == nil {
				if fmt.Sprint(bv) != fmt.Sprint(tv) {
					t.Fatalf("bounded %v, tracked %v", bv, tv)
				}
				return
			}
			if bv.Equal(tv) != types.True && fmt.Sprint(bv.Value()) != fmt.Sprint(tv.Value()) {
				t.Errorf("bounded %v (%T), tracked %v (%T)", bv, bv, tv, tv)
			}
		})
	}
}

// asError turns an error value into an error, as evaluation.eval does.
func asError(v ref.Val, _ uint64, err error) (ref.Val, error) {
	if err == nil && types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	return v, err
}

// TestScopeErrors checks the scoping rules through the compiler's API.
func TestScopeErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		want   string // the only error, "" for none
	}{
		"pod-only variable in preEnqueue": {
			policy: builder.MakePolicy("p").Stored().Variable("app", "pod.metadata.?labels[?'app'].orValue('')").
				PreEnqueue("app", "variables.app != ''", "").Obj(),
		},
		"node variable through another variable": {
			policy: builder.MakePolicy("p").Stored().Variable("zone", "node.metadata.labels[?'z'].orValue('')").
				Variable("isA", "variables.zone == 'a'").PreEnqueue("a", "variables.isA", "").Obj(),
			want: "spec.preEnqueue[0].expression",
		},
		"node in a condition": {
			policy: builder.MakePolicy("p").Stored().Condition("c", "node.metadata.name == 'x'").Filter("f", "true").Obj(),
			want:   "spec.match.conditions[0].expression",
		},
		"node in a preEnqueue messageExpression": {
			policy: builder.MakePolicy("p").Stored().Obj(),
			want:   "spec.preEnqueue[0].messageExpression",
		},
		"everything in filters": {
			policy: builder.MakePolicy("p").Stored().Filter("f", "pod.metadata.name != node.metadata.name && nodeInfo.podCount >= 0 && namespaceObject.metadata.name != ''").Obj(),
		},
	}
	tests["node in a preEnqueue messageExpression"].policy.Spec.PreEnqueue = []schedv1alpha1.Rule{{
		Name: "m", Expression: "false", MessageExpression: "node.metadata.name",
	}}
	compiler := NewCompiler(testEnv(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := compiler.Compile(tc.policy, CompileOptions{})
			var fields []string
			for _, e := range got.Errors {
				fields = append(fields, e.Field)
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if diff := cmp.Diff(want, fields); diff != "" {
				t.Errorf("error fields (-want +got):\n%s\n%v", diff, got.Errors)
			}
		})
	}
}

// TestStoredExpressionsRatchet: an expression unchanged from the stored
// policy compiles against the stored-expressions environment.
func TestStoredExpressionsRatchet(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	previous := builder.MakePolicy("p").Stored().Filter("f", "true").Obj()
	updated := builder.MakePolicy("p").Stored().Filter("f", "true").Filter("g", "false").Obj()
	stored := storedExpressions(CompileOptions{Previous: previous})
	if !stored("true") || stored("false") {
		t.Errorf("stored(true)=%v stored(false)=%v, want true and false", stored("true"), stored("false"))
	}
	if err := compiler.Compile(updated, CompileOptions{Previous: previous}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRegistry: the registry applies events in the order given (its one
// writer is the scheduler's informer); an old snapshot never changes; a
// version of the same object and generation is not compiled again; a policy
// deleted and re-created under its name is the new object.
func TestRegistry(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	r := NewRegistry(compiler)
	a := builder.MakePolicy("a").Stored().Filter("f", "true").Obj()
	b := builder.MakePolicy("b").Stored().Filter("f", "broken(").Obj()
	before := r.Snapshot()
	ca := r.Upsert(a)
	cb := r.Upsert(b)
	if cb.Err() == nil {
		t.Fatal("broken policy compiled")
	}
	if before.Len() != 0 {
		t.Errorf("an old snapshot changed: %d policies", before.Len())
	}
	snap := r.Snapshot()
	if got := []string{snap.Policies()[0].Name, snap.Policies()[1].Name}; !cmp.Equal(got, []string{"a", "b"}) {
		t.Errorf("policies %v", got)
	}
	// A status update (new resourceVersion, same generation) is not
	// compiled again; a new generation is, alone.
	statusOnly := builder.MakePolicy("a").Stored().Filter("f", "true").Generation(1, "2").Obj()
	if r.Upsert(statusOnly) != ca {
		t.Error("a status update recompiled the policy")
	}
	a2 := builder.MakePolicy("a").Stored().Filter("f", "false").Generation(2, "3").Obj()
	ca2 := r.Upsert(a2)
	if ca2 == ca || ca2.Generation != 2 || r.Snapshot().Get("b") != cb {
		t.Error("updating a did not replace only a")
	}
	if !r.Delete("a") || r.Delete("a") {
		t.Error("Delete did not report presence")
	}
	if r.Snapshot().Get("a") != nil || snap.Get("a") != ca {
		t.Error("delete changed the wrong snapshot")
	}
	// Re-created with the same name and generation 1: a new object.
	recreated := builder.MakePolicy("a").Stored().UID("uid-a-2").Filter("g", "false").Obj()
	if got := r.Upsert(recreated); got.UID != "uid-a-2" || r.Snapshot().Get("a") != got || got.FilterRuleNames()[0] != "g" {
		t.Error("a re-created policy was not added")
	}
	// Re-created without a delete in between (the informer folded them):
	// the new UID replaces the old object, even at the same generation.
	again := builder.MakePolicy("a").Stored().UID("uid-a-3").Filter("h", "false").Obj()
	if got := r.Upsert(again); got.UID != "uid-a-3" || got.FilterRuleNames()[0] != "h" {
		t.Error("a re-created policy at the same generation was not replaced")
	}
}

// TestRegistryConcurrent runs readers against writers (meaningful under -race).
func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRegistry(NewCompiler(testEnv(t)))
	conv := NewConverter(testEnv(t), 0)
	pod := podInput(t, conv, nil, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					r.Snapshot().Match(context.Background(), pod, nil)
				}
			}
		}()
	}
	for i := range 20 {
		p := builder.MakePolicy(fmt.Sprintf("p%d", i%5)).Filter("f", "true").Generation(int64(i+1), fmt.Sprint(i+1)).Obj()
		r.Upsert(p)
		if i%3 == 0 {
			r.Delete(fmt.Sprintf("p%d", (i+1)%5))
		}
	}
	close(done)
	wg.Wait()
}

func TestMatch(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	conv := NewConverter(testEnv(t), 0)
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("all").Filter("f", "true").Obj(),
		builder.MakePolicy("ml-namespaces").NamespaceLabels(map[string]string{"team": "ml"}).Filter("f", "true").Obj(),
		builder.MakePolicy("web-pods").PodLabels(map[string]string{"app": "web"}).Filter("f", "true").Obj(),
		builder.MakePolicy("other-scheduler").SchedulerNames("other").Filter("f", "true").Obj(),
		builder.MakePolicy("condition-true").Condition("c", "pod.metadata.name == 'p'").Filter("f", "true").Obj(),
		builder.MakePolicy("condition-false").Condition("c", "pod.metadata.name == 'q'").Filter("f", "true").Obj(),
		builder.MakePolicy("condition-error").Condition("c", "pod.metadata.labels['missing'] == 'x'").Filter("f", "true").Obj(),
		builder.MakePolicy("broken").Filter("f", "nope").Obj(),
	}
	var compiled []*CompiledPolicy
	for _, p := range policies {
		compiled = append(compiled, compiler.Compile(p, CompileOptions{}))
	}
	snap := NewSnapshot(compiled...)
	pod := podInput(t, conv, map[string]string{"app": "db"}, map[string]string{"team": "ml"})
	var got []string
	for _, m := range snap.Match(context.Background(), pod, nil) {
		got = append(got, fmt.Sprintf("%s(err=%v)", m.Decision.Policy.Name, m.Decision.Err != nil))
	}
	want := []string{"all(err=false)", "broken(err=true)", "condition-error(err=true)", "condition-true(err=false)", "ml-namespaces(err=false)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("matches (-want +got):\n%s", diff)
	}
}
