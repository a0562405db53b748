package controllers

import (
	"testing"
	"time"

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
// abort audits the waves not yet enforced; resume soaks again with reset
// counts.
func TestRolloutSteps(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	p := rolloutPolicy(1, "one", "two", "three")
	st := restart(p)
	advance(p, st, t0)
	if got := phases(st); got[0] != schedv1alpha1.WaveSoaking || got[1] != schedv1alpha1.WavePending {
		t.Fatalf("started: %v", got)
	}
	// Evidence for wave two (pending) is not counted; wave one's is.
	addEvidence(p, st, map[audit.WaveKey]*audit.Delta{
		{Policy: "p", Wave: 0}: {Generation: 1, Evaluated: 3},
		{Policy: "p", Wave: 1}: {Generation: 1, Evaluated: 2, WouldReject: 2},
	})
	if st.Waves[0].Evaluated != 3 || st.Waves[1].Evaluated != 0 {
		t.Errorf("evidence: %+v", st.Waves)
	}
	advance(p, st, at(30*time.Second))
	if st.Waves[0].Phase != schedv1alpha1.WaveSoaking {
		t.Errorf("promoted before the soak ended: %v", phases(st))
	}
	advance(p, st, at(time.Minute))
	if got := phases(st); got[0] != schedv1alpha1.WaveEnforced || got[1] != schedv1alpha1.WaveSoaking || !st.Waves[1].StartTime.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Fatalf("after wave one's soak: %v, %+v", got, st.Waves[1])
	}
	addEvidence(p, st, map[audit.WaveKey]*audit.Delta{{Policy: "p", Wave: 1}: {Generation: 1, Evaluated: 1, WouldReject: 1,
		Violations: []schedv1alpha1.AuditViolation{{Pod: "ns/web"}}}})
	advance(p, st, at(2*time.Minute))
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
	advance(p2, st2, at(3*time.Minute))
	if st2.Waves[1].Phase != schedv1alpha1.WaveSoaking {
		t.Errorf("the first wave not enforced did not start: %v", phases(st2))
	}

	r := &RolloutController{}
	r.act(p2, st2, ActionAbort, at(4*time.Minute))
	if got := phases(st2); st2.Phase != schedv1alpha1.RolloutAborted || got[0] != schedv1alpha1.WaveEnforced || got[1] != schedv1alpha1.WavePending {
		t.Errorf("aborted: %s %v", st2.Phase, got)
	}
	if evs := advance(p2, st2, at(10*time.Minute)); len(evs) != 0 || st2.Waves[1].Phase != schedv1alpha1.WavePending {
		t.Errorf("an aborted rollout advanced: %v", phases(st2))
	}
	r.act(p2, st2, ActionResume, at(11*time.Minute))
	advance(p2, st2, at(11*time.Minute))
	if st2.Phase != schedv1alpha1.RolloutProgressing || st2.Waves[1].Phase != schedv1alpha1.WaveSoaking || st2.Waves[1].WouldReject != 0 {
		t.Errorf("resumed: %s %+v", st2.Phase, st2.Waves[1])
	}
	r.act(p2, st2, ActionPromote, at(12*time.Minute))
	r.act(p2, st2, ActionPromote, at(12*time.Minute))
	advance(p2, st2, at(12*time.Minute))
	if st2.Phase != schedv1alpha1.RolloutCompleted {
		t.Errorf("after promoting the last two waves: %s %v", st2.Phase, phases(st2))
	}
}
