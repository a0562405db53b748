package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/simulate/verdict"
)

// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create

// Reasons of drift's and remediation's events, on the policy.
const (
	ReasonDriftDetected      = "DriftDetected"
	ReasonDriftResolved      = "DriftResolved"
	ReasonPodEvicted         = "PodEvicted"
	ReasonRemediationBlocked = "RemediationBlocked"
	ReasonRemediationStopped = "RemediationStopped"
)

// maxDriftBatch bounds the work items one recomputation takes from the
// queue: a burst of events is evaluated in batches of at most that many.
const maxDriftBatch = 1000

// driftKind is what a work item of the drift queue names.
type driftKind int

const (
	driftPod driftKind = iota
	driftNode
	driftNamespace
	driftPolicy
)

// driftKey is a work item: what an event touched. Equal items are queued
// once (the queue deduplicates), so the queue is bounded by the number of
// pods, nodes, namespaces and policies.
type driftKey struct {
	kind            driftKind
	namespace, name string
}

// driftedPod is a running pod an enforced policy refuses on its node.
type driftedPod struct {
	uid      types.UID
	node     string
	message  string
	placedBy schedv1alpha1.PodPlacement
}

// policyDrift is what the tracker keeps of one policy.
type policyDrift struct {
	// generation is the policy's compiled generation of the last
	// evaluation of its pods.
	generation int64
	pods       map[types.NamespacedName]driftedPod
	// since is when pods last went from none to some.
	since time.Time
}

// remediationMemory is what the reconciler keeps of one policy between
// its steps.
type remediationMemory struct {
	lastWrite time.Time
	// lastEviction is when the policy's remediation last evicted a pod
	// (its rate spaces the evictions).
	lastEviction time.Time
	// unwrittenEvictions counts the evictions not in status yet: added
	// to the stored count in the next write (conditional on the version
	// read), and reset once it succeeded.
	unwrittenEvictions int64
	// seen is the policy's generation, enforcement, rollout key and
	// phase last given to the tracker: a change recomputes its pods.
	seen string
	// blocked is the last summary of why pods are not evicted, for the
	// RemediationBlocked event: one event per change.
	blocked string
	// told is, per drifted pod whose replacement was judged blocked, the
	// reason its RemediationBlocked event (related to the pod) gave: one
	// event per pod and reason. Bound: the policy's drifted pods.
	told map[types.NamespacedName]schedv1alpha1.RemediationBlockReason
	// workloads are the workloads the policy's remediation evicted from,
	// until their replacements are known to have landed (or their
	// breaker closes). Key: the controller's UID. Bound: the workloads
	// evicted from within ReplacementDeadline, and those whose breaker
	// is open; cleared when the policy's evaluation changes.
	workloads map[types.UID]*workloadEvictions
	// namespaces is when the policy's remediation last evicted a pod of
	// each namespace (the rate goes to the others first). Bound: the
	// namespaces evicted from in the last hour.
	namespaces map[string]time.Time
}

