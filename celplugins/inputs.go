package celplugins

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/celsched/celsched/engine"
)

// Inputs is what the CEL plugins read: the policies in force, the
// converter that caches pod, node and namespace values, the pods'
// namespaces and the params objects. It only reads; nothing it returns is
// written after.
type Inputs struct {
	Policies  Policies
	Converter *engine.Converter
	// Params, when set, finds the params objects of parameterized
	// policies (the scheduler's ParamsStore); without it they follow their
	// failurePolicy.
	Params engine.ParamsResolver
	// PodGroups finds pods' groups for the policies that read podGroup,
	// outside scheduling cycles; CycleGroups in them (nil: PodGroups).
	// Without either, a pod's group has its name alone.
	PodGroups, CycleGroups engine.PodGroupResolver

	namespaces *namespaces
	// lastSigned is the last pod signed. Key: pod UID, resourceVersion and
	// policy snapshot. Bound: one. Written by SignPod.
	lastSigned lastSigned
	// matches are the pods' last Matches (see the type).
	matches matches
}

// UseNamespaces reads the pods' namespaces from a lister: the scheduler's
// (Attach), or a test's.
func (in *Inputs) UseNamespaces(lister interface {
	Get(name string) (*corev1.Namespace, error)
}) {
	in.namespaces = &namespaces{lister: lister, seen: map[string]*corev1.Namespace{}}
}

// PodInput converts a pod and its namespace for the engine. A namespace
// that is not known yet leaves the namespace unset: expressions that read
// it fail and follow their policy's failurePolicy.
func (in *Inputs) PodInput(pod *corev1.Pod) (*engine.PodInput, error) {
	ns, err := in.podNamespace(pod)
	if err != nil {
		return nil, err
	}
	return in.podInput(pod, ns, in.podGroup(in.Policies.Snapshot(), pod, in.PodGroups))
}

// podGroup resolves the pod's group with groups when a policy of the
// snapshot reads podGroup; nil (the evaluations never read it) otherwise.
func (in *Inputs) podGroup(snapshot *engine.Snapshot, pod *corev1.Pod, groups engine.PodGroupResolver) *engine.PodGroup {
	name := engine.GroupName(pod)
	switch {
	case name == "" || !snapshot.ReadsPodGroup():
		return nil
	case groups == nil:
		return engine.NewPodGroup(pod.Namespace, name, nil, nil)
	}
	return groups.PodGroup(pod)
}

// podNamespace returns the pod's namespace, nil when it is not known yet.
func (in *Inputs) podNamespace(pod *corev1.Pod) (*corev1.Namespace, error) {
	ns, err := in.namespaces.get(pod.Namespace)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
	}
	if err != nil {
		return nil, nil
	}
	return ns, nil
}

// podInput converts a pod with its namespace (nil when not known) and
// its group (nil when no policy reads it).
func (in *Inputs) podInput(pod *corev1.Pod, ns *corev1.Namespace, group *engine.PodGroup) (*engine.PodInput, error) {
	out, err := in.Converter.Pod(pod, ns)
	if err != nil {
		return nil, err
	}
	out.Params = in.Params
	out.Group = group
	return out, nil
}

// namespaces is the scheduler's namespace lister, plus the namespace
// versions that queueing hints saw before the lister did: a pod requeued
// because its namespace's labels changed must be evaluated against the new
// labels, although the scheduler's dynamic informer (which fires the hint)
// and its typed informer (behind the lister) may deliver the change in
// either order.
type namespaces struct {
	lister interface {
		Get(name string) (*corev1.Namespace, error)
	}
	mu   sync.Mutex
	seen map[string]*corev1.Namespace
}

func (n *namespaces) get(name string) (*corev1.Namespace, error) {
	ns, err := n.lister.Get(name)
	n.mu.Lock()
	defer n.mu.Unlock()
	seen, ok := n.seen[name]
	if !ok {
		return ns, err
	}
	if err == nil && !newerVersion(seen, ns) {
		delete(n.seen, name) // the lister caught up
		return ns, nil
	}
	return seen, nil
}

// ObserveNamespace records a namespace version the scheduler's dynamic
// informer delivered, for pods evaluated before the typed lister has it
// (PolicyFeed.Namespace).
func (in *Inputs) ObserveNamespace(ns *corev1.Namespace) {
	if in.namespaces != nil {
		in.namespaces.observe(ns)
	}
}

// namespace returns a pod's namespace as the plugins see it (nil and the
// error when it is not known).
func (in *Inputs) namespace(name string) (*corev1.Namespace, error) {
	if in.namespaces == nil {
		return nil, fmt.Errorf("namespace %s: no namespace lister", name)
	}
	return in.namespaces.get(name)
}

// forgetNamespace drops a deleted namespace from the caches.
func (in *Inputs) forgetNamespace(name string) {
	in.Converter.ForgetNamespace(name)
	if in.namespaces != nil {
		in.namespaces.forget(name)
	}
}

// observe records a namespace version seen in an event.
func (n *namespaces) observe(ns *corev1.Namespace) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.seen[ns.Name]; !ok || newerVersion(ns, old) {
		n.seen[ns.Name] = ns
	}
}

func (n *namespaces) forget(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.seen, name)
}

// newerVersion says whether a is a later version of the same namespace
// than b.
func newerVersion(a, b *corev1.Namespace) bool {
	if a.UID != b.UID {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion)
	return err == nil && c > 0
}

// Victim converts a running pod that preemption would evict for the pod
// of m, on its node, for the victim rules (engine.Converter.Victim).
func (in *Inputs) Victim(m *Match, victim *corev1.Pod, node *corev1.Node) (*engine.VictimInput, error) {
	ns, err := in.podNamespace(victim)
	if err != nil {
		return nil, err
	}
	return in.Converter.Victim(m.Pod, victim, ns, node)
}
