package controllers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// TestStatusConflictRequeuesQuietly: a status write that loses to a newer
// version of the policy (an optimistic-lock conflict, normal when a spec
// changes while the status is written) is looked at again, with no error
// (controller-runtime logs every returned error as "Reconciler error"); any
// other write error is returned.
func TestStatusConflictRequeuesQuietly(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	policy := policyWithFilters("true")
	policy.UID, policy.Generation = types.UID("uid-p"), 1
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	registry.Upsert(policy.DeepCopy())

	for name, tc := range map[string]struct {
		writeErr error
		wantErr  bool
		requeue  bool
	}{
		"conflict": {writeErr: apierrors.NewConflict(schedv1alpha1.GroupVersion.WithResource("schedulingpolicies").GroupResource(), "p", nil), requeue: true},
		"other":    {writeErr: apierrors.NewServiceUnavailable("etcd"), wantErr: true},
		"written":  {},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(policy.DeepCopy()).WithStatusSubresource(policy).
				WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if tc.writeErr != nil {
						return tc.writeErr
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				}}).Build()
			r := &StatusReconciler{Client: c, Policies: registry}
			res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "p"}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile: %v, want an error: %v", err, tc.wantErr)
			}
			if requeued := res.RequeueAfter > 0; requeued != tc.requeue {
				t.Errorf("Reconcile: %+v, want a requeue: %v", res, tc.requeue)
			}
			got := &schedv1alpha1.SchedulingPolicy{}
			if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			ready := got.Status.Conditions
			if written := len(ready) > 0 && ready[0].Status == metav1.ConditionTrue; written != (tc.writeErr == nil) {
				t.Errorf("status %+v, want written: %v", got.Status, tc.writeErr == nil)
			}
		})
	}
}

// TestRolloutPausedCondition: the RolloutPaused condition's reason is
// status.rollout.pauseReason, whatever the message says; it is absent
// unless the rollout of this generation is Paused.
func TestRolloutPausedCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		rollout    schedv1alpha1.RolloutStatus
		wantReason string // empty: no condition
	}{
		"gate": {rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutPaused,
			PauseReason: schedv1alpha1.PauseGateExceeded, Message: "paused by request, says the message"}, wantReason: schedv1alpha1.ReasonGateExceeded},
		"request": {rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutPaused,
			PauseReason: schedv1alpha1.PauseByRequest, Message: "wave one: 3 pod(s)"}, wantReason: schedv1alpha1.ReasonPausedByRequest},
		"aborted":        {rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutAborted}},
		"old generation": {rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 0, Phase: schedv1alpha1.RolloutPaused, PauseReason: schedv1alpha1.PauseByRequest}},
	} {
		t.Run(name, func(t *testing.T) {
			p := rolloutPolicy(1, "one")
			status := schedv1alpha1.SchedulingPolicyStatus{Rollout: &tc.rollout}
			setRolloutPaused(&status, p)
			reason := ""
			if c := meta.FindStatusCondition(status.Conditions, schedv1alpha1.ConditionRolloutPaused); c != nil {
				reason = c.Reason
			}
			if reason != tc.wantReason {
				t.Errorf("reason %q, want %q", reason, tc.wantReason)
			}
		})
	}
}
