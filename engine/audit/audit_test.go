package audit

import (
	"testing"
	"time"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

func violation(pod string) schedv1alpha1.AuditViolation {
	return schedv1alpha1.AuditViolation{Pod: pod, Rule: "filters/f"}
}

// TestAuditLog: deltas add up across takes and failed writes, keep the
// newest violations first, and restart with a new generation.
func TestAuditLog(t *testing.T) {
	var log Log
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
