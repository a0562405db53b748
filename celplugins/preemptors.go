package celplugins

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// RefusedPreemptor records a pending pod whose preemption a victim rule
// refused (CELPreemption): kube-scheduler requeues it on the events of the
// plugins that rejected it (room, affinity), never on a policy's or a
// namespace's, which may now let it preempt. PreemptorsChanged requeues
// such pods. The record leaves when the pod is bound or deleted, or
// preempts (PreemptorDone).
func (q *Requeuer) RefusedPreemptor(pod *corev1.Pod) { q.refused.Store(pod.UID, pod) }

// PreemptorDone forgets a pod RefusedPreemptor recorded.
func (q *Requeuer) PreemptorDone(uid ktypes.UID) { q.refused.Delete(uid) }

// PreemptorsChanged requeues the pods whose preemption a victim rule
// refused: a policy changed, or a namespace's labels (which a victim rule
// may read, of the preemptor's namespace or a victim's). Only pods that
// are unschedulable move (Activate leaves the others).
func (q *Requeuer) PreemptorsChanged(why string) {
	a := q.activator.Load()
	if a == nil {
		return
	}
	pods := map[string]*corev1.Pod{}
	q.refused.Range(func(_, v any) bool {
		pod := v.(*corev1.Pod)
		pods[pod.Namespace+"/"+pod.Name] = pod
		return true
	})
	if len(pods) == 0 {
		return
	}
	logger := klog.Background().WithName("preemption")
	logger.V(4).Info("Requeueing the pods a victim rule refused", "why", why, "pods", len(pods))
	a.activate(logger, pods)
}

// ObserveNamespace is Inputs.ObserveNamespace, and, when the namespace's
// labels changed, PreemptorsChanged: the scheduler's dynamic namespace
// informer gives it each version (PolicyFeed.Namespace).
func (rt *Runtime) ObserveNamespace(ns *corev1.Namespace) {
	old, _ := rt.Inputs.namespace(ns.Name)
	rt.Inputs.ObserveNamespace(ns)
	if old != nil && !maps.Equal(old.Labels, ns.Labels) {
		rt.Requeue.PreemptorsChanged("namespace " + ns.Name + " relabelled")
	}
}
