package controllers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
)

func rolloutPolicy(generation int64, waves ...string) *schedv1alpha1.SchedulingPolicy {
	p := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: generation}}
	p.Spec.Rollout = &schedv1alpha1.Rollout{}
	for _, w := range waves {
		p.Spec.Rollout.Waves = append(p.Spec.Rollout.Waves, schedv1alpha1.RolloutWave{Name: w, Soak: metav1.Duration{Duration: time.Minute}})
	}
	return p
}

func phases(st *schedv1alpha1.RolloutStatus) []schedv1alpha1.WavePhase {
	var out []schedv1alpha1.WavePhase
	for _, w := range st.Waves {
		out = append(out, w.Phase)
	}
	return out
}

// TestRolloutSteps: the waves advance by the clock and the evidence: a
// wave soaks, is promoted when its gate holds and pauses when not; the
// evidence of a wave that does not soak is not counted; a new spec keeps
// the enforced waves by name and restarts from the first that is not;
// abort audits every wave, the enforced ones too; resume starts again
// from the first wave, with reset counts.
func TestRolloutSteps(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	p := rolloutPolicy(1, "one", "two", "three")
	st := restart(p)
	advance(p, st, t0, nil)
	if got := phases(st); got[0] != schedv1alpha1.WaveSoaking || got[1] != schedv1alpha1.WavePending {
		t.Fatalf("started: %v", got)
	}
	// Evidence for wave two (pending) is not counted; wave one's is.
	addEvidence(p, st, map[int]audit.Delta{
		0: {Generation: 1, Evaluated: 3},
		1: {Generation: 1, Evaluated: 2, WouldReject: 2},
	})
	if st.Waves[0].Evaluated != 3 || st.Waves[1].Evaluated != 0 {
		t.Errorf("evidence: %+v", st.Waves)
	}
	advance(p, st, at(30*time.Second), nil)
	if st.Waves[0].Phase != schedv1alpha1.WaveSoaking {
		t.Errorf("promoted before the soak ended: %v", phases(st))
	}
	advance(p, st, at(time.Minute), nil)
	if got := phases(st); got[0] != schedv1alpha1.WaveEnforced || got[1] != schedv1alpha1.WaveSoaking || !st.Waves[1].StartTime.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Fatalf("after wave one's soak: %v, %+v", got, st.Waves[1])
	}
	addEvidence(p, st, map[int]audit.Delta{1: {Generation: 1, Evaluated: 1, WouldReject: 1,
		Violations: []schedv1alpha1.AuditViolation{{Pod: "ns/web"}}}})
	advance(p, st, at(2*time.Minute), nil)
	if st.Phase != schedv1alpha1.RolloutPaused || st.Waves[1].Phase != schedv1alpha1.WavePaused || st.Waves[1].LastViolations[0] != "ns/web" {
		t.Fatalf("wave two over its gate: %s %v %+v", st.Phase, phases(st), st.Waves[1])
	}

	// A new spec (wave two renamed): one stays enforced, the rest restart.
	p.Status.Rollout = st
	p2 := rolloutPolicy(2, "one", "two-b", "three")
	p2.Status.Rollout = st
	st2 := restart(p2)
	if got := phases(st2); got[0] != schedv1alpha1.WaveEnforced || got[1] != schedv1alpha1.WavePending || st2.Phase != schedv1alpha1.RolloutProgressing || st2.ObservedGeneration != 2 {
		t.Fatalf("after a spec change: %s %v", st2.Phase, got)
	}
	advance(p2, st2, at(3*time.Minute), nil)
	if st2.Waves[1].Phase != schedv1alpha1.WaveSoaking {
		t.Errorf("the first wave not enforced did not start: %v", phases(st2))
	}

	act(st2, request(schedv1alpha1.RolloutActionAbort, "a"), at(4*time.Minute))
	pending3 := []schedv1alpha1.WavePhase{schedv1alpha1.WavePending, schedv1alpha1.WavePending, schedv1alpha1.WavePending}
	if diff := cmp.Diff(pending3, phases(st2)); st2.Phase != schedv1alpha1.RolloutAborted || diff != "" || st2.Waves[0].PromotedTime != nil {
		t.Errorf("aborted: %s %+v (-want +got):\n%s", st2.Phase, st2.Waves, diff)
	}
	if !strings.Contains(st2.Message, "every wave is audited (enforced before: one)") {
		t.Errorf("abort message: %q", st2.Message)
	}
	if evs := advance(p2, st2, at(10*time.Minute), nil); len(evs) != 0 || !slices.Equal(phases(st2), pending3) {
		t.Errorf("an aborted rollout advanced: %v", phases(st2))
	}
	act(st2, request(schedv1alpha1.RolloutActionResume, "b"), at(11*time.Minute))
	advance(p2, st2, at(11*time.Minute), nil)
	if st2.Phase != schedv1alpha1.RolloutProgressing || st2.Waves[0].Phase != schedv1alpha1.WaveSoaking || st2.Waves[1].Phase != schedv1alpha1.WavePending {
		t.Errorf("resumed: %s %v", st2.Phase, phases(st2))
	}
	act(st2, request(schedv1alpha1.RolloutActionPromote, "c"), at(12*time.Minute))
	act(st2, request(schedv1alpha1.RolloutActionPromote, "d"), at(12*time.Minute))
	act(st2, request(schedv1alpha1.RolloutActionPromote, "e"), at(12*time.Minute))
	advance(p2, st2, at(12*time.Minute), nil)
	if st2.Phase != schedv1alpha1.RolloutCompleted {
		t.Errorf("after promoting the three waves: %s %v", st2.Phase, phases(st2))
	}
	act(st2, request(schedv1alpha1.RolloutActionPromote, "f"), at(13*time.Minute))
	want := &schedv1alpha1.RolloutActionRecord{ID: "promote/f", Action: schedv1alpha1.RolloutActionPromote, Outcome: schedv1alpha1.ActionNoOp, Time: at(13 * time.Minute)}
	if diff := cmp.Diff(want, st2.LastAction); diff != "" {
		t.Errorf("last action of a promote with nothing to promote (-want +got):\n%s", diff)
	}
}