// DriftController keeps, per policy, the running pods (bound, not
// terminating) that its enforced filters refuse on the node they run on
// (drift), and, for the policies that ask for it (spec.remediation),
// evicts them within budgets. It runs on the leader.
//
// Two parts with one job each: the tracker recomputes drift on the
// events that can change it (a pod bound, changed or deleted: that pod;
// a node's labels, taints, spec or allocatable changed: the pods on it; a
// namespace's labels: its pods; a policy's spec, enforcement or waves, or
// its params: every running pod, which its match narrows to its own),
// taking the touched items from a deduplicating queue in batches, with
// the one evaluator (Refuser.Refusals, which is
// verdict.Evaluator.Refusals, the CEL filter plugin's decisions, built
// over the nodes of the batch's pods only); it never scans on a timer.
// The reconciler, per policy, writes status.drift and the Drifted
// condition (only when they change, at most once per WriteInterval: one
// writer of both), records Events on transitions, and runs the
// remediation.
type DriftController struct {
	Client client.Client
	// Reader reads a policy fresh before each eviction (the manager's
	// API reader): an eviction never follows a stale Enforce.
	Reader client.Reader
	// Evict evicts a pod through the Eviction API (policy/v1); nil
	// evicts nothing (remediation is reported as disabled).
	Evict func(ctx context.Context, pod *corev1.Pod) error
	// Live evaluates the cluster as the scheduler's informers hold it.
	Live *Live
	// Pods is the scheduler's pod lister (Live.Pods).
	Pods     corelisters.PodLister
	Recorder events.EventRecorder
	// Remediation is the manager's --remediation: false disables every
	// policy's spec.remediation.
	Remediation bool
	// WriteInterval is the least time between two writes of a policy's
	// status.drift (DefaultAuditStatusInterval when 0).
	WriteInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	queue workqueue.TypedRateLimitingInterface[driftKey]
	// changed tells the reconciler of the policies whose drift changed.
	changed chan event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy]

	mu sync.Mutex
	// drift is each policy's drift. Key: policy name. Bound: the
	// policies with drifted pods or evaluated since they last had some;
	// an entry leaves with its policy. Written by the tracker (run) only.
	drift map[string]*policyDrift
	// memory is what the reconciler keeps of each policy. Key: policy
	// name. Bound: the policies reconciled; an entry leaves with its
	// policy. Written by Reconcile only.
	memory map[string]*remediationMemory
	// reports are the policies whose drift changed since the report
	// writer last read them (ReportSource).
	reports audit.Touches
}

// SetupWithManager registers the reconciler (policies' events, and the
// tracker's changes) and the tracker, both on the leader, and the event
// handlers on the scheduler's informers (pods, nodes, namespaces) that
// feed the tracker.
func (d *DriftController) SetupWithManager(mgr ctrl.Manager, podInformer, nodeInformer, nsInformer cache.SharedIndexInformer) error {
	d.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[driftKey](),
		workqueue.TypedRateLimitingQueueConfig[driftKey]{Name: "celsched-drift"})
	d.changed = make(chan event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy], 1024)
	d.drift = map[string]*policyDrift{}
	d.memory = map[string]*remediationMemory{}
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&schedv1alpha1.SchedulingPolicy{}).
		WatchesRawSource(source.Channel(d.changed, &handler.TypedEnqueueRequestForObject[*schedv1alpha1.SchedulingPolicy]{})).
		Named("schedulingpolicy-drift").
		Complete(d); err != nil {
		return err
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				d.add(driftKey{kind: driftPod, namespace: pod.Namespace, name: pod.Name})
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && podChanged(old, pod) {
				d.add(driftKey{kind: driftPod, namespace: pod.Namespace, name: pod.Name})
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				d.add(driftKey{kind: driftPod, namespace: pod.Namespace, name: pod.Name})
			}
		},
	}); err != nil {
		return err
	}
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && nodeChanged(old, node) {
				d.add(driftKey{kind: driftNode, name: node.Name})
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				d.add(driftKey{kind: driftNode, name: node.Name})
			}
		},
	}); err != nil {
		return err
	}
	if _, err := nsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Namespace)
			ns, ok2 := newObj.(*corev1.Namespace)
			if ok1 && ok2 && !maps.Equal(old.Labels, ns.Labels) {
				d.add(driftKey{kind: driftNamespace, name: ns.Name})
			}
		},
	}); err != nil {
		return err
	}
	return mgr.Add(driftTracker{d})
}

// WatchPodGroups recomputes the drift of a PodGroup's running members
// when what a policy reads of it as podGroup changes: the PodGroup
// appears, goes, or changes its labels or minCount. Call it after
// SetupWithManager, with kube-scheduler's PodGroup informer (GenericWorkload
// on; without the gate a group has its name alone, which its pods carry).
func (d *DriftController) WatchPodGroups(informer cache.SharedIndexInformer) error {
	members := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pg, ok := obj.(*schedulingv1beta1.PodGroup); ok {
			for _, k := range d.groupMembers(pg) {
				d.add(k)
			}
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: members,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*schedulingv1beta1.PodGroup)
			pg, ok2 := newObj.(*schedulingv1beta1.PodGroup)
			if ok1 && ok2 && podGroupChanged(old, pg) {
				members(pg)
			}
		},
		DeleteFunc: members,
	})
	return err
}

