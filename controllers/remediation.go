package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/verdict"
)

// Reasons remediation does not act (status.drift.remediation.reason).
const (
	RemediationDisabled    = "DisabledByManager"
	RemediationNotEnforced = "PolicyNotEnforced"
	RemediationPaused      = "RolloutPaused"
	RemediationDeleting    = "PolicyDeleting"
)

// budgetRecheck is how often a policy whose drifted pods wait for their
// workload's budget (pods becoming Ready) is looked at again.
const budgetRecheck = 2 * time.Second

// remediationActive says whether remediation acts on the policy now, and
// if not, why.
func (d *DriftController) remediationActive(p *schedv1alpha1.SchedulingPolicy) (bool, string) {
	switch {
	case !d.Remediation || d.Evict == nil:
		return false, RemediationDisabled
	case p.DeletionTimestamp != nil:
		return false, RemediationDeleting
	case p.Spec.Remediation == nil:
		return false, ""
	case p.Spec.Rollout == nil && p.Spec.Enforcement == schedv1alpha1.Audit:
		return false, RemediationNotEnforced
	case p.Status.Rollout != nil && p.Status.Rollout.Phase == schedv1alpha1.RolloutPaused:
		return false, RemediationPaused
	case p.Status.Rollout != nil && p.Status.Rollout.Phase == schedv1alpha1.RolloutAborted:
		return false, RemediationNotEnforced
	}
	return true, ""
}

