package celplugins

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// Event resources the plugins register beyond kube-scheduler's own. The
// scheduler watches them with its dynamic informer (<plural>.<version>.<group>).
const (
	SchedulingPolicyResource fwk.EventResource = "schedulingpolicies.v1alpha1.scheduling.celsched.io"
	NamespaceResource        fwk.EventResource = "namespaces.v1."
)

// Requeuer decides what the CEL plugins requeue: the queueing hints of
// their cluster events, and the pending pods that a params object's change
// may affect (ParamsChanged). It only reads: a hint is a pure function of
// its event and the inputs, and records, logs (beyond V(5)) and starts
// nothing.
type Requeuer struct {
	inputs *Inputs
	// activator requeues pods (the scheduling queue, through the first
	// framework handle attached), and lists them: for params events.
	activator atomic.Pointer[podActivator]
	// refused are the pending pods whose preemption a victim rule
	// refused, by UID (preemptors.go). Written by CELPreemption's
	// PostFilter, and by the pod event handler when a pod is bound or
	// deleted; read on policy and namespace events.
	refused sync.Map // ktypes.UID -> *corev1.Pod
}

// podActivator is what ParamsChanged needs of the scheduler.
type podActivator struct {
	activate func(logger klog.Logger, pods map[string]*corev1.Pod)
	// pods lists the pods of a namespace, or of all when it is empty.
	pods func(namespace string) ([]*corev1.Pod, error)
}

// PolicyEvents is the SchedulingPolicy event registration of a plugin
// that rejects pods by policy: updates and deletions requeue the pods the
// old or new version may apply to. Additions do not: a new policy only
// adds rules, it cannot make a rejected pod schedulable.
func (q *Requeuer) PolicyEvents() fwk.ClusterEventWithHint {
	return fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: SchedulingPolicyResource, ActionType: fwk.Add | fwk.Update | fwk.Delete},
		QueueingHintFn: q.PolicyHint,
	}
}

// NamespaceEvents requeues pods when their namespace's labels change.
func (q *Requeuer) NamespaceEvents() fwk.ClusterEventWithHint {
	return fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: NamespaceResource, ActionType: fwk.Update},
		QueueingHintFn: q.NamespaceHint,
	}
}

// PodLabelEvents requeues a pod whose own labels changed (policies select
// pods by label).
func (q *Requeuer) PodLabelEvents() fwk.ClusterEventWithHint {
	return fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodLabel},
		QueueingHintFn: OwnLabelsHint,
	}
}

// PodGroupEvents requeues a pod when its group's PodGroup is created or
// its labels or minCount change, for the policies that read podGroup.
func (q *Requeuer) PodGroupEvents() fwk.ClusterEventWithHint {
	return fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.PodGroup, ActionType: fwk.Add | fwk.Update},
		QueueingHintFn: q.PodGroupHint,
	}
}

// GroupMemberEvents requeues a held member of a pod group when another
// member of its group is added, unscheduled or placed. kube-scheduler
// gates a pod group as a whole and remembers one gating plugin for it,
// that of the last member held: when one member is held by a preEnqueue
// rule and another, seen earlier, by GangScheduling (its quorum not met
// yet), the member that completes the quorum reaches GangScheduling's hint
// only if GangScheduling is the group's gating plugin. Without this event
// the members GangScheduling held would stay unreported, PreEnqueue never
// run for them again, until the rule's own event; with it the group's
// PreEnqueue runs again and every member is held by the rule, and says so.
func (q *Requeuer) GroupMemberEvents() []fwk.ClusterEventWithHint {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.UnscheduledPod, ActionType: fwk.Add}, QueueingHintFn: SameGroupHint},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Add}, QueueingHintFn: SameGroupHint},
	}
}