// request is an action request with an id.
func request(action, id string) actionRequest {
	return actionRequest{value: schedv1alpha1.RolloutActionRequest(action, id), action: action, id: id}
}

// fakePending answers WouldStrand from a table the test changes, and
// counts the questions.
type fakePending struct {
	stranded audit.Stranded
	err      error
	asked    int
}

func (f *fakePending) WouldStrand(context.Context, string, int64, int) (audit.Stranded, error) {
	f.asked++
	return f.stranded, f.err
}

// TestRolloutPendingGate: when a wave's soak is over, its pending pods
// that the policy would strand count against the gate with the bound ones:
// a count that fails decides nothing and is not retried before
// PendingRecheck; pods over the gate pause the wave,
// named in the message; the paused wave is counted again every
// PendingRecheck (not at every step) and promoted once they are gone; a
// wave paused by the pods bound during its soak stays paused; a wave
// paused by a person is not counted.
func TestRolloutPendingGate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clock := t0
	at := func(d time.Duration) metav1.Time { clock = t0.Add(d); return metav1.NewTime(clock) }
	fake := &fakePending{}
	r := &RolloutController{Pending: fake, PendingRecheck: 30 * time.Second}
	mem := &rolloutMemory{}
	p := rolloutPolicy(1, "one", "two")
	st := restart(p)
	step := func(d time.Duration) []rolloutEvent {
		now := at(d)
		return advance(p, st, now, r.pendingCount(context.Background(), p, mem, now.Time))
	}
	step(0)
	if fake.asked != 0 {
		t.Errorf("pending pods counted during the soak: %d", fake.asked)
	}
	fake.err = errors.New("the scheduler has not compiled generation 1")
	step(time.Minute)
	if st.Waves[0].Phase != schedv1alpha1.WaveSoaking || !strings.Contains(st.Message, "not compiled") {
		t.Fatalf("a failed count decided: %v %q", phases(st), st.Message)
	}
	fake.err = nil
	fake.stranded = audit.Stranded{Count: 2, Pods: []string{"ns/a", "ns/b"}}
	asked := fake.asked
	step(time.Minute + time.Second)
	if fake.asked != asked || st.Waves[0].Phase != schedv1alpha1.WaveSoaking {
		t.Fatalf("a failed count was retried before PendingRecheck: asked %d, %v", fake.asked-asked, phases(st))
	}
	evs := step(time.Minute + 30*time.Second)
	if st.Phase != schedv1alpha1.RolloutPaused || st.Waves[0].Phase != schedv1alpha1.WavePaused || st.Waves[0].PendingWouldReject != 2 ||
		!strings.Contains(st.Message, "2 pending pod(s)") || !strings.Contains(st.Message, "pending: ns/a, ns/b") {
		t.Fatalf("pending pods over the gate: %s %v %q", st.Phase, phases(st), st.Message)
	}
	if len(evs) != 1 || evs[0].reason != ReasonWavePaused {
		t.Errorf("events: %+v", evs)
	}
	asked = fake.asked
	fake.stranded = audit.Stranded{}
	step(time.Minute + 50*time.Second)
	if fake.asked != asked || st.Phase != schedv1alpha1.RolloutPaused {
		t.Fatalf("counted again before PendingRecheck: asked %d, %s", fake.asked-asked, st.Phase)
	}
	evs = step(2 * time.Minute)
	if st.Waves[0].Phase != schedv1alpha1.WaveEnforced || st.Waves[1].Phase != schedv1alpha1.WaveSoaking || st.Phase != schedv1alpha1.RolloutProgressing || st.Message != "" {
		t.Fatalf("the pending pods are gone, the wave stays paused: %s %v %q", st.Phase, phases(st), st.Message)
	}
	if len(evs) != 2 || evs[0].reason != ReasonWavePromoted || !strings.Contains(evs[0].note, "cleared") || evs[1].reason != ReasonWaveStarted {
		t.Errorf("events: %+v", evs)
	}

	// Wave two: one pod bound against the rule; the pending count cannot
	// clear it.
	addEvidence(p, st, map[int]audit.Delta{1: {Generation: 1, Evaluated: 1, WouldReject: 1,
		Violations: []schedv1alpha1.AuditViolation{{Pod: "ns/bound"}}}})
	step(3 * time.Minute)
	if st.Waves[1].Phase != schedv1alpha1.WavePaused {
		t.Fatalf("wave two: %v", phases(st))
	}
	step(4 * time.Minute)
	if st.Waves[1].Phase != schedv1alpha1.WavePaused || !strings.Contains(st.Message, "ns/bound") {
		t.Errorf("a pod bound against the rule cleared: %v %q", phases(st), st.Message)
	}
	if st.PauseReason != schedv1alpha1.PauseGateExceeded {
		t.Errorf("pause reason: %q", st.PauseReason)
	}
	// Paused by a person: not counted, and stays paused.
	act(st, request(schedv1alpha1.RolloutActionResume, "a"), at(5*time.Minute))
	step(5 * time.Minute)
	act(st, request(schedv1alpha1.RolloutActionPause, "b"), at(5*time.Minute))
	asked = fake.asked
	step(10 * time.Minute)
	if fake.asked != asked || st.Phase != schedv1alpha1.RolloutPaused || st.PauseReason != schedv1alpha1.PauseByRequest {
		t.Errorf("a pause by request was counted or lifted: asked %d, %s %q", fake.asked-asked, st.Phase, st.Message)
	}
}

