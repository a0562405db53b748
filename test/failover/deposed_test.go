package failover

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// deposedMargin is how long, beyond its renew deadline, a woken deposed
// leader may take to exit: generous, for a slow, shared machine.
const deposedMargin = 10 * time.Second

// TestDeposedLeaderExits: a leader frozen (SIGSTOP) past its lease is
// replaced by the standby; woken (SIGCONT), it finds the Lease taken and
// exits with "leader election lost" within its renew deadline. Until then
// it may still bind pods (client-go leader election has no fence, see
// docs/operations.md): the test logs how many. Every pod ends bound, none
// against a policy.
func TestDeposedLeaderExits(t *testing.T) {
	ns := createNamespace(t, "deposed")
	le := fastElection("deposed")
	leader := startManager(t, "deposed-a", le)
	leader.waitLeader(t, le)
	standby := startManager(t, "deposed-b", le)
	standby.waitReady(t)
	// Pods all along, so that both have pods to place when the leader wakes.
	creator := startPodCreator(t, ns, 2000, 4, podInterval)
	waitPlaced(t, ns, killAfter)

	leader.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	standby.waitLeader(t, le)
	t.Logf("the standby took over %v after the leader was stopped", time.Since(stopped).Round(100*time.Millisecond))
	// Let the new leader bind a few pods, then wake the old one.
	p := waitPlaced(t, ns, killAfter+20)
	woken := len(leader.log(t))
	leader.signal(t, syscall.SIGCONT)
	wake := time.Now()
	if !leader.waitExit(le.renew + deposedMargin) {
		t.Fatalf("the deposed leader still runs %v after it woke, want an exit within its renew deadline %v (+ %v)", time.Since(wake).Round(100*time.Millisecond), le.renew, deposedMargin)
	}
	exited := time.Since(wake)
	if leader.waitErr == nil {
		t.Errorf("the deposed leader exited with status 0, want a failure")
	}
	if !strings.Contains(string(leader.log(t)[woken:]), logLeaderElectionLost) {
		t.Errorf("the deposed leader's log does not say %q after it woke", logLeaderElectionLost)
	}
	t.Logf("the deposed leader was woken with %s and exited (%s) %v later, having bound %d pods meanwhile",
		p, leader.exitStatus(), exited.Round(10*time.Millisecond), leader.countLog(t, logBound, woken))

	p = waitAllBound(t, ns, creator.stop(t))
	t.Logf("at the end: %s; the standby bound %d pods", p, standby.countLog(t, logBound, 0))
	checkNoneInZoneC(t, ns, p, leader, standby)
	checkBoundOnlyAsLeader(t, standby)
	standby.stop(t)
}
