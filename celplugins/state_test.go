package celplugins

import (
	"context"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestLastState: the data remembered for a CycleState is found for that
// state only; a clone of it (kube-scheduler clones the state for nominated
// pods and preemption) or another cycle's state is not answered from it.
func TestLastState(t *testing.T) {
	t.Parallel()
	var last LastState[*Cycle]
	state, other := framework.NewCycleState(), framework.NewCycleState()
	if _, ok := last.Get(state); ok {
		t.Fatal("an empty LastState answered")
	}
	c := &Cycle{}
	last.Remember(state, c)
	if got, ok := last.Get(state); !ok || got != c {
		t.Errorf("Get(state) = %p, %v; want the cycle remembered", got, ok)
	}
	if _, ok := last.Get(state.Clone()); ok {
		t.Error("a clone of the state was answered from the original's data")
	}
	if _, ok := last.Get(other); ok {
		t.Error("another cycle's state was answered")
	}
	c2 := &Cycle{}
	last.Remember(other, c2)
	if _, ok := last.Get(state); ok {
		t.Error("the previous state was answered after another was remembered")
	}
	if got, _ := last.Get(other); got != c2 {
		t.Error("the state remembered last was not answered")
	}
}

// TestPrepareReleasesUnusedBudget: a cycle that evaluates nothing after
// PreFilter (no policy with filters or scores applies) stops its budget's
// timer at once; one that filters keeps its context until the deadline.
func TestPrepareReleasesUnusedBudget(t *testing.T) {
	t.Parallel()
	rt, registry := newTestRuntime(t, namespace("web", "1", map[string]string{"team": "web"}), namespace("other", "1", nil))
	registry.Upsert(testPolicy("web-only", "1", "web", "true", 1))
	idle, err := rt.Prepare(context.Background(), pod("other", "p", nil), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(idle.Filters) != 0 || idle.Ctx.Err() == nil {
		t.Errorf("a pod no policy applies to: %d filters, context error %v; want none and the context ended", len(idle.Filters), idle.Ctx.Err())
	}
	busy, err := rt.Prepare(context.Background(), pod("web", "p", nil), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(busy.Filters) != 1 || busy.Ctx.Err() != nil {
		t.Errorf("a pod the policy applies to: %d filters, context error %v; want one and the context live", len(busy.Filters), busy.Ctx.Err())
	}
	if _, ok := busy.Ctx.Deadline(); !ok {
		t.Error("the cycle's context has no deadline")
	}
}