// remediate evicts the policy's drifted pods that may be, within the
// rate and each workload's budget, and says why the others are not
// (blocked). It returns the remediation's status and when to look again.
func (d *DriftController) remediate(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory,
	keys []types.NamespacedName, pods map[types.NamespacedName]driftedPod, blocked map[types.NamespacedName]schedv1alpha1.RemediationBlockReason) (*schedv1alpha1.RemediationStatus, time.Duration, error) {
	log := ctrl.LoggerFrom(ctx).WithName("remediation")
	rs := &schedv1alpha1.RemediationStatus{}
	if old := p.Status.Drift; old != nil && old.Remediation != nil {
		rs.Evicted, rs.LastEvictionTime = old.Remediation.Evicted, old.Remediation.LastEvictionTime
	}
	// The evictions not written yet (a write held back, or failed).
	rs.Evicted += mem.unwrittenEvictions
	if !mem.lastEviction.IsZero() && (rs.LastEvictionTime == nil || mem.lastEviction.After(rs.LastEvictionTime.Time)) {
		rs.LastEvictionTime = &metav1.Time{Time: mem.lastEviction}
	}
	rs.Active, rs.Reason = d.remediationActive(p)
	if !rs.Active || len(keys) == 0 {
		return rs, 0, nil
	}
	spec := p.Spec.Remediation
	rate := int(spec.Rate)
	if rate <= 0 {
		rate = 1
	}
	now := d.now()
	// Evictions are spaced evenly: one per minute/rate.
	spacing := time.Minute / time.Duration(rate)
	last := mem.lastEviction
	if rs.LastEvictionTime != nil && rs.LastEvictionTime.After(last) {
		last = rs.LastEvictionTime.Time // a previous leader's
	}
	var next time.Duration
	later := func(after time.Duration) {
		if after > 0 && (next == 0 || after < next) {
			next = after
		}
	}
	// unavailable counts, per workload, the pods unavailable, with those
	// evicted in this step.
	unavailable := map[types.UID]int{}
	var e *verdict.Evaluator
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	for _, key := range keys {
		pod, err := d.Pods.Pods(key.Namespace).Get(key.Name)
		if err != nil || !running(pod) || pod.UID != pods[key].uid {
			continue // gone or changed: the tracker's next step says
		}
		owner := metav1.GetControllerOf(pod)
		if !verdict.Replaced(pod) {
			blocked[key] = schedv1alpha1.BlockedNoController
			continue
		}
		if spec.MinAge != nil {
			if age := now.Sub(pod.CreationTimestamp.Time); age < spec.MinAge.Duration {
				blocked[key] = schedv1alpha1.BlockedTooYoung
				later(spec.MinAge.Duration - age)
				continue
			}
		}
		if wait := last.Add(spacing).Sub(now); !last.IsZero() && wait > 0 {
			blocked[key] = schedv1alpha1.BlockedRate
			later(wait)
			continue
		}
		n, ok := unavailable[owner.UID]
		total := 0
		if !ok {
			if n, total, err = d.workload(pod.Namespace, owner.UID); err != nil {
				return nil, 0, err
			}
			unavailable[owner.UID] = n
		} else {
			_, total, _ = d.workload(pod.Namespace, owner.UID)
		}
		if n >= maxUnavailable(spec.MaxUnavailable, total) {
			blocked[key] = schedv1alpha1.BlockedBudget
			later(budgetRecheck)
			continue
		}
		if e == nil {
			if e, err = d.Live.Evaluator(ctx); err != nil {
				return nil, 0, err
			}
		}
		// The pod must still be refused (the policy as the scheduler has
		// it now), and its replacement must have a node.
		refused, err := refusedBy(ctx, e, pod, p.Name)
		if err != nil || !refused {
			continue
		}
		r, err := e.Replacement(ctx, pod)
		if err != nil {
			log.V(2).Info("Not evaluating the replacement of a drifted pod", "pod", klog(pod), "err", err)
			continue
		}
		if len(r.Feasible) == 0 {
			blocked[key] = schedv1alpha1.BlockedNoFeasibleNode
			continue
		}
		// Read the policy fresh: an eviction never follows a policy
		// switched to Audit, paused or deleted since the cache saw it.
		fresh := &schedv1alpha1.SchedulingPolicy{}
		if err := d.Reader.Get(ctx, client.ObjectKey{Name: p.Name}, fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return rs, 0, nil
			}
			return nil, 0, err
		}
		if active, why := d.remediationActive(fresh); !active {
			rs.Active, rs.Reason = false, why
			return rs, 0, nil
		}
		if err := d.Evict(ctx, pod); err != nil {
			if apierrors.IsTooManyRequests(err) {
				blocked[key] = schedv1alpha1.BlockedDisruptionBudget
				later(budgetRecheck)
				continue
			}
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, 0, fmt.Errorf("evicting pod %s: %w", key, err)
		}
		log.Info("Evicted a drifted pod", "pod", klog(pod), "node", pod.Spec.NodeName, "policy", p.Name, "replacementNode", r.Feasible[0])
		mem.lastEviction, last = now, now
		mem.unwrittenEvictions++
		unavailable[owner.UID]++
		rs.Evicted++
		rs.LastEvictionTime = &metav1.Time{Time: now}
		if d.Recorder != nil {
			d.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonPodEvicted, "Remediate",
				"evicted pod %s from node %s (%s); its replacement has a node (%s)", key, pod.Spec.NodeName, truncateTo(pods[key].message, 256), r.Feasible[0])
		}
	}
	return rs, next, nil
}

// refusedBy says whether the policy, as the scheduler has it, refuses the
// running pod its node.
func refusedBy(ctx context.Context, e *verdict.Evaluator, pod *corev1.Pod, policy string) (bool, error) {
	rs, err := e.Refusals(ctx, pod)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if r.Policy == policy {
			return true, nil
		}
	}
	return false, nil
}

// workload counts a controller's pods in a namespace that have not
// terminated (total) and those of them that are unavailable: being
// deleted, or not Ready.
func (d *DriftController) workload(namespace string, owner types.UID) (unavailable, total int, err error) {
	list, err := d.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return 0, 0, fmt.Errorf("listing pods: %w", err)
	}
	for _, pod := range list {
		ref := metav1.GetControllerOf(pod)
		if ref == nil || ref.UID != owner || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		total++
		if pod.DeletionTimestamp != nil || !podReady(pod) {
			unavailable++
		}
	}
	return unavailable, total, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// maxUnavailable resolves spec.remediation.maxUnavailable for a workload
// of total pods: an integer, or a percentage rounded down; at least 1.
func maxUnavailable(v *intstr.IntOrString, total int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}
