package verdict

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/queue"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/placement"
	"github.com/celsched/celsched/celplugins/preemption"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	"github.com/celsched/celsched/engine"
)

// This file answers "where would kube-scheduler place these pod groups"
// the one way it can be answered: by kube-scheduler itself. A pod group's
// cycle (generate the candidate placements, filter them, try the members
// in each, assume them, score the placements that fit, all or nothing) is
// unexported methods of kube-scheduler's Scheduler in 1.37
// (scheduleOnePodGroup, podGroupCycle in schedule_one_podgroup.go),
// reached only through Scheduler.ScheduleOne popping the group from the
// scheduling queue; a framework alone (the Evaluator's) has no pod group
// cycle. So PlaceGroups builds a real Scheduler (pkg/scheduler.New, the
// configuration's profiles, the CEL plugins over the same policies) on a
// fake clientset holding the cluster, the PodGroups and their pending
// members, records its bindings instead of making them, and runs its
// cycles itself (drive): one ScheduleOne per entity the active queue
// holds, with none of the queue's timers (no backoff flush), until every
// member is bound, failed, or parked by the queue.

// Group is a pod group to place: its PodGroup and its members that are
// not bound (spec.schedulingGroup.podGroupName names it).
type Group struct {
	PodGroup *schedulingv1beta1.PodGroup
	Pods     []*corev1.Pod
}

// GroupState is what the scheduler does with a pod group.
type GroupState string

const (
	// GroupPlaced: every member the scheduler tried was bound (at least
	// the gang's minimum count: it binds all or nothing).
	GroupPlaced GroupState = "placed"
	// GroupUnschedulable: the scheduler tried the group and bound none of
	// its members.
	GroupUnschedulable GroupState = "unschedulable"
	// GroupHeld: a PreEnqueue plugin holds the group's members (a
	// SchedulingPolicy's preEnqueue rule, or the gang waiting for its
	// minimum count of pods): the scheduler does not try it.
	GroupHeld GroupState = "held"
)

// GroupMember is where one member of a group goes.
type GroupMember struct {
	Pod string `json:"pod"`
	// Node is the node the scheduler would bind it to.
	Node string `json:"node,omitempty"`
	// Reason is why it is not bound: its PodScheduled condition's message,
	// or the PreEnqueue plugin that holds it.
	Reason string `json:"reason,omitempty"`
}

// GroupResult is what the scheduler does with a pod group.
type GroupResult struct {
	// Group is namespace/name.
	Group    string     `json:"group"`
	State    GroupState `json:"state"`
	MinCount int32      `json:"minCount"`
	// Members are the group's pending members, by name.
	Members []GroupMember `json:"members"`
	// Placement is, for a placed group with a topology constraint, the
	// domain the scheduler chose: the value of the constraint's key on its
	// members' nodes, as kube-scheduler names the placement.
	Placement string `json:"placement,omitempty"`
	// Reason is why the group is not placed: its members' distinct
	// reasons, in the order of the members, joined by "; " (the member a
	// filter refuses says which policy and rule; the others, that the
	// group is unschedulable).
	Reason string `json:"reason,omitempty"`
	// Refused are the candidate placements that the policies' placement
	// filters refused in the group's cycles, each with the policy and
	// rule, by placement.
	Refused []celplugins.RefusedPlacement `json:"refused,omitempty"`
}

// Outcome says the group's outcome in a few words: "placed in b2",
// "placed", or the state and the reason.
func (r *GroupResult) Outcome() string {
	switch {
	case r.State == GroupPlaced && r.Placement != "":
		return "placed in " + r.Placement
	case r.State == GroupPlaced:
		return "placed"
	default:
		return fmt.Sprintf("%s: %s", r.State, r.Reason)
	}
}

// GroupsStall bounds how long PlaceGroups waits while nothing happens: no
// cycle to run, no binding or failure recorded, no pod moving in the
// queue. The run's length is not bounded (thousands of pods on thousands
// of nodes take what they take, one cycle after the other); a scheduler
// that stops making progress before every member is settled is a bug, and
// the dry run fails naming the pods and where the queue keeps them rather
// than hanging.
const GroupsStall = time.Minute

