package failover

import (
	"strings"
	"testing"
	"time"
)

const (
	// restartPods are created podBatch every podInterval, for about 3s
	// and faster than the scheduler binds (about 50 pods/s at its default
	// client QPS): the managers are killed with pods queued.
	restartPods = 300
	podBatch    = 10
	podInterval = 100 * time.Millisecond
	// killAfter pods bound, the manager is killed: it is placing pods.
	killAfter = 50
)

// TestRestartAndFailover: a manager killed (SIGKILL) while it places pods
// leaves nothing half done. Whether a restarted manager or a standby
// replica takes over, every pod ends bound and none against a policy.
func TestRestartAndFailover(t *testing.T) {
	t.Run("restart without leader election", func(t *testing.T) {
		ns := createNamespace(t, "restart")
		first := startManager(t, "restart-1", leaderElection{})
		creator := startPodCreator(t, ns, restartPods, podBatch, podInterval)
		p := waitPlaced(t, ns, killAfter)
		first.kill(t)
		t.Logf("killed with %d pods created: %s", creator.created(), p)
		second := startManager(t, "restart-2", leaderElection{})
		p = waitAllBound(t, ns, creator.wait(t))
		t.Logf("restarted: %s", p)
		checkNoneInZoneC(t, ns, p, first, second)
		second.stop(t)
	})

	t.Run("restart with leader election, one replica", func(t *testing.T) {
		ns := createNamespace(t, "restart-le")
		le := fastElection("restart-le")
		first := startManager(t, "restart-le-1", le)
		first.waitLeader(t, le)
		creator := startPodCreator(t, ns, restartPods, podBatch, podInterval)
		p := waitPlaced(t, ns, killAfter)
		first.kill(t)
		t.Logf("killed with %d pods created: %s", creator.created(), p)
		// The Lease is still the killed process's: the new one takes it
		// once it expires.
		second := startManager(t, "restart-le-2", le)
		second.waitLeader(t, le)
		p = waitAllBound(t, ns, creator.wait(t))
		t.Logf("restarted: %s", p)
		checkNoneInZoneC(t, ns, p, first, second)
		checkBoundOnlyAsLeader(t, second)
		second.stop(t)
	})

	t.Run("two replicas, the leader killed", func(t *testing.T) {
		ns := createNamespace(t, "failover")
		le := fastElection("failover")
		leader := startManager(t, "failover-a", le)
		leader.waitLeader(t, le)
		standby := startManager(t, "failover-b", le)
		standby.waitReady(t)
		creator := startPodCreator(t, ns, restartPods, podBatch, podInterval)
		p := waitPlaced(t, ns, killAfter)
		if standby.hasLogged(t, logAcquiredLease) {
			t.Fatalf("the standby acquired the Lease while the leader was running")
		}
		leader.kill(t)
		t.Logf("killed the leader with %d pods created: %s", creator.created(), p)
		standby.waitLeader(t, le)
		p = waitAllBound(t, ns, creator.wait(t))
		t.Logf("after the failover: %s; the leader bound %d pods, the standby %d",
			p, leader.countLog(t, logBound, 0), standby.countLog(t, logBound, 0))
		checkNoneInZoneC(t, ns, p, leader, standby)
		checkBoundOnlyAsLeader(t, standby)
		if standby.countLog(t, logBound, 0) == 0 {
			t.Errorf("the standby bound no pod after it took over")
		}
		standby.stop(t)
	})
}

// checkBoundOnlyAsLeader checks that a replica bound no pod before it
// acquired the Lease.
func checkBoundOnlyAsLeader(t *testing.T, m *managerProcess) {
	t.Helper()
	log := string(m.log(t))
	acquired, bound := strings.Index(log, logAcquiredLease), strings.Index(log, logBound)
	if bound >= 0 && (acquired < 0 || bound < acquired) {
		t.Errorf("manager %s bound a pod before it acquired the Lease: %s", m.name, m.firstLine(logBound))
	}
}