// SameGroupHint requeues a pod of a pod group when the added pod is
// another member of the same group.
func SameGroupHint(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	added, ok := newObj.(*corev1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("pod add event with %T", newObj)
	}
	group := engine.GroupName(pod)
	if group == "" || added.UID == pod.UID || added.Namespace != pod.Namespace || engine.GroupName(added) != group {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// PodGroupHint requeues a pod when the PodGroup it names is created or
// what podGroup reads of it (labels, minCount) changes, and a policy reads
// podGroup. kube-scheduler's pod group state has the new version before
// the hint runs (its event handler updates the cache first).
func (q *Requeuer) PodGroupHint(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldGroup, err := convert[schedulingv1beta1.PodGroup](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newGroup, err := convert[schedulingv1beta1.PodGroup](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if newGroup == nil || newGroup.Namespace != pod.Namespace || newGroup.Name != engine.GroupName(pod) ||
		!q.inputs.Policies.Snapshot().ReadsPodGroup() {
		return fwk.QueueSkip, nil
	}
	if oldGroup != nil && engine.NewPodGroup(pod.Namespace, newGroup.Name, oldGroup, nil).Key() == engine.NewPodGroup(pod.Namespace, newGroup.Name, newGroup, nil).Key() {
		return fwk.QueueSkip, nil // nothing podGroup reads changed
	}
	logger.V(5).Info("The pod's PodGroup changed, requeueing the pod", "pod", klog.KObj(pod), "podGroup", klog.KObj(newGroup))
	return fwk.Queue, nil
}

// PolicyHint decides whether a SchedulingPolicy event may make a pod that
// a policy rejected schedulable: an update of the spec or a deletion of a
// policy whose old or new selectors select the pod. It only reads: the
// PolicyFeed has applied the event to the registry before kube-scheduler
// calls the hint, so the retried pod sees it.
func (q *Requeuer) PolicyHint(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPolicy, err := policyOf(oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newPolicy, err := policyOf(newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if oldPolicy == nil {
		return fwk.QueueSkip, nil // added: only adds rules
	}
	if newPolicy != nil && newPolicy.Generation == oldPolicy.Generation && engine.RolloutKey(newPolicy) == engine.RolloutKey(oldPolicy) {
		return fwk.QueueSkip, nil // status or metadata only (a rollout's enforced waves are not)
	}
	ns, err := q.inputs.namespace(pod.Namespace)
	if err != nil {
		return fwk.Queue, nil // cannot tell: retry
	}
	if selects(&oldPolicy.Spec, pod, ns) || (newPolicy != nil && selects(&newPolicy.Spec, pod, ns)) {
		logger.V(5).Info("SchedulingPolicy changed, requeueing the pod", "pod", klog.KObj(pod), "policy", oldPolicy.Name)
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// selects says whether a policy's selectors may select the pod; selectors
// that do not parse may select any pod.
func selects(spec *schedv1alpha1.SchedulingPolicySpec, pod *corev1.Pod, ns *corev1.Namespace) bool {
	sel, errs := engine.NewSelectors(spec)
	return len(errs) > 0 || sel.Select(pod, ns)
}

// NamespaceHint requeues a pod when the labels of its namespace change. It
// only reads: the PolicyFeed gave the new version to ObserveNamespace before
// the hint runs, so the retry sees the new labels.
func (q *Requeuer) NamespaceHint(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNs, err := convert[corev1.Namespace](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newNs, err := convert[corev1.Namespace](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if newNs == nil || newNs.Name != pod.Namespace {
		return fwk.QueueSkip, nil
	}
	if oldNs != nil && maps.Equal(oldNs.Labels, newNs.Labels) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Namespace labels changed, requeueing the pod", "pod", klog.KObj(pod))
	return fwk.Queue, nil
}

// OwnLabelsHint requeues a pod whose own labels changed.
func OwnLabelsHint(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, okOld := oldObj.(*corev1.Pod)
	newPod, okNew := newObj.(*corev1.Pod)
	if !okOld || !okNew {
		return fwk.Queue, fmt.Errorf("pod update event with %T and %T", oldObj, newObj)
	}
	if newPod.UID != pod.UID || maps.Equal(oldPod.Labels, newPod.Labels) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// NodeHint decides whether a node event may make the pod schedulable for
// the policies: a new node, or a node that passes the policies' filters now
// and did not before. Filters that read nodeInfo cannot be judged outside a
// scheduling cycle and always requeue.
func (q *Requeuer) NodeHint(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNode, _ := oldObj.(*corev1.Node)
	newNode, okNew := newObj.(*corev1.Node)
	if !okNew {
		return fwk.Queue, fmt.Errorf("node event without a new node: %T", newObj)
	}
	ctx := newHintContext()
	m, err := q.inputs.Match(ctx, pod)
	if err != nil {
		return fwk.Queue, err
	}
	if m.Rejection != nil {
		return fwk.QueueSkip, nil
	}
	if usesNodeInfo(m) {
		return fwk.Queue, nil // e.g. allocatable changed
	}
	if !q.mayPass(ctx, m, newNode) {
		return fwk.QueueSkip, nil
	}
	if oldNode != nil && q.mayPass(ctx, m, oldNode) {
		return fwk.QueueSkip, nil // the policies did not reject this node before
	}
	logger.V(5).Info("Node may pass the policies now, requeueing the pod", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
	return fwk.Queue, nil
}

// usesNodeInfo says whether an enforced filter of the match reads nodeInfo.
func usesNodeInfo(m *Match) bool {
	for _, p := range m.Filters {
		if p.Enforced() && p.UsesNodeInfo() {
			return true
		}
	}
	return false
}

// mayPass says whether the enforced filters of a match, none of which reads
// nodeInfo, pass on a node.
func (q *Requeuer) mayPass(ctx context.Context, m *Match, node *corev1.Node) bool {
	in, err := q.inputs.Converter.Node(node, nil)
	if err != nil {
		return true
	}
	for _, p := range m.Filters {
		if d := p.Filter(ctx, m.Pod, in); d.Acts() {
			return false
		}
	}
	return true
}

// PodHint requeues a pod whose own labels changed, a pod that a filter
// reading nodeInfo (its pods, requested resources or pod count) may admit
// now that a pod on some node was added, removed, relabelled or scaled
// down, and a pod that a filter reading where its group's members are
// (podGroup.assignedNodes) may admit now that a member was placed or
// removed.
func (q *Requeuer) PodHint(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	other, _ := newObj.(*corev1.Pod)
	if other == nil {
		other, _ = tombstoned[*corev1.Pod](oldObj)
	}
	if other == nil {
		return fwk.Queue, fmt.Errorf("pod event without a pod: %T, %T", oldObj, newObj)
	}
	if other.UID == pod.UID {
		if oldObj == nil || newObj == nil {
			return fwk.QueueSkip, nil
		}
		return OwnLabelsHint(logger, pod, oldObj, newObj)
	}
	if other.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	m, err := q.inputs.Match(newHintContext(), pod)
	if err != nil {
		return fwk.Queue, err
	}
	if usesNodeInfo(m) {
		return fwk.Queue, nil
	}
	if name := engine.GroupName(pod); name != "" && other.Namespace == pod.Namespace && engine.GroupName(other) == name && readsMembers(m) {
		logger.V(5).Info("A member of the pod's group was placed or removed, requeueing the pod", "pod", klog.KObj(pod), "member", klog.KObj(other))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// readsMembers says whether an enforced filter policy of the match reads
// where the members of the pod's group are (podGroup.assignedNodes).
func readsMembers(m *Match) bool {
	for _, p := range m.Filters {
		if p.Enforced() && p.ReadsPodGroupMembers() {
			return true
		}
	}
	return false
}

// policyOf converts the object of a dynamic informer event; nil stays nil.
func policyOf(obj any) (*schedv1alpha1.SchedulingPolicy, error) {
	return convert[schedv1alpha1.SchedulingPolicy](obj)
}

// convert turns an event object, unstructured from the scheduler's dynamic
// informer or already typed, into T.
func convert[T any](obj any) (*T, error) {
	obj, _ = tombstoned[any](obj)
	switch o := obj.(type) {
	case nil:
		return nil, nil
	case *T:
		return o, nil
	case *unstructured.Unstructured:
		out := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("converting %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unexpected event object %T", obj)
	}
}

// hintContext bounds the evaluations of a queueing hint by
// DefaultEvaluationBudget without a timer (a hint starts none, and has no
// end to stop one at): Err reports the deadline once it is past, which the
// engine checks before each expression; Done is nil, so a comprehension
// already running is bounded by the cost limits rather than interrupted.
type hintContext struct {
	context.Context
	deadline time.Time
}

func newHintContext() hintContext {
	return hintContext{Context: context.Background(), deadline: time.Now().Add(DefaultEvaluationBudget)}
}

// Deadline implements context.Context.
func (c hintContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Err implements context.Context.
func (c hintContext) Err() error {
	if time.Now().After(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}
