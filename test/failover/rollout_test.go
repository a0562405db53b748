package failover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/controllers"
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
	// The step logs after its status write lands: wait for the line.
	standby.waitLog(t, "wave two promoted to Enforce")
	standby.stop(t)
}

// TestRolloutActionAcrossACrash: the manager applies a promote (its
// status write lands) and is killed before it can remove the annotation;
// a new manager removes it and promotes nothing more: exactly one wave is
// promoted, and one Event says so. The removal is made to fail by a
// ValidatingAdmissionPolicy that denies it, until the first manager is
// killed; meanwhile its later steps retry the removal only.
func TestRolloutActionAcrossACrash(t *testing.T) {
	const name = "rollout-crash"
	first := startManager(t, "rollout-crash-a", leaderElection{})
	first.waitReady(t)

	// It applies to no pod of the other tests; soaks of an hour, so that
	// only the promote moves a wave.
	p := builder.MakePolicy(name).Audit().PodLabels(map[string]string{"app": name}).Filter("any", "true").
		Wave("one", map[string]string{name: "one"}, time.Hour).
		Wave("two", map[string]string{name: "two"}, time.Hour).Obj()
	p.Annotations = map[string]string{probeAnnotation: "x"}
	if err := k8sClient.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.WithoutCancel(t.Context()), p) })
	waitPolicyReady(t, p)
	waitRolloutStatus(t, name, func(st *schedv1alpha1.RolloutStatus) bool { return st.Waves[0].Phase == schedv1alpha1.WaveSoaking })

	stopRemovals := denyAnnotationRemovals(t, name)
	request := schedv1alpha1.RolloutActionRequest(schedv1alpha1.RolloutActionPromote, "crash-1")
	annotate(t, name, request)
	st := waitRolloutStatus(t, name, func(st *schedv1alpha1.RolloutStatus) bool {
		return st.LastAction != nil && st.LastAction.ID == request
	})
	if st.Waves[0].Phase != schedv1alpha1.WaveEnforced || st.Waves[1].Phase != schedv1alpha1.WaveSoaking {
		t.Fatalf("after the promote: %+v", st.Waves)
	}
	// Its next steps find the annotation, applied: they only retry the
	// removal.
	const removalFailed = "annotation failed; retrying at the next step"
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return first.countLog(t, removalFailed, 0) >= 3, nil
	})
	if err != nil {
		t.Fatalf("manager %s did not retry the removal three times: %v", first.name, err)
	}
	first.kill(t)
	stopRemovals()

	second := startManager(t, "rollout-crash-b", leaderElection{})
	got := &schedv1alpha1.SchedulingPolicy{}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		_, pending := got.Annotations[schedv1alpha1.RolloutActionAnnotation]
		return !pending, nil
	})
	if err != nil {
		t.Fatalf("the new manager did not remove the annotation: %v; annotations %v", err, got.Annotations)
	}
	st = got.Status.Rollout
	if st.Waves[0].Phase != schedv1alpha1.WaveEnforced || st.Waves[1].Phase != schedv1alpha1.WaveSoaking || st.LastAction.ID != request {
		t.Errorf("after the new manager: %+v, last action %+v", st.Waves, st.LastAction)
	}
	if !second.hasLogged(t, "Rollout action already applied; removing its annotation") {
		t.Errorf("the new manager did not log that the promote was applied already")
	}
	var list eventsv1.EventList
	if err := k8sClient.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	var promoted []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == controllers.ReasonRolloutAction && strings.Contains(e.Note, "promoted") {
			promoted = append(promoted, e.Note)
		}
	}
	if len(promoted) != 1 {
		t.Errorf("promote events: %q, want one", promoted)
	}
	second.stop(t)
}

// probeAnnotation is an annotation whose removal denyAnnotationRemovals
// denies too, to tell when the denial is in force.
const probeAnnotation = "test.celsched.io/probe"

// denyAnnotationRemovals makes the API server deny every update of the
// policy that removes its rollout-action (or probe) annotation, and waits
// until it does; the returned function lifts the denial, and waits until
// it is lifted.
func denyAnnotationRemovals(t *testing.T, policy string) func() {
	t.Helper()
	const vapName = "deny-rollout-action-removal"
	removes := func(key string) string {
		return fmt.Sprintf("(has(oldObject.metadata.annotations) && %[1]q in oldObject.metadata.annotations && !(has(object.metadata.annotations) && %[1]q in object.metadata.annotations))", key)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{schedv1alpha1.GroupVersion.Group}, APIVersions: []string{schedv1alpha1.GroupVersion.Version},
						Resources: []string{"schedulingpolicies"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q || !(%s || %s)", policy, removes(schedv1alpha1.RolloutActionAnnotation), removes(probeAnnotation)),
				Message:    "the test denies removing this annotation",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: vapName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, obj := range []client.Object{vap, binding} {
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	lift := func() {
		for _, obj := range []client.Object{binding, vap} {
			if err := k8sClient.Delete(context.WithoutCancel(t.Context()), obj); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	}
	t.Cleanup(lift)
	waitDenied(t, policy, true)
	return func() {
		lift()
		waitDenied(t, policy, false)
	}
}

// waitDenied waits until removing the probe annotation (in a dry run) is
// denied, or is not.
func waitDenied(t *testing.T, policy string, denied bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: policy}, p); err != nil {
			return false, err
		}
		patch := client.MergeFrom(p.DeepCopy())
		delete(p.Annotations, probeAnnotation)
		err := k8sClient.Patch(ctx, p, patch, client.DryRunAll)
		return (err != nil) == denied, nil
	})
	if err != nil {
		t.Fatalf("removing an annotation of policy %s: not denied=%v: %v", policy, denied, err)
	}
}

// annotate sets the policy's rollout-action annotation.
func annotate(t *testing.T, name, value string) {
	t.Helper()
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, schedv1alpha1.RolloutActionAnnotation, value)
	if err := k8sClient.Patch(t.Context(), p, patch); err != nil {
		t.Fatal(err)
	}
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
