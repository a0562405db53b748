package failover

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// deposedMargin is how long, beyond its renew deadline, a woken deposed
	// leader may take to exit: generous, for a slow, shared machine.
	deposedMargin = 10 * time.Second
	// freezes is how many leaders are frozen in turn.
	freezes = 5
	// newLeaderBinds is how many pods the new leader binds before the old
	// one is woken.
	newLeaderBinds = 20
	// logFenced is in the scheduler's log line of a write the leader fence
	// refused (cmd/manager/app.ErrFenced).
	logFenced = "leader fence: the Lease may have expired"
)

// fencedBind matches a binding the leader fence refused, in the
// scheduler's log, and captures the pod's name.
// The URL is quoted in the error, its quotes escaped in the log line.
var fencedBind = regexp.MustCompile(`/pods/([^/"\\]+)/binding\\?": ` + logFenced)

// TestDeposedLeaderIsFenced: a leader frozen (SIGSTOP) past its lease is
// replaced by the standby; woken (SIGCONT), it binds no pod (its leader
// fence refuses every write once its renew deadline has passed since its
// last renewal), finds the Lease taken and exits with "leader election
// lost" within its renew deadline. Five leaders are frozen in turn, each
// replaced by a new standby. Every pod ends bound, none against a policy,
// and none by a deposed leader after its successor's first bind, in the
// order the API server bound them.
func TestDeposedLeaderIsFenced(t *testing.T) {
	ns := createNamespace(t, "deposed")
	le := fastElection("deposed")
	order := watchBinds(t, ns)
	managers := []*managerProcess{startManager(t, "deposed-0", le)}
	managers[0].waitLeader(t, le)
	// Pods all along, so that both have pods to place when the leader
	// wakes: the pods created during a freeze reach the woken leader's
	// queue.
	creator := startPodCreator(t, ns, 10000, 2, podInterval)
	waitPlaced(t, ns, killAfter)

	type freeze struct {
		takeover, exit time.Duration
		// woken is the old leader's log offset when it was woken.
		woken int
	}
	var frozen []freeze
	for i := range freezes {
		leader := managers[i]
		standby := startManager(t, fmt.Sprintf("deposed-%d", i+1), le)
		managers = append(managers, standby)
		standby.waitReady(t)
		// The leader is placing pods when it is frozen.
		leader.waitLogCount(t, logBound, leader.countLog(t, logBound, 0)+10)

		leader.signal(t, syscall.SIGSTOP)
		stopped := time.Now()
		standby.waitLeader(t, le)
		f := freeze{takeover: time.Since(stopped)}
		standby.waitLogCount(t, logBound, newLeaderBinds)
		f.woken = len(leader.log(t))
		leader.signal(t, syscall.SIGCONT)
		wake := time.Now()
		if !leader.waitExit(le.renew + deposedMargin) {
			t.Fatalf("the deposed leader %s still runs %v after it woke, want an exit within its renew deadline %v (+ %v)", leader.name, time.Since(wake).Round(100*time.Millisecond), le.renew, deposedMargin)
		}
		f.exit = time.Since(wake)
		if leader.waitErr == nil {
			t.Errorf("the deposed leader %s exited with status 0, want a failure", leader.name)
		}
		if !strings.Contains(string(leader.log(t)[f.woken:]), logLeaderElectionLost) {
			t.Errorf("the deposed leader %s's log does not say %q after it woke", leader.name, logLeaderElectionLost)
		}
		frozen = append(frozen, f)
	}

	p := waitAllBound(t, ns, creator.stop(t))
	t.Logf("at the end: %s", p)
	// Who bound each pod, from the managers' logs; when, from the watch.
	boundBy := map[string]*managerProcess{}
	for _, m := range managers {
		for _, pod := range m.boundPods(t, ns) {
			if other := boundBy[pod]; other != nil {
				t.Errorf("pod %s was bound by both %s and %s", pod, other.name, m.name)
			}
			boundBy[pod] = m
		}
	}
	if n := len(boundBy); n != p.bound() {
		t.Errorf("the managers' logs name %d bound pods, the API server has %d: the binds cannot all be attributed", n, p.bound())
	}
	refused := 0
	for i, f := range frozen {
		old, successor := managers[i], managers[i+1]
		first := order.first(t, successor.boundPods(t, ns))
		var late []string
		for _, pod := range old.boundPods(t, ns) {
			if order.position(t, pod) > first {
				late = append(late, pod)
			}
		}
		fenced := old.fencedBinds(t, f.woken)
		refused += len(fenced)
		t.Logf("freeze %d: %s frozen, %s took over %v later; %s woken, exited %v later (%s); binds by %s after %s's first bind (bind %d of %d): %d; bindings it refused after it woke: %d",
			i+1, old.name, successor.name, f.takeover.Round(100*time.Millisecond), old.name, f.exit.Round(10*time.Millisecond), old.exitStatus(),
			old.name, successor.name, first, order.len(), len(late), len(fenced))
		if len(late) > 0 {
			t.Errorf("freeze %d: the deposed leader %s bound %d pods after %s's first bind: %s", i+1, old.name, len(late), successor.name, strings.Join(late[:min(len(late), 10)], ", "))
		}
	}
	// Without a refused binding the freezes tested nothing: a deposed
	// leader that woke with no pod to bind.
	if refused == 0 {
		t.Errorf("no deposed leader tried to bind a pod after it woke, in %d freezes: the fence was not exercised", freezes)
	}
	checkNoneInZoneC(t, ns, p, managers...)
	for _, m := range managers[1:] {
		checkBoundOnlyAsLeader(t, m)
	}
	managers[len(managers)-1].stop(t)
}

// boundPods lists the pods of namespace that the manager's log says it
// bound.
func (m *managerProcess) boundPods(t *testing.T, namespace string) []string {
	t.Helper()
	pod := regexp.MustCompile(logBound + `" pod="` + regexp.QuoteMeta(namespace) + `/([^"]+)"`)
	var pods []string
	for _, match := range pod.FindAllSubmatch(m.log(t), -1) {
		pods = append(pods, string(match[1]))
	}
	return pods
}

// fencedBinds lists the pods whose binding the leader fence refused, from
// byte offset on in the log, each once.
func (m *managerProcess) fencedBinds(t *testing.T, offset int) []string {
	t.Helper()
	seen := map[string]bool{}
	var pods []string
	for _, match := range fencedBind.FindAllSubmatch(m.log(t)[offset:], -1) {
		if pod := string(match[1]); !seen[pod] {
			seen[pod] = true
			pods = append(pods, pod)
		}
	}
	return pods
}
