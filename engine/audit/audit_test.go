package audit

import (
	"fmt"
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
	t.Parallel()
	var log Log
	gen1 := &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}
	for i, pod := range []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f"} {
		var vs []schedv1alpha1.AuditViolation
		if i%2 == 0 {
			vs = []schedv1alpha1.AuditViolation{violation(pod)}
		}
		log.record(gen1, "ns", vs)
	}
	d := log.Take()["p"]
	if d.Evaluated != 6 || d.WouldReject != 3 || len(d.Violations) != 3 || d.Violations[0].Pod != "ns/e" {
		t.Fatalf("delta %+v", d)
	}
	if log.Take() != nil {
		t.Error("Take did not clear the log")
	}

	// A failed write returns the delta; what came since is merged in.
	log.record(gen1, "ns", []schedv1alpha1.AuditViolation{violation("ns/g")})
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
	log.record(gen1, "ns", nil)
	log.record(&engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 2}}, "ns", nil)
	d2 := log.Take()["p"]
	if d2.Generation != 2 || d2.Evaluated != 1 {
		t.Errorf("after a new generation: %+v", d2)
	}
	if got := d2.Apply(stored, now); got.ObservedGeneration != 2 || got.Evaluated != 1 || len(got.LastViolations) != 0 {
		t.Errorf("applied over an older generation: %+v", got)
	}
	log.record(&engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 2}}, "ns", nil)
	log.Return("p", merged) // generation 1: dropped, the spec changed
	if d := log.Take()["p"]; d.Generation != 2 || d.Evaluated != 1 {
		t.Errorf("a delta of an older generation was merged: %+v", d)
	}
}

// TestAuditLogByNamespace: with ByNamespace, the evidence is also kept per
// namespace and policy, with more violations than the status keeps; the
// per-policy deltas are unchanged; without it nothing is kept per
// namespace.
func TestAuditLogByNamespace(t *testing.T) {
	t.Parallel()
	var log Log
	p := &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}
	log.record(p, "a", []schedv1alpha1.AuditViolation{violation("a/x")})
	if got := log.TakeNamespaces(); got != nil {
		t.Fatalf("collected per namespace while off: %v", got)
	}
	log.ByNamespace.Store(true)
	for i := range MaxReportResults + 10 {
		log.record(p, "a", []schedv1alpha1.AuditViolation{violation(fmt.Sprintf("a/pod-%d", i))})
		log.record(p, "b", nil)
	}
	byNs := log.TakeNamespaces()
	a, b := byNs[NamespaceKey{Namespace: "a", Policy: "p"}], byNs[NamespaceKey{Namespace: "b", Policy: "p"}]
	if a == nil || a.Evaluated != MaxReportResults+10 || a.WouldReject != MaxReportResults+10 || len(a.Violations) != MaxReportResults ||
		a.Violations[0].Pod != fmt.Sprintf("a/pod-%d", MaxReportResults+9) {
		t.Errorf("namespace a: %+v", a)
	}
	if b == nil || b.Evaluated != MaxReportResults+10 || b.WouldReject != 0 {
		t.Errorf("namespace b: %+v", b)
	}
	if d := log.Take()["p"]; d.Evaluated != 2*(MaxReportResults+10)+1 || len(d.Violations) != schedv1alpha1.MaxAuditViolations {
		t.Errorf("per policy: %+v", d)
	}
	log.ReturnNamespace(NamespaceKey{Namespace: "b", Policy: "p"}, b)
	log.record(p, "b", nil)
	if got := log.TakeNamespaces()[NamespaceKey{Namespace: "b", Policy: "p"}]; got.Evaluated != MaxReportResults+11 {
		t.Errorf("a returned delta was not merged: %+v", got)
	}
}
