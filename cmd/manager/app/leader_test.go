package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLeading: celsched_leader is 0 until the manager starts the leader's
// runnable (once elected), 1 while it runs, and 0 again once it stops.
func TestLeading(t *testing.T) {
	if got := testutil.ToFloat64(leaderGauge); got != 0 {
		t.Fatalf("celsched_leader before the election = %v, want 0", got)
	}
	r := leading()
	if !r.NeedLeaderElection() {
		t.Fatal("the leader gauge's runnable runs on every replica, want only on the leader")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(leaderGauge) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("celsched_leader is not 1 while the leader's runnable runs")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(leaderGauge); got != 0 {
		t.Errorf("celsched_leader after the manager stopped = %v, want 0", got)
	}
}
