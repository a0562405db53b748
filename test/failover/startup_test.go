package failover

import (
	"fmt"
	"testing"
	"time"
)

// Start-up runs and their pods: 10 runs of 500 pods each.
const (
	startupRuns = 10
	startupPods = 500
)

// TestStartupHonoursStoredPolicies: with no-zone-c and numOtherPolicies
// policies stored and startupPods pods pending, a manager that starts binds
// every pod, and none in zone c: the scheduling loop must not place a pod
// before the policies that existed at start-up are compiled. A fresh
// manager each run, so that a race between the two shows.
func TestStartupHonoursStoredPolicies(t *testing.T) {
	runs, failed := 0, 0
	for run := range startupRuns {
		t.Run(fmt.Sprintf("run-%d", run), func(t *testing.T) {
			runs++
			ns := createNamespace(t, "startup")
			createPods(t, ns, "p", startupPods)
			start := time.Now()
			m := startManager(t, fmt.Sprintf("startup-%d", run), leaderElection{})
			p := waitAllBound(t, ns, startupPods)
			t.Logf("run %d: %s, all bound %v after the manager started", run, p, time.Since(start).Round(time.Millisecond))
			m.stop(t)
			checkNoneInZoneC(t, ns, p, m)
			if len(p.inZoneC) > 0 {
				failed++
				// The order of events that let it happen.
				t.Logf("the scheduler started: %s\nthe first bind: %s\n%s was compiled: %s",
					m.firstLine("Starting the scheduler"), m.firstLine(logBound), noZoneC,
					m.firstLine("SchedulingPolicy compiled", `"`+noZoneC+`"`))
			}
		})
	}
	if failed > 0 {
		t.Errorf("pods were bound in zone c in %d of %d runs", failed, runs)
	}
}
