package celplugins

import (
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestLastState: the data remembered for a CycleState is found for that
// state only; a clone of it (kube-scheduler clones the state for nominated
// pods and preemption) or another cycle's state is not answered from it.
func TestLastState(t *testing.T) {
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
