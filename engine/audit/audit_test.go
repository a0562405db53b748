package audit

import (
	"fmt"
	"slices"
	"testing"
	"time"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

func violation(pod string) schedv1alpha1.AuditViolation {
	return schedv1alpha1.AuditViolation{Pod: pod, Rule: "filters/f"}
}

// TestAuditLog: the evidence adds up until written, keeps the newest
// violations first, stays whole when a write fails (no Written), loses
// only what a write held when it succeeds (what came meanwhile stays), and
// restarts with a new generation.
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
	d := log.Policies.Unwritten("p")[struct{}{}]
	if d.Evaluated != 6 || d.WouldReject != 3 || len(d.Violations) != 3 || d.Violations[0].Pod != "ns/e" {
		t.Fatalf("delta %+v", d)
	}
	// A write that failed: nothing is subtracted, and what comes is added.
	log.record(gen1, "ns", []schedv1alpha1.AuditViolation{violation("ns/g")})
	all := log.Policies.Unwritten("p")[struct{}{}]
	if all.Evaluated != 7 || all.WouldReject != 4 || all.Violations[0].Pod != "ns/g" || all.Violations[1].Pod != "ns/e" {
		t.Errorf("after a failed write: %+v", all)
	}
	// A write of d succeeded: what came after d stays.
	if !log.Policies.Written("p", map[struct{}]Delta{{}: d}) {
		t.Fatal("the evidence after the write's copy was dropped")
	}
	left := log.Policies.Unwritten("p")[struct{}{}]
	if left.Evaluated != 1 || left.WouldReject != 1 || len(left.Violations) != 1 || left.Violations[0].Pod != "ns/g" {
		t.Errorf("left after a write: %+v", left)
	}
	if log.Policies.Written("p", map[struct{}]Delta{{}: left}) || log.Policies.Unwritten("p") != nil || len(log.Policies.Policies()) != 0 {
		t.Errorf("evidence left after writing all of it: %+v", log.Policies.Unwritten("p"))
	}

	now := time.Unix(100, 0)
	stored := &schedv1alpha1.AuditStatus{ObservedGeneration: 1, Evaluated: 10, WouldReject: 2,
		LastViolations: []schedv1alpha1.AuditViolation{violation("ns/x1"), violation("ns/x2"), violation("ns/x3")}}
	got := all.Apply(stored, now)
	if got.Evaluated != 17 || got.WouldReject != 6 || len(got.LastViolations) != schedv1alpha1.MaxAuditViolations ||
		got.LastViolations[0].Pod != "ns/g" || got.LastViolations[4].Pod != "ns/x1" || !got.LastUpdateTime.Time.Equal(now) {
		t.Errorf("applied %+v", got)
	}

	// A new generation restarts the counts, in the log and in the status;
	// a write of the old generation's subtracts nothing from the new.
	log.record(gen1, "ns", nil)
	old := log.Policies.Unwritten("p")[struct{}{}]
	log.record(&engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 2}}, "ns", nil)
	d2 := log.Policies.Unwritten("p")[struct{}{}]
	if d2.Generation != 2 || d2.Evaluated != 1 {
		t.Errorf("after a new generation: %+v", d2)
	}
	if got := d2.Apply(stored, now); got.ObservedGeneration != 2 || got.Evaluated != 1 || len(got.LastViolations) != 0 {
		t.Errorf("applied over an older generation: %+v", got)
	}
	if !log.Policies.Written("p", map[struct{}]Delta{{}: old}) || log.Policies.Unwritten("p")[struct{}{}].Evaluated != 1 {
		t.Errorf("a write of an older generation subtracted from the new: %+v", log.Policies.Unwritten("p"))
	}
	log.Policies.Drop("p")
	if log.Policies.Unwritten("p") != nil {
		t.Error("Drop left evidence")
	}
}

// TestEvidenceSignal: a policy is signalled when its evidence goes from
// none to some, once, whatever the number of pods until it is written;
// after a write of all of it, the next pod signals again. The signal
// never blocks the plugins.
func TestEvidenceSignal(t *testing.T) {
	t.Parallel()
	var log Log
	p, q := &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}, &engine.CompiledPolicy{Program: &engine.Program{Name: "q", Generation: 1}}
	for range 100 {
		log.record(p, "ns", nil)
		log.record(q, "ns", nil)
	}
	select {
	case <-log.Policies.Wake():
	default:
		t.Fatal("no wake-up")
	}
	if got := log.Policies.Touched(); !slices.Equal(got, []string{"p", "q"}) {
		t.Errorf("touched %v", got)
	}
	log.record(p, "ns", nil)
	select {
	case <-log.Policies.Wake():
		t.Error("woken for a policy whose evidence was not written yet")
	default:
	}
	if got := log.Policies.Touched(); len(got) != 0 {
		t.Errorf("touched again before a write: %v", got)
	}
	log.Policies.Written("p", log.Policies.Unwritten("p"))
	log.record(p, "ns", nil)
	if got := log.Policies.Touched(); !slices.Equal(got, []string{"p"}) {
		t.Errorf("after a write, touched %v", got)
	}
	if got := log.Policies.Policies(); !slices.Equal(got, []string{"p", "q"}) {
		t.Errorf("policies with unwritten evidence: %v", got)
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
	if got := log.Namespaces.Unwritten("p"); got != nil {
		t.Fatalf("collected per namespace while off: %v", got)
	}
	log.ByNamespace.Store(true)
	for i := range MaxReportResults + 10 {
		log.record(p, "a", []schedv1alpha1.AuditViolation{violation(fmt.Sprintf("a/pod-%d", i))})
		log.record(p, "b", nil)
	}
	byNs := log.Namespaces.Unwritten("p")
	a, b := byNs["a"], byNs["b"]
	if a.Evaluated != MaxReportResults+10 || a.WouldReject != MaxReportResults+10 || len(a.Violations) != MaxReportResults ||
		a.Violations[0].Pod != fmt.Sprintf("a/pod-%d", MaxReportResults+9) {
		t.Errorf("namespace a: %+v", a)
	}
	if b.Evaluated != MaxReportResults+10 || b.WouldReject != 0 {
		t.Errorf("namespace b: %+v", b)
	}
	if d := log.Policies.Unwritten("p")[struct{}{}]; d.Evaluated != 2*(MaxReportResults+10)+1 || len(d.Violations) != schedv1alpha1.MaxAuditViolations {
		t.Errorf("per policy: %+v", d)
	}
	// Namespace a written; b's write failed: b stays, with the new pod.
	log.Namespaces.Written("p", map[string]Delta{"a": a})
	log.record(p, "b", nil)
	got := log.Namespaces.Unwritten("p")
	if _, ok := got["a"]; ok || got["b"].Evaluated != MaxReportResults+11 {
		t.Errorf("after writing namespace a only: %+v", got)
	}
}
