package celplugins

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PodState is what a scheduler with a set of profiles makes of a pod.
type PodState uint8

// The states, from the pods no scheduler places to the profiles' bound ones.
const (
	// PodTerminated: the pod Succeeded or Failed. No scheduler places it,
	// and it takes no room on its node (the scheduler's informer leaves it
	// out).
	PodTerminated PodState = iota
	// PodDeleting: the pod is being deleted. It is not placed (again);
	// bound, it keeps its room on its node until it is gone.
	PodDeleting
	// PodOtherScheduler: neither terminated nor being deleted, and its
	// scheduler is none of the profiles'.
	PodOtherScheduler
	// PodPending: a pod of one of the profiles on no node yet.
	PodPending
	// PodBound: a pod of one of the profiles on a node.
	PodBound
)

var podStates = [...]string{"terminated", "deleting", "other-scheduler", "pending", "bound"}

func (s PodState) String() string {
	if int(s) < len(podStates) {
		return podStates[s]
	}
	return "unknown"
}

// Placed says whether the profiles place the pod: it is pending or bound.
func (s PodState) Placed() bool { return s == PodPending || s == PodBound }

// ProfilePod says what a scheduler whose profiles have schedulerNames
// makes of a pod: which pods it places (PodPending, PodBound) and which it
// leaves alone (terminated, being deleted, of another scheduler). The
// pod's scheduler is SchedulerName's. It is the one answer to "the pods of
// my profiles" for the scheduler's own counts and the CLI's reports.
func ProfilePod(pod *corev1.Pod, schedulerNames []string) PodState {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return PodTerminated
	case pod.DeletionTimestamp != nil:
		return PodDeleting
	case !slices.Contains(schedulerNames, SchedulerName(pod)):
		return PodOtherScheduler
	case pod.Spec.NodeName == "":
		return PodPending
	default:
		return PodBound
	}
}

// SchedulerName is the pod's scheduler: spec.schedulerName, or
// default-scheduler when it is empty (the API server's default, so that a
// pod read from a file is taken as the stored pod would be).
func SchedulerName(pod *corev1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return corev1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}

// OnNode says whether the pod takes room on its node as the scheduler's
// cache counts it: bound and not terminated, of any scheduler, a pod being
// deleted included.
func OnNode(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}
