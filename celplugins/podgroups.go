package celplugins

import (
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
)

// PodGroups finds a pod's group (podGroup) in kube-scheduler's pod group
// state: the PodGroup object and where the group's members are bound or
// assumed. Read it through a framework handle: its live state (the
// scheduler cache, locked per read) outside scheduling cycles, for
// PreEnqueue and the queueing hints; the cycle's snapshot in a cycle,
// which also holds the members a pod group cycle placed before the pod
// (kube-scheduler assumes them in the snapshot until the whole group is
// placed). It never calls the API server.
type PodGroups struct {
	// lister returns the listers to read: the handle's pod group
	// manager, or its snapshot's.
	lister func() podGroupLister
}

// podGroupLister is what PodGroups reads: fwk.PodGroupManager and
// fwk.SharedLister both are.
type podGroupLister interface {
	PodGroups() fwk.PodGroupLister
	PodGroupStates() fwk.PodGroupStateLister
}

var _ engine.PodGroupResolver = &PodGroups{}

// LivePodGroups reads the handle's pod group manager (the scheduler
// cache); without one (GenericWorkload off in a test's framework), a group
// has its name alone.
func LivePodGroups(h fwk.Handle) *PodGroups {
	return &PodGroups{lister: func() podGroupLister {
		if m := h.PodGroupManager(); m != nil {
			return m
		}
		return nil
	}}
}

// CyclePodGroups reads the handle's snapshot of the current scheduling
// cycle: only for cycles.
func CyclePodGroups(h fwk.Handle) *PodGroups {
	return &PodGroups{lister: func() podGroupLister {
		if s := h.SnapshotSharedLister(); s != nil {
			return s
		}
		return nil
	}}
}

// PodGroup implements engine.PodGroupResolver. A group whose object is not
// known (not created yet, or GenericWorkload off) has its name, no labels
// and minCount 0; one without state has no placed members.
func (g *PodGroups) PodGroup(pod *corev1.Pod) *engine.PodGroup {
	name := engine.GroupName(pod)
	if name == "" {
		return engine.NoPodGroup
	}
	l := g.lister()
	if l == nil {
		return engine.NewPodGroup(pod.Namespace, name, nil, nil)
	}
	obj, err := l.PodGroups().Get(pod.Namespace, name)
	if err != nil {
		obj = nil
	}
	var nodes []string
	if state, err := l.PodGroupStates().Get(pod.Namespace, name); err == nil {
		for _, member := range state.ScheduledPods() {
			if member.UID != pod.UID && member.Spec.NodeName != "" {
				nodes = append(nodes, member.Spec.NodeName)
			}
		}
	}
	return engine.NewPodGroup(pod.Namespace, name, obj, nodes)
}