// groupMembers are the work items of the PodGroup's members on nodes.
func (d *DriftController) groupMembers(pg *schedulingv1beta1.PodGroup) []driftKey {
	pods, err := d.Pods.Pods(pg.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []driftKey
	for _, pod := range pods {
		if pod.Spec.NodeName != "" && engine.GroupName(pod) == pg.Name {
			out = append(out, driftKey{kind: driftPod, namespace: pod.Namespace, name: pod.Name})
		}
	}
	return out
}

// podGroupChanged says whether a PodGroup update can change what a
// policy reads of it (podGroup.metadata.labels, podGroup.minCount); not
// its status.
func podGroupChanged(old, pg *schedulingv1beta1.PodGroup) bool {
	was, is := engine.NewPodGroup(old.Namespace, old.Name, old, nil), engine.NewPodGroup(pg.Namespace, pg.Name, pg, nil)
	return !maps.Equal(was.Labels, is.Labels) || was.MinCount != is.MinCount
}

// ParamsChanged recomputes drift after a params object changed: the
// pods of every policy (the policies with that paramKind; the tracker
// evaluates them all, their match narrows).
func (d *DriftController) ParamsChanged() {
	d.add(driftKey{kind: driftPolicy})
}

// add queues a work item; before SetupWithManager, nothing.
func (d *DriftController) add(k driftKey) {
	if d.queue != nil {
		d.queue.Add(k)
	}
}

// podChanged says whether a pod update can change the pod's drift: it
// was bound or moved, started or stopped terminating, or changed what a
// policy may read of it (labels, annotations, spec).
func podChanged(old, pod *corev1.Pod) bool {
	return old.Spec.NodeName != pod.Spec.NodeName ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) ||
		old.Status.Phase != pod.Status.Phase ||
		!maps.Equal(old.Labels, pod.Labels) || !maps.Equal(old.Annotations, pod.Annotations)
}

// nodeChanged says whether a node update can change what a policy says
// of it: its labels, annotations, spec (taints) or allocatable; not its
// heartbeats.
func nodeChanged(old, node *corev1.Node) bool {
	return !maps.Equal(old.Labels, node.Labels) || !maps.Equal(old.Annotations, node.Annotations) ||
		!apiequality.Semantic.DeepEqual(old.Spec, node.Spec) ||
		!apiequality.Semantic.DeepEqual(old.Status.Allocatable, node.Status.Allocatable)
}

// driftTracker runs the tracker on the leader.
type driftTracker struct{ d *DriftController }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (driftTracker) NeedLeaderElection() bool { return true }

// Start recomputes every running pod once, then what events touch, until
// ctx is done.
func (t driftTracker) Start(ctx context.Context) error {
	d := t.d
	log := ctrl.LoggerFrom(ctx).WithName("drift")
	go func() {
		<-ctx.Done()
		d.queue.ShutDown()
	}()
	for !d.Live.HasSynced() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.queue.Add(driftKey{kind: driftPolicy})
	var last time.Time
	inRound := false
	for {
		first, shutdown := d.queue.Get()
		if shutdown {
			return nil
		}
		// At most one recomputation per write interval: each builds the
		// views of the nodes its pods run on, so that a burst of bindings
		// (each a pod event) costs one batch over the pods the interval's
		// events touched, not one per binding (perf-binary measured the
		// drift tracker at 29% of the manager's CPU while it scheduled 80
		// pods/s when each built an evaluator over the whole cluster,
		// before this pacing). Status is written at that pace anyway. A
		// round takes batches until the queue is empty.
		if !inRound {
			if wait := time.Until(last.Add(d.writeInterval())); !last.IsZero() && wait > 0 {
				select {
				case <-ctx.Done():
					d.queue.Done(first)
					return nil
				case <-time.After(wait):
				}
			}
			last = time.Now()
		}
		batch := []driftKey{first}
		for len(batch) < maxDriftBatch && d.queue.Len() > 0 {
			k, shutdown := d.queue.Get()
			if shutdown {
				break
			}
			batch = append(batch, k)
		}
		err := d.recompute(ctx, batch)
		inRound = len(batch) == maxDriftBatch && d.queue.Len() > 0
		for _, k := range batch {
			if err != nil && ctx.Err() == nil {
				d.queue.AddRateLimited(k)
			} else {
				d.queue.Forget(k)
			}
			d.queue.Done(k)
		}
		if err != nil && ctx.Err() == nil {
			log.Info("Recomputing drift failed; retrying", "err", err)
		}
	}
}

