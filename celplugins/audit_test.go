package celplugins

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/engine"
)

// TestAuditDenials: each node's Audit denials read back as recorded, in
// order, from any number of concurrent Filter calls; a decision that
// several nodes share is kept once; decisions with an error are each
// kept.
func TestAuditDenials(t *testing.T) {
	t.Parallel()
	p1, p2 := new(engine.CompiledPolicy), new(engine.CompiledPolicy)
	zone := engine.Decision{Policy: p1, Point: engine.PointFilter, Verdict: engine.Reject, Rule: "not-zone3", Message: "zone3 is audited"}
	rack := engine.Decision{Policy: p2, Point: engine.PointFilter, Verdict: engine.Reject, Rule: "rack", Message: "rack r1"}
	failed := func(n int) engine.Decision {
		return engine.Decision{Policy: p2, Point: engine.PointFilter, Verdict: engine.Error, Rule: "rack", Err: fmt.Errorf("no such key: %d", n)}
	}
	c := &Cycle{audit: &auditDenials{}}
	var wg sync.WaitGroup
	want := map[string][]engine.Decision{}
	for i := range 200 {
		node := fmt.Sprintf("n%03d", i)
		switch i % 4 {
		case 0:
			want[node] = []engine.Decision{zone, rack}
		case 1:
			want[node] = []engine.Decision{zone}
		case 2:
			want[node] = []engine.Decision{failed(i)}
		}
		denials := want[node]
		wg.Go(func() {
			for i := range denials {
				c.DenyAudit(node, &denials[i])
			}
		})
	}
	wg.Wait()
	opts := cmp.Options{
		cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) }),
		cmp.Comparer(func(a, b *engine.CompiledPolicy) bool { return a == b }),
		cmp.AllowUnexported(engine.Decision{}),
	}
	for i := range 200 {
		node := fmt.Sprintf("n%03d", i)
		if diff := cmp.Diff(want[node], c.auditDenials(node), opts); diff != "" {
			t.Errorf("node %s's denials (-want +got):\n%s", node, diff)
		}
	}
	// zone, rack, and the 50 decisions with an error.
	if got := len(c.audit.decisions); got != 52 {
		t.Errorf("%d decisions kept, want 52 (each distinct one once, those with errors each)", got)
	}
	if (&Cycle{}).auditDenials("n000") != nil {
		t.Error("a cycle without Audit policies has denials")
	}
}
