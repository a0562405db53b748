package metrics

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestCount: a decision counts each rule it evaluated: allow before the
// deciding rule (error for a rule that failed under Ignore), deny or error
// at the deciding rule, nothing after it.
func TestCount(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	compiler := engine.NewCompiler(env)
	boom := func(rule string) error { return &engine.EvalError{Rule: rule, Err: errors.New("boom")} }
	cases := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		d      engine.Decision
		want   [][3]float64 // allow, deny, error per filter a, b, c
	}{
		"all pass":        {d: engine.Decision{}, want: [][3]float64{{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}},
		"second is false": {d: engine.Decision{Verdict: engine.Reject, Rule: "b"}, want: [][3]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 0}}},
		"first fails":     {d: engine.Decision{Verdict: engine.Error, Rule: "a", Err: boom("a")}, want: [][3]float64{{0, 0, 1}, {0, 0, 0}, {0, 0, 0}}},
		"third fails":     {d: engine.Decision{Verdict: engine.Error, Rule: "c", Err: boom("c")}, want: [][3]float64{{1, 0, 0}, {1, 0, 0}, {0, 0, 1}}},
		"first ignored, third false": {d: engine.Decision{Verdict: engine.Reject, Rule: "c", Ignored: []error{boom("a")}},
			want: [][3]float64{{0, 0, 1}, {1, 0, 0}, {0, 1, 0}}},
		"does not compile": {policy: builder.MakePolicy("broken").Filter("a", "nope").Obj(), d: engine.Decision{Verdict: engine.Error},
			want: [][3]float64{{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			EvaluationsTotal.Reset()
			policy := tc.policy
			if policy == nil {
				policy = builder.MakePolicy("p").Filter("a", "true").Filter("b", "true").Filter("c", "true").Obj()
			}
			tc.d.Policy = compiler.Compile(policy, engine.CompileOptions{})
			tc.d.Point = engine.PointFilter
			var c Counters
			c.Count(&tc.d)
			got := make([][3]float64, 3)
			for i, rule := range []string{"filters/a", "filters/b", "filters/c"} {
				for j, result := range []string{ResultAllow, ResultDeny, ResultError} {
					got[i][j] = testutil.ToFloat64(EvaluationsTotal.WithLabelValues(policy.Name, rule, result))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}