// recompute evaluates the pods a batch of work items touches and updates
// every policy's drift with them.
func (d *DriftController) recompute(ctx context.Context, batch []driftKey) error {
	pods := map[types.NamespacedName]*corev1.Pod{}
	gone := map[types.NamespacedName]bool{}
	all := false
	for _, k := range batch {
		switch k.kind {
		case driftPod:
			key := types.NamespacedName{Namespace: k.namespace, Name: k.name}
			pod, err := d.Pods.Pods(k.namespace).Get(k.name)
			if err != nil || !running(pod) {
				gone[key] = true
				continue
			}
			pods[key] = pod
		case driftPolicy:
			all = true
		case driftNode, driftNamespace:
			list, err := d.listPods(k)
			if err != nil {
				return err
			}
			for _, pod := range list {
				pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = pod
			}
			// The drifted pods the tracker has on that node or in that
			// namespace that are not running any more.
			for key, dp := range d.driftedPods() {
				if (k.kind == driftNode && dp.node == k.name) || (k.kind == driftNamespace && key.Namespace == k.name) {
					if _, ok := pods[key]; !ok {
						gone[key] = true
					}
				}
			}
		}
	}
	if all {
		list, err := d.Pods.List(labels.Everything())
		if err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
		for key := range d.driftedPods() {
			gone[key] = true
		}
		for _, pod := range list {
			if running(pod) {
				pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = pod
			}
		}
	}
	snapshot := d.Live.Policies()
	refusals := map[types.NamespacedName][]verdict.Refusal{}
	if len(pods) > 0 {
		// A Refuser builds the nodes of the batch's pods only, not the
		// whole cluster (every pod) as an Evaluator does.
		e, err := d.Live.Refuser()
		if err != nil {
			return err
		}
		profiles := profileNames(d.Live)
		scopes := d.driftScopes(ctx)
		for key, pod := range pods {
			judged, foreign := verdict.AsProfile(pod, profiles)
			r, err := e.Refusals(ctx, judged)
			if err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				ctrl.LoggerFrom(ctx).WithName("drift").V(2).Info("Not evaluating a running pod for drift", "pod", klog(pod), "err", err)
				continue
			}
			if foreign {
				r = slices.DeleteFunc(r, func(r verdict.Refusal) bool { return scopes[r.Policy] == schedv1alpha1.DriftProfilePods })
				for i := range r {
					r[i].PlacedBy = schedv1alpha1.PlacedByOtherScheduler
				}
			}
			refusals[key] = r
		}
	}
	d.apply(snapshot, pods, gone, refusals)
	return nil
}