// PlaceGroups runs kube-scheduler, with the Evaluator's configuration,
// policies and cluster, on the pending members of the groups, and returns
// what it does with each group, in the order of groups. The groups are
// scheduled together, as the scheduler would take them from its queue:
// one group's members take room another would have used. The pod group
// features (GenericWorkload) must be on in the process's feature gates.
//
// The scheduler records kube-scheduler's metrics (extension point
// durations, attempts) under its profiles' own names, as the scheduler
// does: PlaceGroups is for the CLI, not for a process whose metrics are a
// scheduler's (the manager's rollout gate uses the Evaluator's frameworks,
// whose profile names end with DryRunProfileSuffix).
func (e *Evaluator) PlaceGroups(ctx context.Context, groups []Group) ([]*GroupResult, error) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		return nil, fmt.Errorf("pod groups are scheduled only with the feature gate GenericWorkload on (--feature-gates)")
	}
	// The scheduler's own log (a group it cannot place is an error there)
	// is not the dry run's: what it did is in the results.
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logr.Discard()))
	defer cancel()
	run := &groupRun{
		records: records{
			bound:    map[ktypes.NamespacedName]string{},
			tried:    map[ktypes.NamespacedName]bool{},
			refusals: map[ktypes.NamespacedName][]celplugins.RefusedPlacement{},
		},
		gated: map[ktypes.NamespacedName]string{},
	}
	objects := make([]runtime.Object, 0, len(e.cluster.nodes)+len(e.cluster.pods)+len(e.cluster.namespaces)+len(e.cluster.objects)+2*len(groups))
	for _, n := range e.cluster.nodes {
		objects = append(objects, n)
	}
	for _, p := range e.cluster.pods {
		objects = append(objects, p)
	}
	for _, ns := range e.cluster.namespaces {
		objects = append(objects, ns)
	}
	objects = append(objects, e.cluster.objects...)
	var pending []*corev1.Pod
	for _, g := range groups {
		objects = append(objects, g.PodGroup.DeepCopy())
		for _, p := range g.Pods {
			p = Default(p)
			p.Spec.NodeName = ""
			// What a scheduler said before is not this run's: the
			// condition is written afresh when the run fails the pod (a
			// write that would change nothing is not made, and would
			// not be seen).
			p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
			p.Status.NominatedNodeName = ""
			if p.UID == "" { // the scheduling queue knows pods by UID
				p.UID = ktypes.UID("dry-run-" + p.Namespace + "-" + p.Name)
			}
			pending = append(pending, p)
		}
	}
	client := fake.NewSimpleClientset(objects...) //nolint:staticcheck // NewClientset builds a type converter per call (about a second); nothing here applies
	client.PrependReactor("create", "pods", run.bind(client))
	client.PrependReactor("patch", "pods", run.patched)

	rt := celplugins.NewRuntime(fixed{e.policies.Snapshot}, e.policies.Converter)
	rt.Inputs.Params = e.policies.Params
	rt.Report.Dry = true
	rt.EveryNode = true // each member's nodes get their own reasons
	rt.Report.RefusedPlacements = run.refused
	registry := frameworkruntime.Registry{
		preenqueue.Name: celplugins.Factory(rt, preenqueue.New),
		filter.Name:     celplugins.Factory(rt, filter.New),
		score.Name:      celplugins.Factory(rt, score.New),
		placement.Name:  celplugins.Factory(rt, placement.New),
		preemption.Name: celplugins.Factory(rt, preemption.New),
	}
	profiles := make([]schedulerconfig.KubeSchedulerProfile, len(e.cfg.Profiles))
	for i := range e.cfg.Profiles {
		prof := profile(&e.cfg.Profiles[i])
		if err := withBudget(prof, e.budget); err != nil {
			return nil, err
		}
		profiles[i] = *prof
	}
	factory := scheduler.NewInformerFactory(client, 0, nil)
	sched, err := scheduler.New(ctx, client, factory, nil,
		func(string) events.EventRecorderLogger { return &events.FakeRecorder{} },
		scheduler.WithProfiles(profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
		scheduler.WithParallelism(e.cfg.Parallelism),
		scheduler.WithPercentageOfNodesToScore(e.cfg.PercentageOfNodesToScore),
	)
	if err != nil {
		return nil, fmt.Errorf("building the scheduler of the pod groups: %w", err)
	}
	if _, ok := sched.SchedulingQueue.(*queue.PriorityQueue); !ok {
		return nil, fmt.Errorf("building the scheduler of the pod groups: its queue is a %T, not kube-scheduler's PriorityQueue", sched.SchedulingQueue)
	}
	factory.Start(ctx.Done())
	if err := waitForSync(ctx, factory, syncTimeout); err != nil {
		return nil, err
	}
	// Bounded as the informers' sync is: handlers over objects in memory
	// that have not synced by then never will.
	handlersCtx, handlersDone := context.WithTimeoutCause(ctx, syncTimeout, fmt.Errorf("not synced within %s", syncTimeout))
	defer handlersDone()
	if err := sched.WaitForHandlersSync(handlersCtx); err != nil {
		return nil, fmt.Errorf("waiting for the scheduler's event handlers: %w", err)
	}
	// The pending pods come last, once the informers have synced: the
	// queue runs the PreEnqueue plugins as a pod arrives, and a policy
	// that selects by namespace needs the namespace there by then.
	for _, p := range pending {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("adding the pod group member %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	// And the cycles start once the queue holds every one: a member that
	// the queue took before the others arrived would be tried alone.
	if err := waitQueued(ctx, sched, pending); err != nil {
		return nil, err
	}
	if err := run.drive(ctx, sched, pending); err != nil {
		return nil, err
	}
	cancel()
	return run.results(ctx, client, groups, e.cluster)
}

// groupRun is what one PlaceGroups run records of its scheduler: the
// bindings, the status writes and the placement refusals, written by the
// scheduler's goroutines under mu; and the holds, PlaceGroups' own.
//
// mu is a leaf: the reactions take it inside the fake clientset's lock,
// so whoever holds it calls nothing (no client, no queue, no plugin), and
// PlaceGroups reads copies (recorded).
type groupRun struct {
	mu sync.Mutex
	records
	// gated are the pods a PreEnqueue plugin holds, to "by" the plugin's
	// name and message (or "with its group, by" those of the plugin that
	// holds another member). Written by settle only.
	gated map[ktypes.NamespacedName]string
}

// records are what the scheduler's goroutines record.
type records struct {
	// bound are the pods bound, by namespace and name, to their node.
	bound map[ktypes.NamespacedName]string
	// tried are the pods whose PodScheduled condition the scheduler wrote
	// (it tried them and bound none).
	tried map[ktypes.NamespacedName]bool
	// refusals are the CEL placement filters' refusals by pod group.
	refusals map[ktypes.NamespacedName][]celplugins.RefusedPlacement
}

// recorded returns a copy of the records.
func (r *groupRun) recorded() records {
	r.mu.Lock()
	defer r.mu.Unlock()
	return records{bound: maps.Clone(r.bound), tried: maps.Clone(r.tried), refusals: maps.Clone(r.refusals)}
}

// done says whether the scheduler bound the pod or wrote its failure.
func (rec *records) done(p *corev1.Pod) bool {
	key := ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	_, bound := rec.bound[key]
	return bound || rec.tried[key]
}

// bind is the reaction to a binding: it is recorded, and the pod, bound in
// the fake clientset, is confirmed in the scheduler's cache as a binding
// would.
func (r *groupRun) bind(client *fake.Clientset) clienttesting.ReactionFunc {
	podsResource := corev1.SchemeGroupVersion.WithResource("pods")
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b, ok := action.(clienttesting.CreateAction).GetObject().(*corev1.Binding)
		if !ok {
			return true, nil, fmt.Errorf("a binding that is not a Binding: %T", action.(clienttesting.CreateAction).GetObject())
		}
		obj, err := client.Tracker().Get(podsResource, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		pod.Spec.NodeName = b.Target.Name
		if err := client.Tracker().Update(podsResource, pod, b.Namespace); err != nil {
			return true, nil, err
		}
		r.mu.Lock()
		r.bound[ktypes.NamespacedName{Namespace: b.Namespace, Name: b.Name}] = b.Target.Name
		r.mu.Unlock()
		return true, b, nil
	}
}

// patched records a status write of a pod (the scheduler's record of a
// failed attempt) and lets the fake clientset apply it.
func (r *groupRun) patched(action clienttesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() == "status" {
		r.mu.Lock()
		r.tried[ktypes.NamespacedName{Namespace: action.GetNamespace(), Name: action.(clienttesting.PatchAction).GetName()}] = true
		r.mu.Unlock()
	}
	return false, nil, nil
}

// refused records the placements the CEL placement filters refused for a
// group (celplugins.Reporter.RefusedPlacements).
func (r *groupRun) refused(group ktypes.NamespacedName, refusals []celplugins.RefusedPlacement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range refusals {
		if !slices.Contains(r.refusals[group], s) {
			r.refusals[group] = append(r.refusals[group], s)
		}
	}
}

// drive runs the scheduler's cycles until it has done what it will do
// with every pending pod: bound it, written its failure, or left it held
// at PreEnqueue; and no cycle is in flight. It calls ScheduleOne while the
// active queue holds a pod (so ScheduleOne never waits on an empty
// queue), and otherwise waits for the bindings and status writes in
// flight, whose events may move parked pods back into the active queue.
// The queue's own timers are not started (Scheduler.Run would start
// them): a pod that failed is not tried again after its backoff, as
// nothing in a dry run's cluster changes but what the run itself binds.
func (r *groupRun) drive(ctx context.Context, sched *scheduler.Scheduler, pending []*corev1.Pod) error {
	logger := klog.FromContext(ctx)
	if sched.APIDispatcher != nil { // SchedulerAsyncAPICalls: bindings and status writes go through it
		sched.APIDispatcher.Run(logger)
		defer sched.APIDispatcher.Close()
	}
	defer sched.SchedulingQueue.Close()
	q := sched.SchedulingQueue.(*queue.PriorityQueue) // checked by PlaceGroups
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var last progress
	lastChange := time.Now()
	for {
		if len(q.PodsInActiveQ()) > 0 {
			sched.ScheduleOne(ctx)
			lastChange = time.Now()
			continue
		}
		if r.settled(sched, pending) {
			return nil
		}
		if now := r.progress(sched); now != last {
			last, lastChange = now, time.Now()
		} else if time.Since(lastChange) > GroupsStall {
			return fmt.Errorf("placing the pod groups: the scheduler made no progress for %s (%s)", GroupsStall, r.unsettled(sched, pending))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("placing the pod groups: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// progress is what drive watches change while it waits.
type progress struct{ bound, tried, inFlight, active, backoff, parked int }

func (r *groupRun) progress(sched *scheduler.Scheduler) progress {
	r.mu.Lock()
	p := progress{bound: len(r.bound), tried: len(r.tried)}
	r.mu.Unlock()
	p.inFlight = len(sched.SchedulingQueue.InFlightPods())
	if q, ok := sched.SchedulingQueue.(*queue.PriorityQueue); ok {
		p.active, p.backoff = len(q.PodsInActiveQ()), len(q.PodsInBackoffQ())
		p.parked = len(q.UnschedulablePods()) + len(q.PendingPodGroupPods()) + len(q.IncompletePodGroupPodsPods())
	}
	return p
}

// unsettled says which pods the scheduler has not settled, and where they
// are, for an error.
func (r *groupRun) unsettled(sched *scheduler.Scheduler, pending []*corev1.Pod) string {
	rec := r.recorded()
	where := queuePlaces(sched)
	var out []string
	for _, p := range pending {
		if rec.done(p) {
			continue
		}
		key := ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		place := where[key]
		if place == "" {
			place = "not in the scheduling queue"
		}
		out = append(out, key.String()+": "+place)
	}
	return fmt.Sprintf("%d in flight; %s", len(sched.SchedulingQueue.InFlightPods()), strings.Join(out, "; "))
}

// Where the scheduling queue keeps a pod (queuePlaces). A pod the queue
// parks is one it will not pop until an event moves it: held by a
// PreEnqueue plugin or unschedulable after an attempt, waiting for its
// PodGroup to exist, or waiting for the rest of its group.
const (
	inActiveQ           = "in activeQ"
	inBackoffQ          = "in backoffQ"
	parkedUnschedulable = "parked: held at PreEnqueue or unschedulable"
	parkedNoPodGroup    = "parked: its PodGroup is not in the queue"
	parkedIncomplete    = "parked: its group is incomplete"
)

// queuePlaces says where the scheduler's queue keeps each pod it holds.
// It reads the queue's lists, which copy under the queue's locks: the
// entries GetPod and GetPodGroup return are the queue's own, written by
// its handlers while they are read.
func queuePlaces(sched *scheduler.Scheduler) map[ktypes.NamespacedName]string {
	q, ok := sched.SchedulingQueue.(*queue.PriorityQueue)
	if !ok {
		return nil
	}
	places := map[ktypes.NamespacedName]string{}
	for place, pods := range map[string][]*corev1.Pod{
		inActiveQ:           q.PodsInActiveQ(),
		inBackoffQ:          q.PodsInBackoffQ(),
		parkedUnschedulable: q.UnschedulablePods(),
		parkedNoPodGroup:    q.PendingPodGroupPods(),
		parkedIncomplete:    q.IncompletePodGroupPodsPods(),
	} {
		for _, p := range pods {
			places[ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = place
		}
	}
	return places
}

// parked says whether the queue keeps a pod where it will not pop it.
func parked(place string) bool {
	return strings.HasPrefix(place, "parked:")
}

func (r *groupRun) settled(sched *scheduler.Scheduler, pending []*corev1.Pod) bool {
	if len(sched.SchedulingQueue.InFlightPods()) > 0 {
		return false
	}
	rec := r.recorded()
	where := queuePlaces(sched)
	// A hold the queue recorded may be passing (a gang's first members
	// wait for the rest, which the queue has by now): a pod's hold is
	// final when a PreEnqueue plugin holds it now, and a group member's
	// when one holds it or another member (the queue holds a group while
	// it holds any member).
	groupHolds := map[string]string{}
	var passing []*corev1.Pod
	for _, p := range pending {
		if rec.done(p) {
			continue
		}
		key := ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		if !parked(where[key]) {
			return false
		}
		hold := holdNow(sched, p)
		if hold == "" {
			passing = append(passing, p)
			continue
		}
		r.gated[key] = "by " + hold
		if g := groupOf(p); g != "" && groupHolds[g] == "" {
			groupHolds[g] = hold
		}
	}
	for _, p := range passing {
		hold := groupHolds[groupOf(p)]
		if groupOf(p) == "" || hold == "" {
			return false
		}
		r.gated[ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = "with its group, by " + hold
	}
	return true
}

// groupOf names a pod's group (namespace/name), "" for none.
func groupOf(p *corev1.Pod) string {
	if name := engine.GroupName(p); name != "" {
		return p.Namespace + "/" + name
	}
	return ""
}

// waitQueued waits until the scheduler's queue holds every pod (their
// creations are events its informers deliver).
func waitQueued(ctx context.Context, sched *scheduler.Scheduler, pods []*corev1.Pod) error {
	deadline := time.Now().Add(GroupsStall)
	missing := slices.Clone(pods)
	for {
		where := queuePlaces(sched)
		missing = slices.DeleteFunc(missing, func(p *corev1.Pod) bool {
			return where[ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}] != ""
		})
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("placing the pod groups: the pod %s/%s did not reach the scheduling queue within %s", missing[0].Namespace, missing[0].Name, GroupsStall)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("placing the pod groups: %w", context.Cause(ctx))
		case <-time.After(time.Millisecond):
		}
	}
}

// holdNow runs the PreEnqueue plugins of the pod's profile on the pod, in
// order, as the queue does: the first that holds it, ": " and its
// message; "" when none does.
func holdNow(sched *scheduler.Scheduler, p *corev1.Pod) string {
	fw := sched.Profiles[p.Spec.SchedulerName]
	if fw == nil {
		return ""
	}
	for _, pl := range fw.PreEnqueuePlugins() {
		if st := pl.PreEnqueue(context.Background(), p); !st.IsSuccess() {
			if st.Message() == "" {
				return pl.Name()
			}
			return pl.Name() + ": " + st.Message()
		}
	}
	return ""
}

// results reads what the scheduler did with each group: the members'
// bindings and, for those not bound, their PodScheduled condition (or
// that they were held).
func (r *groupRun) results(ctx context.Context, client *fake.Clientset, groups []Group, c *Cluster) ([]*GroupResult, error) {
	rec := r.recorded()
	out := make([]*GroupResult, len(groups))
	for i, g := range groups {
		key := ktypes.NamespacedName{Namespace: g.PodGroup.Namespace, Name: g.PodGroup.Name}
		res := &GroupResult{Group: key.String(), Members: make([]GroupMember, 0, len(g.Pods)), Refused: slices.Clone(rec.refusals[key])}
		slices.SortFunc(res.Refused, func(a, b celplugins.RefusedPlacement) int {
			return cmp.Or(strings.Compare(a.Placement, b.Placement), strings.Compare(a.Refusal, b.Refusal))
		})
		if gang := g.PodGroup.Spec.SchedulingPolicy.Gang; gang != nil {
			res.MinCount = gang.MinCount
		}
		var nodes, reasons []string
		held := true
		for _, p := range g.Pods {
			m := GroupMember{Pod: p.Name}
			pk := ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			switch {
			case rec.bound[pk] != "":
				m.Node = rec.bound[pk]
				nodes = append(nodes, m.Node)
				held = false
			case rec.tried[pk]:
				pod, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("reading the pod group member %s: %w", pk, err)
				}
				m.Reason = "unschedulable"
				for _, cond := range pod.Status.Conditions {
					if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
						m.Reason = cond.Message
					}
				}
				held = false
			default:
				m.Reason = "held at PreEnqueue " + r.gated[pk]
			}
			if m.Reason != "" && !slices.Contains(reasons, m.Reason) {
				reasons = append(reasons, m.Reason)
			}
			res.Members = append(res.Members, m)
		}
		slices.SortFunc(res.Members, func(a, b GroupMember) int { return strings.Compare(a.Pod, b.Pod) })
		switch {
		case len(nodes) > 0:
			res.State = GroupPlaced
			res.Placement = domain(g.PodGroup, nodes, c)
		case held:
			res.State, res.Reason = GroupHeld, strings.Join(reasons, "; ")
		default:
			res.State, res.Reason = GroupUnschedulable, strings.Join(reasons, "; ")
		}
		out[i] = res
	}
	return out, nil
}

// domain returns the values of a group's topology constraint key on the
// nodes (one, when kube-scheduler placed the group in one domain), joined
// by ",".
func domain(pg *schedulingv1beta1.PodGroup, nodes []string, c *Cluster) string {
	if pg.Spec.SchedulingConstraints == nil || len(pg.Spec.SchedulingConstraints.Topology) == 0 {
		return ""
	}
	key := pg.Spec.SchedulingConstraints.Topology[0].Key
	var values []string
	for _, name := range nodes {
		if ni, err := c.NodeInfo(name); err == nil {
			values = append(values, ni.Node().Labels[key])
		}
	}
	slices.Sort(values)
	return strings.Join(slices.Compact(values), ",")
}
