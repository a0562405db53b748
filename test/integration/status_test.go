package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestStatusLifecycle follows a policy's status through create, a broken
// update, a fix and deletion, as kstatus (Flux, Argo CD, kubectl wait)
// reads it: Current when observedGeneration matches and Ready is True with
// no Stalled; Failed when Stalled is True; gone after deletion. The
// conditions are compared whole, reason, message and observedGeneration.
func TestStatusLifecycle(t *testing.T) {
	ctx := t.Context()
	p := builder.MakePolicy("lifecycle").FilterRules(schedv1alpha1.Rule{Name: "linux", Expression: "node.metadata.labels['kubernetes.io/os'] == 'linux'"}).Obj()
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, p) })
	compiled := func(generation int64) []metav1.Condition {
		return []metav1.Condition{{
			Type: schedv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: schedv1alpha1.ReasonCompiled,
			Message: "every expression compiled; the policy is active", ObservedGeneration: generation,
		}}
	}
	waitConditions(t, p.Name, 1, compiled(1))

	// The webhook refuses this update: it is stored as it would be from
	// before the webhook, or with an older celsched.
	t.Run("broken", func(t *testing.T) {
		withoutWebhook(t)
		update(t, p.Name, func(p *schedv1alpha1.SchedulingPolicy) {
			p.Spec.Filters[0].Expression = "node.metadata.lables['a'] == 'b'"
		})
		message := "spec.filters[0].expression: Invalid value: \"node.metadata.lables['a'] == 'b'\": compilation failed: ERROR: <input>:1:14: undefined field 'lables'\n" +
			" | node.metadata.lables['a'] == 'b'\n" +
			" | .............^"
		waitConditions(t, p.Name, 2, []metav1.Condition{
			{Type: schedv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: schedv1alpha1.ReasonCompileError, Message: message, ObservedGeneration: 2},
			{Type: schedv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: schedv1alpha1.ReasonCompileError, Message: message, ObservedGeneration: 2},
		})
	})

	update(t, p.Name, func(p *schedv1alpha1.SchedulingPolicy) {
		p.Spec.Filters[0].Expression = "node.metadata.labels['kubernetes.io/os'] == 'linux'"
	})
	waitConditions(t, p.Name, 3, compiled(3))

	deleteObject(t, p)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), &schedv1alpha1.SchedulingPolicy{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the policy was not deleted: %v", err)
	}
}

// waitConditions waits until the policy's status describes generation and
// has exactly the conditions want (transition times aside).
func waitConditions(t *testing.T, name string, generation int64, want []metav1.Condition) {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	opts := []cmp.Option{
		cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
		cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type }),
	}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		return got.Generation == generation && got.Status.ObservedGeneration == generation && cmp.Diff(want, got.Status.Conditions, opts...) == "", nil
	})
	if err != nil {
		t.Fatalf("policy %s at generation %d (observed %d): conditions (-want +got):\n%s", name, got.Generation, got.Status.ObservedGeneration,
			strings.TrimSpace(cmp.Diff(want, got.Status.Conditions, opts...)))
	}
}

// update changes the stored policy with change, retrying on conflicts.
func update(t *testing.T, name string, change func(*schedv1alpha1.SchedulingPolicy)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return false, err
		}
		change(p)
		err := k8sClient.Update(ctx, p)
		return err == nil, ignoreConflict(err)
	})
	if err != nil {
		t.Fatalf("updating policy %s: %v", name, err)
	}
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