// apply updates the drift of every policy with the pods evaluated
// (refusals, by pod) and the pods gone, and tells the reconciler of the
// policies whose drift changed.
func (d *DriftController) apply(snapshot *engine.Snapshot, pods map[types.NamespacedName]*corev1.Pod, gone map[types.NamespacedName]bool, refusals map[types.NamespacedName][]verdict.Refusal) {
	now := d.now()
	changed := map[string]bool{}
	d.mu.Lock()
	for name, pd := range d.drift {
		if snapshot.Get(name) == nil {
			delete(d.drift, name)
			changed[name] = true
			continue
		}
		for key := range pd.pods {
			_, evaluated := pods[key]
			if evaluated || gone[key] {
				delete(pd.pods, key)
				changed[name] = true
			}
		}
	}
	for key, rs := range refusals {
		for _, r := range rs {
			pd := d.drift[r.Policy]
			if pd == nil {
				pd = &policyDrift{pods: map[types.NamespacedName]driftedPod{}}
				d.drift[r.Policy] = pd
			}
			pod := pods[key]
			placedBy := r.PlacedBy
			if placedBy == "" {
				placedBy = schedv1alpha1.PlacedByProfile
			}
			pd.pods[key] = driftedPod{uid: pod.UID, node: pod.Spec.NodeName, message: r.Message, placedBy: placedBy}
			changed[r.Policy] = true
		}
	}
	for _, cp := range snapshot.Policies() {
		name := cp.Name
		pd := d.drift[name]
		if pd == nil {
			pd = &policyDrift{pods: map[types.NamespacedName]driftedPod{}}
			d.drift[name] = pd
		}
		if g := cp.Generation; g != pd.generation {
			pd.generation = g
			changed[name] = true
		}
	}
	for name := range changed {
		pd := d.drift[name]
		switch {
		case pd == nil:
		case len(pd.pods) == 0:
			pd.since = time.Time{}
		case pd.since.IsZero():
			pd.since = now
		}
	}
	d.mu.Unlock()
	for name := range changed {
		d.reports.Touch(name)
		select {
		case d.changed <- event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy]{Object: &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		default: // a full channel: the policy's next event or requeue brings it
		}
	}
}

// driftedPods are the drifted pods of every policy.
func (d *DriftController) driftedPods() map[types.NamespacedName]driftedPod {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.NamespacedName]driftedPod{}
	for _, pd := range d.drift {
		maps.Copy(out, pd.pods)
	}
	return out
}

