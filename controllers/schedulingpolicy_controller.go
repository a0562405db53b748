package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/metrics"
)

// maxConditionMessage is the length limit of metav1.Condition's message.
const maxConditionMessage = 32768

// registryLag is how soon the status of a policy is looked at again when the
// scheduler has not compiled its current generation yet (it also is told
// through Compiled when it has).
const registryLag = time.Second

// StatusReconciler writes the status of every SchedulingPolicy: the Ready
// condition (Compiled, or CompileError with the field errors, then also
// Stalled), observedGeneration and expressionWarnings. It reports what the
// scheduler holds: it reads the registry that the scheduler's own informer
// fills (celplugins.PolicyFeed), and never writes it. It runs on the leader
// only.
type StatusReconciler struct {
	Client   client.Client
	Policies interface{ Snapshot() *engine.Snapshot }
	// Compiled, when set, is a source of the names of policies the
	// scheduler compiled (or whose rules it cut off), so that their status
	// is written at once.
	Compiled <-chan event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy]
	// Slow, when set, reports the rules cut off by the time budget of a
	// scheduling cycle: the Slow condition.
	Slow *metrics.SlowLog
	// Errors, when set, reports the last evaluation error of each policy:
	// the EvaluationError condition.
	Errors *metrics.ErrorLog
	// ParamKinds, when set, says why the param kind of a parameterized
	// policy cannot be read (celplugins.ParamsStore): the policy is then
	// not Ready, with reason ParamKindNotFound.
	ParamKinds interface {
		KindError(gvk schema.GroupVersionKind) error
	}
}

// paramKindRetry is how soon the status of a policy whose paramKind is not
// served (or not readable) is looked at again (its CRD may be installed);
// paramsListing, while its objects are being listed.
const (
	paramKindRetry = 10 * time.Second
	paramsListing  = time.Second
)

// Reconcile implements reconcile.Reconciler.
func (r *StatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The compiled policy the scheduler uses.
	compiled := r.Policies.Snapshot().Get(policy.Name)
	if compiled == nil || compiled.UID != policy.UID || compiled.Generation != policy.Generation {
		// The scheduler's informer has not delivered this version yet (or
		// this cache is behind it, and will deliver the newer one).
		return ctrl.Result{RequeueAfter: registryLag}, nil
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
		condition.Message = engine.Truncate(compileErrors(compiled), maxConditionMessage)
		// Only a new spec can fix it: Stalled, as kstatus defines it.
		stalled := condition
		stalled.Type, stalled.Status = schedv1alpha1.ConditionStalled, metav1.ConditionTrue
		meta.SetStatusCondition(&status.Conditions, stalled)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, schedv1alpha1.ConditionStalled)
	}
	var result ctrl.Result
	if spec := compiled.ParamSpec(); spec != nil && len(compiled.Errors) == 0 && r.ParamKinds != nil {
		err := r.ParamKinds.KindError(spec.Kind)
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrParamsNotReady):
			// Listing: not ready until listed (the policy follows its
			// failurePolicy meanwhile); look again soon (a list error is
			// not an event).
			condition.Status = metav1.ConditionFalse
			condition.Reason = schedv1alpha1.ReasonParamsListing
			condition.Message = engine.Truncate(fmt.Sprintf("%v; until they are, the policy follows its failurePolicy (%s) for every pod it matches", err, compiled.FailurePolicy), maxConditionMessage)
			result.RequeueAfter = paramsListing
		default:
			condition.Status = metav1.ConditionFalse
			condition.Reason = schedv1alpha1.ReasonParamKindNotFound
			condition.Message = engine.Truncate(fmt.Sprintf("%v; the policy follows its failurePolicy (%s) for every pod it matches", err, compiled.FailurePolicy), maxConditionMessage)
			if errors.Is(err, engine.ErrParamsNotReadable) {
				condition.Reason = schedv1alpha1.ReasonParamsNotReadable
				condition.Message = engine.Truncate(fmt.Sprintf("%v; the policy rejects or holds every pod it matches until they can be read (docs/policy-reference.md, \"RBAC for param kinds\")", err), maxConditionMessage)
			}
			result.RequeueAfter = paramKindRetry
		}
	}
	meta.SetStatusCondition(&status.Conditions, condition)
	setRolloutPaused(&status, policy)
	setDrifted(&status, policy)
	status.Enforcement = effectiveEnforcement(policy, status.Rollout)
	r.setSlow(&status, policy.Name, policy.Generation)
	r.setEvaluationError(&status, policy.Name, policy.Generation)
	if apiequality.Semantic.DeepEqual(status, policy.Status) {
		return result, nil
	}
	patch := client.MergeFromWithOptions(policy.DeepCopy(), client.MergeFromWithOptimisticLock{})
	policy.Status = status
	if err := r.Client.Status().Patch(ctx, policy, patch); err != nil {
		if apierrors.IsConflict(err) {
			// A newer version exists (a spec change, another writer): its
			// event brings the policy back; no error to log.
			ctrl.LoggerFrom(ctx).V(1).Info("SchedulingPolicy changed while its status was written; looking again", "generation", policy.Generation)
			return ctrl.Result{RequeueAfter: registryLag}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("SchedulingPolicy status written", "ready", condition.Status, "reason", condition.Reason, "generation", policy.Generation)
	return result, nil
}

// setSlow sets the Slow condition when a rule of this generation was cut off
// by a cycle's time budget, and removes it otherwise. The message is
// stable across cut-offs, so that a slow policy does not cause a status
// write per pod: the pods, nodes and counts are in the log and the metric.
func (r *StatusReconciler) setSlow(status *schedv1alpha1.SchedulingPolicyStatus, name string, generation int64) {
	if r.Slow == nil {
		return
	}
	report, ok := r.Slow.Get(name)
	setReported(status, schedv1alpha1.ConditionSlow, schedv1alpha1.ReasonTimeBudgetExceeded, generation,
		ok && report.Generation == generation, func() string {
			return fmt.Sprintf("%s was cut off by the CEL time budget of a pod's scheduling cycle (%s), and the policy's failurePolicy applied: "+
				"make it cheaper. The pods and nodes are in the scheduler's log; celsched_policy_time_budget_exceeded_total counts them.", report.Rule, report.Budget)
		})
}

// setEvaluationError sets the EvaluationError condition with the last
// evaluation error of this generation (its full text: only admins read the
// policy), and removes it otherwise.
func (r *StatusReconciler) setEvaluationError(status *schedv1alpha1.SchedulingPolicyStatus, name string, generation int64) {
	if r.Errors == nil {
		return
	}
	report, ok := r.Errors.Get(name)
	setReported(status, schedv1alpha1.ConditionEvaluationError, schedv1alpha1.ReasonRuleFailed, generation,
		ok && report.Generation == generation, func() string {
			return engine.Truncate(fmt.Sprintf("%s failed (last at %s): %s", report.Rule, report.Time.UTC().Format(time.RFC3339), report.Error), maxConditionMessage)
		})
}

// setReported sets a condition that the scheduler reported for this
// generation (True, with the reason and message), or removes it when
// there is no such report.
func setReported(status *schedv1alpha1.SchedulingPolicyStatus, conditionType, reason string, generation int64, reported bool, message func() string) {
	if !reported {
		meta.RemoveStatusCondition(&status.Conditions, conditionType)
		return
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            message(),
		ObservedGeneration: generation,
	})
}