// TestRestartPausedWithoutReason: a stored Paused status without a
// pauseReason gets PausedByRequest (a person resumes it), so that the
// RolloutPaused condition has a reason.
func TestRestartPausedWithoutReason(t *testing.T) {
	p := rolloutPolicy(1, "one")
	p.Status.Rollout = &schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutPaused,
		Waves: []schedv1alpha1.WaveStatus{{Name: "one", Phase: schedv1alpha1.WavePaused}}}
	if st := restart(p); st.PauseReason != schedv1alpha1.PauseByRequest {
		t.Errorf("pause reason %q, want %q", st.PauseReason, schedv1alpha1.PauseByRequest)
	}
}

// TestGateMessageBounded: the pause message fits status.rollout.message
// however long the pod names.
func TestGateMessageBounded(t *testing.T) {
	long := strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253)
	w := &schedv1alpha1.WaveStatus{Name: "w", WouldReject: 5, PendingWouldReject: 5,
		LastViolations: []string{long, long, long, long, long}, PendingViolations: []string{long, long, long, long, long}}
	if msg := gateMessage(w, 0); len(msg) > schedv1alpha1.MaxRolloutMessage || !strings.HasPrefix(msg, "wave w: 5 pod(s)") {
		t.Errorf("message of %d bytes: %.80q", len(msg), msg)
	}
}