// listPods lists the pods a node or namespace item touches that run.
func (d *DriftController) listPods(k driftKey) ([]*corev1.Pod, error) {
	var list []*corev1.Pod
	var err error
	if k.kind == driftNamespace {
		list, err = d.Pods.Pods(k.name).List(labels.Everything())
	} else {
		list, err = d.Live.PodsOn(k.name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	return slices.DeleteFunc(list, func(p *corev1.Pod) bool { return !running(p) }), nil
}

// running says whether a pod runs for drift: bound, not terminating,
// not terminated.
func running(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// driftScopes are the policies' spec.driftScope, by name, from the
// manager's cache; a policy it cannot read covers every pod.
func (d *DriftController) driftScopes(ctx context.Context) map[string]schedv1alpha1.DriftScope {
	list := &schedv1alpha1.SchedulingPolicyList{}
	if d.Client == nil || d.Client.List(ctx, list) != nil {
		return nil
	}
	out := make(map[string]schedv1alpha1.DriftScope, len(list.Items))
	for _, p := range list.Items {
		out[p.Name] = p.Spec.DriftScope
	}
	return out
}

func profileNames(l *Live) []string {
	out := make([]string, len(l.Config.Profiles))
	for i, p := range l.Config.Profiles {
		out[i] = p.SchedulerName
	}
	return out
}

func klog(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

func (d *DriftController) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *DriftController) writeInterval() time.Duration {
	if d.WriteInterval > 0 {
		return d.WriteInterval
	}
	return DefaultAuditStatusInterval
}

// driftOf is a copy of a policy's drift, the pods by namespace and name.
func (d *DriftController) driftOf(name string) (generation int64, since time.Time, keys []types.NamespacedName, pods map[types.NamespacedName]driftedPod, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pd := d.drift[name]
	if pd == nil {
		return 0, time.Time{}, nil, nil, false
	}
	pods = maps.Clone(pd.pods)
	keys = slices.Collect(maps.Keys(pods))
	slices.SortFunc(keys, func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	})
	return pd.generation, pd.since, keys, pods, true
}

// Reconcile writes a policy's drift and runs its remediation.
func (d *DriftController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithName("drift")
	p, err := livePolicy(ctx, d.Client, d.Reader, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p == nil {
		delete(d.memory, req.Name)
		return ctrl.Result{}, nil
	}
	mem := d.memory[p.Name]
	if mem == nil {
		mem = &remediationMemory{}
		d.memory[p.Name] = mem
	}
	if seen := evaluationKey(p); seen != mem.seen {
		// The policy's spec, enforcement or waves changed: its pods are
		// evaluated again (with the scheduler's compiled policy).
		mem.seen = seen
		mem.workloads = nil // a changed policy may move what it refused
		d.add(driftKey{kind: driftPolicy, name: p.Name})
	}
	generation, since, keys, pods, known := d.driftOf(p.Name)
	if !known {
		return ctrl.Result{}, nil // not evaluated yet: the tracker tells
	}
	if generation < p.Generation {
		// The scheduler has not compiled this generation yet.
		d.add(driftKey{kind: driftPolicy, name: p.Name})
		return ctrl.Result{RequeueAfter: registryLag}, nil
	}
	st := &schedv1alpha1.DriftStatus{ObservedGeneration: generation, Count: int32(len(keys))}
	if !since.IsZero() {
		st.Since = &metav1.Time{Time: since}
	}
	blocked := map[types.NamespacedName]schedv1alpha1.RemediationBlockReason{}
	var next time.Duration
	if p.Spec.Remediation != nil {
		var rs *schedv1alpha1.RemediationStatus
		rs, next, err = d.remediate(ctx, p, mem, keys, pods, blocked)
		if err != nil {
			return ctrl.Result{}, err
		}
		st.Remediation = rs
	}
	for _, key := range keys[:min(len(keys), schedv1alpha1.MaxDriftedPods)] {
		dp := pods[key]
		st.Pods = append(st.Pods, schedv1alpha1.DriftedPod{Namespace: key.Namespace, Name: key.Name, Node: dp.node,
			Message: truncateTo(dp.message, 1024), PlacedBy: dp.placedBy, NotEvicted: blocked[key]})
	}
	d.blockedEvent(p, mem, blocked)
	wait, err := d.writeStatus(ctx, p, mem, st)
	if err != nil {
		if apierrors.IsConflict(err) {
			log.V(1).Info("SchedulingPolicy changed while its drift was written; trying again", "policy", p.Name)
			return ctrl.Result{RequeueAfter: registryLag}, nil
		}
		return ctrl.Result{}, err
	}
	if wait > 0 && (next == 0 || wait < next) {
		next = wait
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// evaluationKey is what of a policy decides its drift besides its
// compiled spec: generation, enforcement and the rollout's waves.
func evaluationKey(p *schedv1alpha1.SchedulingPolicy) string {
	return fmt.Sprintf("%d/%s/%s", p.Generation, p.Spec.Enforcement, engine.RolloutKey(p))
}

// writeStatus writes status.drift and the Drifted condition when they
// changed, at most once per WriteInterval; it returns how long to wait
// when a change is held back. A policy that never drifted and has no
// remediation gets nothing written.
func (d *DriftController) writeStatus(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory, st *schedv1alpha1.DriftStatus) (time.Duration, error) {
	old := p.Status.Drift
	if old == nil && st.Count == 0 && st.Remediation == nil {
		return 0, nil
	}
	if old != nil {
		cmp := old.DeepCopy()
		cmp.LastUpdateTime = nil
		if cmp.Remediation != nil && st.Remediation != nil {
			cmp.Remediation.LastEvictionTime = st.Remediation.LastEvictionTime
		}
		if apiequality.Semantic.DeepEqual(cmp, st) {
			return 0, nil
		}
	}
	now := d.now()
	last := mem.lastWrite
	if old != nil && old.LastUpdateTime != nil && old.LastUpdateTime.After(last) {
		last = old.LastUpdateTime.Time // written by a previous leader
	}
	// A change of the count from or to none is written at once.
	transition := old == nil || (old.Count == 0) != (st.Count == 0)
	if wait := untilNextWrite(last, d.writeInterval(), now); wait > 0 && !transition {
		return wait, nil
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	st.LastUpdateTime = &metav1.Time{Time: now}
	// status.drift only: the Drifted condition is the status
	// reconciler's (setDrifted), which this write brings back.
	p.Status.Drift = st
	if err := d.Client.Status().Patch(ctx, p, patch); err != nil {
		return 0, err
	}
	mem.lastWrite = now
	mem.unwrittenEvictions = 0
	if transition && d.Recorder != nil {
		if st.Count > 0 {
			d.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonDriftDetected, "Drift",
				"%d running pod(s) are on nodes the policy's enforced filters refuse (status.drift)", st.Count)
		} else if old != nil {
			d.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonDriftResolved, "Drift", "%s", DriftMessage(0))
		}
	}
	return 0, nil
}

// blockedEvent records one Event when the summary of why pods are not
// evicted changes.
func (d *DriftController) blockedEvent(p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory, blocked map[types.NamespacedName]schedv1alpha1.RemediationBlockReason) {
	counts := map[schedv1alpha1.RemediationBlockReason]int{}
	for _, r := range blocked {
		if r != schedv1alpha1.BlockedRate && r != schedv1alpha1.BlockedBudget && r != schedv1alpha1.BlockedTooYoung {
			counts[r]++ // waiting for the rate, the budget or age is the normal course
		}
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s: %d", r, counts[r]))
	}
	summary := strings.Join(parts, ", ")
	if summary == mem.blocked {
		return
	}
	mem.blocked = summary
	if summary != "" && d.Recorder != nil {
		d.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonRemediationBlocked, "Remediate",
			"drifted pods not evicted (%s); status.drift.pods says which", summary)
	}
}

// truncateTo shortens s to at most n bytes.
func truncateTo(s string, n int) string { return engine.Truncate(s, n) }

// PolicyDrift is a policy's drift as the report writer reads it.
type PolicyDrift struct {
	// Generation is the policy's compiled generation the pods were
	// evaluated with.
	Generation int64
	// Since is when the policy's pods last went from none drifted to some.
	Since time.Time
	// Pods are the drifted pods, sorted by namespace and name.
	Pods []DriftedPodRef
}

// DriftedPodRef is a drifted pod: where it runs and why the policy
// refuses it there.
type DriftedPodRef struct {
	Namespace, Name, Node, Message string
	// PlacedBy says who placed the pod.
	PlacedBy schedv1alpha1.PodPlacement
}

// ReportSource is what the report writer reads of drift: the policies
// whose drift changed, and each one's drift.
func (d *DriftController) ReportSource() DriftSource { return driftReports{d} }

// driftReports is DriftController as a DriftSource.
type driftReports struct{ d *DriftController }

func (r driftReports) Wake() <-chan struct{} { return r.d.reports.Wake() }
func (r driftReports) Touched() []string     { return r.d.reports.Touched() }

// Policies are the policies with drifted pods.
func (r driftReports) Policies() []string {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	var out []string
	for name, pd := range r.d.drift {
		if len(pd.pods) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (r driftReports) Drift(policy string) (PolicyDrift, bool) {
	generation, since, keys, pods, known := r.d.driftOf(policy)
	if !known {
		return PolicyDrift{}, false
	}
	out := PolicyDrift{Generation: generation, Since: since, Pods: make([]DriftedPodRef, len(keys))}
	for i, key := range keys {
		dp := pods[key]
		out.Pods[i] = DriftedPodRef{Namespace: key.Namespace, Name: key.Name, Node: dp.node, Message: dp.message, PlacedBy: dp.placedBy}
	}
	return out, true
}
