package failover

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestRolloutContinuesAfterFailover: the leader is killed while the first
// wave of a rollout soaks; the standby takes over and continues from
// status: the wave keeps its start time, is promoted when its soak is over
// by the leader's clock, and the second wave follows, promoted by the new
// leader.
func TestRolloutContinuesAfterFailover(t *testing.T) {
	const soak = 8 * time.Second
	le := fastElection("rollout")
	leader := startManager(t, "rollout-a", le)
	leader.waitLeader(t, le)
	standby := startManager(t, "rollout-b", le)
	standby.waitReady(t)

	// It applies to no pod of the other tests.
	p := builder.MakePolicy("rollout-failover").Audit().PodLabels(map[string]string{"app": "rollout-failover"}).
		Filter("any", "true").Obj()
	p.Spec.Rollout = &schedv1alpha1.Rollout{Waves: []schedv1alpha1.RolloutWave{
		{Name: "one", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"rollout": "one"}}, Soak: metav1.Duration{Duration: soak}},
		{Name: "two", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"rollout": "two"}}, Soak: metav1.Duration{Duration: time.Second}},
	}}
	if err := k8sClient.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.WithoutCancel(t.Context()), p) })
	waitPolicyReady(t, p)

	soaking := waitRolloutStatus(t, p.Name, func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveSoaking
	})
	start := soaking.Waves[0].StartTime
	leader.kill(t)
	standby.waitLeader(t, le)

	done := waitRolloutStatus(t, p.Name, func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Phase == schedv1alpha1.RolloutCompleted
	})
	one, two := done.Waves[0], done.Waves[1]
	if !one.StartTime.Equal(start) {
		t.Errorf("wave one's soak restarted after the failover: started %v, now %v", start, one.StartTime)
	}
	if one.PromotedTime == nil || one.PromotedTime.Time.Before(start.Add(soak)) {
		t.Errorf("wave one promoted at %v, before its soak ended (%v + %v)", one.PromotedTime, start, soak)
	}
	if two.Phase != schedv1alpha1.WaveEnforced || two.StartTime == nil || two.StartTime.Before(one.PromotedTime) {
		t.Errorf("wave two: %+v", two)
	}
	if !standby.hasLogged(t, "wave two promoted to Enforce") {
		t.Errorf("the new leader did not promote wave two")
	}
	standby.stop(t)
}

// waitRolloutStatus waits until the policy's status.rollout, for its
// generation, satisfies ok.
func waitRolloutStatus(t *testing.T, name string, ok func(*schedv1alpha1.RolloutStatus) bool) *schedv1alpha1.RolloutStatus {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		st := got.Status.Rollout
		return st != nil && st.ObservedGeneration == got.Generation && len(st.Waves) == len(got.Spec.Rollout.Waves) && ok(st), nil
	})
	if err != nil {
		t.Fatalf("policy %s: %v; status.rollout %+v", name, err, got.Status.Rollout)
	}
	return got.Status.Rollout
}
