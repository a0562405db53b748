package celplugins

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

func TestCountRules(t *testing.T) {
	cases := map[string]struct {
		rej  *engine.Rejection
		err  error
		want [][3]float64 // allow, deny, error per rule
	}{
		"all pass":         {want: [][3]float64{{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}},
		"second is false":  {rej: &engine.Rejection{Rule: "b"}, want: [][3]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 0}}},
		"first fails":      {err: &engine.EvalError{Rule: "a", Err: errors.New("boom")}, want: [][3]float64{{0, 0, 1}, {0, 0, 0}, {0, 0, 0}}},
		"third fails":      {err: &engine.EvalError{Rule: "c", Err: errors.New("boom")}, want: [][3]float64{{1, 0, 0}, {1, 0, 0}, {0, 0, 1}}},
		"does not compile": {err: &engine.CompileError{Policy: "p"}, want: [][3]float64{{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rules := make([]ruleCounters, 3)
			for i, n := range []string{"a", "b", "c"} {
				rules[i] = ruleCounters{name: n, allow: prometheus.NewCounter(prometheus.CounterOpts{Name: "a"}),
					deny: prometheus.NewCounter(prometheus.CounterOpts{Name: "d"}), err: prometheus.NewCounter(prometheus.CounterOpts{Name: "e"})}
			}
			countRules(rules, tc.rej, tc.err)
			got := make([][3]float64, 3)
			for i, r := range rules {
				got[i] = [3]float64{testutil.ToFloat64(r.allow), testutil.ToFloat64(r.deny), testutil.ToFloat64(r.err)}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func violation(pod string) schedv1alpha1.AuditViolation {
	return schedv1alpha1.AuditViolation{Pod: pod, Rule: "filters/f"}
}

// TestAuditLog: deltas add up across takes and failed writes, keep the
// newest violations first, and restart with a new generation.
func TestAuditLog(t *testing.T) {
	var log AuditLog
	gen1 := &engine.CompiledPolicy{Name: "p", Generation: 1}
	for i, pod := range []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f"} {
		var vs []schedv1alpha1.AuditViolation
		if i%2 == 0 {
			vs = []schedv1alpha1.AuditViolation{violation(pod)}
		}
		log.record(gen1, vs)
	}
	d := log.Take()["p"]
	if d.Evaluated != 6 || d.WouldReject != 3 || len(d.Violations) != 3 || d.Violations[0].Pod != "ns/e" {
		t.Fatalf("delta %+v", d)
	}
	if log.Take() != nil {
		t.Error("Take did not clear the log")
	}

	// A failed write returns the delta; what came since is merged in.
	log.record(gen1, []schedv1alpha1.AuditViolation{violation("ns/g")})
	log.Return("p", d)
	merged := log.Take()["p"]
	if merged.Evaluated != 7 || merged.WouldReject != 4 || merged.Violations[0].Pod != "ns/g" || merged.Violations[1].Pod != "ns/e" {
		t.Errorf("merged %+v", merged)
	}

	now := time.Unix(100, 0)
	stored := &schedv1alpha1.AuditStatus{ObservedGeneration: 1, Evaluated: 10, WouldReject: 2,
		LastViolations: []schedv1alpha1.AuditViolation{violation("ns/x1"), violation("ns/x2"), violation("ns/x3")}}
	got := merged.Apply(stored, now)
	if got.Evaluated != 17 || got.WouldReject != 6 || len(got.LastViolations) != schedv1alpha1.MaxAuditViolations ||
		got.LastViolations[0].Pod != "ns/g" || got.LastViolations[4].Pod != "ns/x1" || !got.LastUpdateTime.Time.Equal(now) {
		t.Errorf("applied %+v", got)
	}

	// A new generation restarts the counts, in the log and in the status.
	log.record(gen1, nil)
	log.record(&engine.CompiledPolicy{Name: "p", Generation: 2}, nil)
	d2 := log.Take()["p"]
	if d2.Generation != 2 || d2.Evaluated != 1 {
		t.Errorf("after a new generation: %+v", d2)
	}
	if got := d2.Apply(stored, now); got.ObservedGeneration != 2 || got.Evaluated != 1 || len(got.LastViolations) != 0 {
		t.Errorf("applied over an older generation: %+v", got)
	}
	log.record(&engine.CompiledPolicy{Name: "p", Generation: 2}, nil)
	log.Return("p", merged) // generation 1: dropped, the spec changed
	if d := log.Take()["p"]; d.Generation != 2 || d.Evaluated != 1 {
		t.Errorf("a delta of an older generation was merged: %+v", d)
	}
}

func TestTruncate(t *testing.T) {
	cases := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short":                  {"abc", 5, "abc"},
		"cut":                    {"abcdefgh", 6, "abc..."},
		"not inside a character": {"aééé", 5, "a..."}, // 7 bytes; the first 2 end inside an é
	}
	for name, tc := range cases {
		if got := Truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("%s: Truncate(%q, %d) = %q, want %q", name, tc.in, tc.n, got, tc.want)
		}
	}
}