// SetupWithManager registers the reconciler, which runs on the leader.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&schedv1alpha1.SchedulingPolicy{}).
		Named("schedulingpolicy-status")
	if r.Compiled != nil {
		b = b.WatchesRawSource(source.Channel(r.Compiled, &handler.TypedEnqueueRequestForObject[*schedv1alpha1.SchedulingPolicy]{}))
	}
	return b.Complete(r)
}

// compileErrors lists the field errors, one per line.
func compileErrors(p *engine.CompiledPolicy) string {
	lines := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// effectiveEnforcement is status.enforcement: where the policy is
// enforced now, from its spec and its rollout's status (which the
// RolloutController writes).
func effectiveEnforcement(policy *schedv1alpha1.SchedulingPolicy, st *schedv1alpha1.RolloutStatus) string {
	if r := policy.Spec.Rollout; r != nil {
		enforced := 0
		if st != nil && st.ObservedGeneration == policy.Generation {
			for _, w := range st.Waves {
				if w.Phase == schedv1alpha1.WaveEnforced {
					enforced++
				}
			}
		}
		if enforced == 0 {
			return string(schedv1alpha1.Audit)
		}
		return fmt.Sprintf("%s in %d/%d waves", schedv1alpha1.Enforce, enforced, len(r.Waves))
	}
	out := string(policy.Spec.Enforcement)
	if out == "" {
		out = string(schedv1alpha1.Enforce)
	}
	switch n := len(policy.Spec.EnforcementOverrides); n {
	case 0:
	case 1:
		out += " + 1 override"
	default:
		out += fmt.Sprintf(" + %d overrides", n)
	}
	return out
}

// setRolloutPaused sets the RolloutPaused condition from status.rollout
// (which the RolloutController writes): True while the rollout of this
// generation is paused, with its pauseReason as the reason.
// setDrifted sets the Drifted condition from status.drift, which the drift
// controller writes: the conditions have one writer, this reconciler,
// which the drift controller's write of status.drift brings back. It
// changes only when the drift starts or ends (the count is status.drift's),
// so that a count that moves costs no second write.
func setDrifted(status *schedv1alpha1.SchedulingPolicyStatus, policy *schedv1alpha1.SchedulingPolicy) {
	st := status.Drift
	if st == nil {
		meta.RemoveStatusCondition(&status.Conditions, schedv1alpha1.ConditionDrifted)
		return
	}
	cond := metav1.Condition{Type: schedv1alpha1.ConditionDrifted, Status: metav1.ConditionFalse, Reason: schedv1alpha1.ReasonNoDrift,
		Message: DriftMessage(0), ObservedGeneration: policy.Generation}
	if st.Count > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, schedv1alpha1.ReasonPodsDrifted, DriftMessage(1)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
}

// DriftMessage is the Drifted condition's message for a count of drifted
// pods (only whether there are any).
func DriftMessage(count int32) string {
	if count > 0 {
		return "running pods are on nodes the policy's enforced filters refuse (status.drift)"
	}
	return "no running pod is on a node the policy's enforced filters refuse"
}

func setRolloutPaused(status *schedv1alpha1.SchedulingPolicyStatus, policy *schedv1alpha1.SchedulingPolicy) {
	st := status.Rollout
	if policy.Spec.Rollout == nil || st == nil || st.ObservedGeneration != policy.Generation || st.Phase != schedv1alpha1.RolloutPaused {
		meta.RemoveStatusCondition(&status.Conditions, schedv1alpha1.ConditionRolloutPaused)
		return
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: schedv1alpha1.ConditionRolloutPaused, Status: metav1.ConditionTrue,
		Reason: string(st.PauseReason), Message: engine.Truncate(st.Message, maxConditionMessage), ObservedGeneration: policy.Generation})
}
