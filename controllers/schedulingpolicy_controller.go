package controllers

import (
	"context"
	"fmt"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// maxConditionMessage is the length limit of metav1.Condition's message.
const maxConditionMessage = 32768

// RegistryReconciler compiles every SchedulingPolicy into the engine's
// registry and removes deleted ones. It runs on every replica, leader or
// not, so that a replica that takes over schedules with warm policies.
type RegistryReconciler struct {
	Client   client.Client
	Registry *engine.Registry
}

// Reconcile implements reconcile.Reconciler.
func (r *RegistryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		if apierrors.IsNotFound(err) {
			if r.Registry.Delete(req.Name, "") {
				log.Info("SchedulingPolicy removed from the registry")
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if compiled := r.Registry.Upsert(policy); compiled != nil && compiled.ResourceVersion == policy.ResourceVersion {
		log.V(1).Info("SchedulingPolicy compiled", "generation", policy.Generation, "errors", len(compiled.Errors), "warnings", len(compiled.Warnings))
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler, which does not need the
// leader lease.
func (r *RegistryReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&schedv1alpha1.SchedulingPolicy{}).
		Named("schedulingpolicy-registry").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

// StatusReconciler writes the status of every SchedulingPolicy: the Ready
// condition (Compiled, or CompileError with the field errors, then also
// Stalled), observedGeneration and expressionWarnings. It runs on the leader only.
type StatusReconciler struct {
	Client   client.Client
	Registry *engine.Registry
}

// Reconcile implements reconcile.Reconciler.
func (r *StatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The same compiled policy the scheduler uses; compiled here if the
	// registry controller has not seen this version yet.
	compiled := r.Registry.Upsert(policy)
	if compiled == nil || compiled.UID != policy.UID || compiled.ResourceVersion != policy.ResourceVersion {
		// Deleted, or the registry holds a newer version that the cache
		// will deliver next.
		return ctrl.Result{}, nil
	}
	status := *policy.Status.DeepCopy()
	status.ObservedGeneration = policy.Generation
	status.ExpressionWarnings = compiled.Warnings
	condition := metav1.Condition{
		Type:               schedv1alpha1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             schedv1alpha1.ReasonCompiled,
		Message:            "every expression compiled; the policy is active",
		ObservedGeneration: policy.Generation,
	}
	if len(compiled.Errors) > 0 {
		condition.Status = metav1.ConditionFalse
		condition.Reason = schedv1alpha1.ReasonCompileError
		condition.Message = celplugins.Truncate(compileErrors(compiled), maxConditionMessage)
		// Only a new spec can fix it: Stalled, as kstatus defines it.
		stalled := condition
		stalled.Type, stalled.Status = schedv1alpha1.ConditionStalled, metav1.ConditionTrue
		meta.SetStatusCondition(&status.Conditions, stalled)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, schedv1alpha1.ConditionStalled)
	}
	meta.SetStatusCondition(&status.Conditions, condition)
	if apiequality.Semantic.DeepEqual(status, policy.Status) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(policy.DeepCopy(), client.MergeFromWithOptimisticLock{})
	policy.Status = status
	if err := r.Client.Status().Patch(ctx, policy, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("SchedulingPolicy status written", "ready", condition.Status, "reason", condition.Reason, "generation", policy.Generation)
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler, which runs on the leader.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&schedv1alpha1.SchedulingPolicy{}).
		Named("schedulingpolicy-status").
		Complete(r)
}

// compileErrors lists the field errors, one per line.
func compileErrors(p *engine.CompiledPolicy) string {
	lines := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
