package metrics

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestTallyAgreesWithCount: random decisions of three policies on many
// nodes, counted through a cycle's Tally (as the plugins do: runs of plain
// passes, the other decisions one by one, one Flush) and one by one
// through Count, give the same celsched_policy_evaluations_total.
func TestTallyAgreesWithCount(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	compiler := engine.NewCompiler(env)
	var policies []*engine.CompiledPolicy
	for i := range 3 {
		policies = append(policies, compiler.Compile(builder.MakePolicy(fmt.Sprintf("p%d", i)).
			Filter("a", "true").Filter("b", "true").Filter("c", "true").
			Score("s", "1", 1, "").Score("t", "2", 1, "").Obj(), engine.CompileOptions{}))
	}
	rules := map[engine.Point][]string{engine.PointFilter: {"a", "b", "c"}, engine.PointScore: {"s", "t"}}
	rng := rand.New(rand.NewPCG(3, 4))
	decision := func(point engine.Point, p *engine.CompiledPolicy) engine.Decision {
		d := engine.Decision{Policy: p, Point: point}
		names := rules[point]
		rule := names[rng.IntN(len(names))]
		switch rng.IntN(6) {
		case 0:
			if point == engine.PointFilter {
				d.Verdict, d.Rule = engine.Reject, rule
			}
		case 1:
			d.Verdict, d.Rule, d.Err = engine.Error, rule, &engine.EvalError{Rule: rule, Err: errors.New("boom")}
		case 2:
			d.Ignored = []error{&engine.EvalError{Rule: rule, Err: errors.New("ignored")}}
		}
		return d
	}
	for _, point := range []engine.Point{engine.PointFilter, engine.PointScore} {
		var nodes [][]engine.Decision
		for range 500 {
			var ds []engine.Decision
			for _, p := range policies {
				d := decision(point, p)
				ds = append(ds, d)
				if d.Verdict != engine.Pass && rng.IntN(2) == 0 {
					break // an enforced rejection or error stops the plugin's loop
				}
			}
			nodes = append(nodes, ds)
		}
		counts := func() map[string]float64 {
			out := map[string]float64{}
			for _, p := range policies {
				for _, r := range rules[point] {
					kind := "filters/"
					if point == engine.PointScore {
						kind = "scores/"
					}
					for _, result := range []string{ResultAllow, ResultDeny, ResultError, ResultScored} {
						out[p.Name+" "+kind+r+" "+result] = testutil.ToFloat64(EvaluationsTotal.WithLabelValues(p.Name, kind+r, result))
					}
				}
			}
			return out
		}

		EvaluationsTotal.Reset()
		var one Counters
		for _, ds := range nodes {
			for i := range ds {
				one.Count(&ds[i])
			}
		}
		want := counts()

		EvaluationsTotal.Reset()
		var c Counters
		tally := c.Tally(point, policies)
		for _, ds := range nodes {
			passing := 0
			for i := range ds {
				if Plain(&ds[i]) {
					continue
				}
				tally.Passed(passing, i)
				tally.Add(i, &ds[i])
				passing = i + 1
			}
			tally.Passed(passing, len(ds))
		}
		tally.Flush()
		tally.Flush() // a second flush adds nothing
		if diff := cmp.Diff(want, counts()); diff != "" {
			t.Errorf("%v: counts through a Tally (+) differ from Count's (-):\n%s", point, diff)
		}
	}
}

// TestTallyTiming: one tally in TimingSample per point is timed, the
// others read no clock; a timed tally observes each policy's CEL time of
// the cycle once, however often it is flushed.
func TestTallyTiming(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	p := engine.NewCompiler(env).Compile(builder.MakePolicy("timed-policy").Filter("a", "true").Obj(), engine.CompileOptions{})
	policies := []*engine.CompiledPolicy{p}
	var c Counters
	timed := 0
	for i := range 2 * TimingSample {
		filter, score := c.Tally(engine.PointFilter, policies), c.Tally(engine.PointScore, policies)
		if filter.Timed() != score.Timed() {
			t.Fatalf("cycle %d: filter timed %v, score timed %v: the points are sampled apart", i, filter.Timed(), score.Timed())
		}
		if filter.Timed() {
			timed++
			filter.Time(0, 3*time.Millisecond)
			filter.Time(0, 2*time.Millisecond)
			filter.Flush()
			filter.Flush() // flushed again by the next cycle's Tally
		}
	}
	if timed != 2 {
		t.Errorf("%d timed cycles of %d, want 2", timed, 2*TimingSample)
	}
	h := CycleDuration.WithLabelValues("timed-policy", "filter").(prometheus.Histogram)
	m := &dto.Metric{}
	if err := h.Write(m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram(); got.GetSampleCount() != 2 || math.Abs(got.GetSampleSum()-0.010) > 1e-9 {
		t.Errorf("histogram: %d observations summing to %v s, want 2 of 5 ms", got.GetSampleCount(), got.GetSampleSum())
	}
}
