package filter

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// maxNarrowed bounds the classes of pods whose admitted nodes PreFilter
// keeps (narrowed): the distinct sets of filter policies and what they
// read of the pods, one entry each.
const maxNarrowed = 64

// narrowed is what the filters of one class of pods (engine.ClassKey)
// decided on every node of the scheduler's snapshot, read from the
// outcomes remembered on the nodes: the nodes they admit, for
// PreFilterResult, and those they refuse, whose decisions PreFilter
// counts as Filter would have. Immutable once made.
type narrowed struct {
	// nodes are the snapshot's nodes it was made over, in order: it holds
	// while the snapshot lists the same node objects (a node's new
	// version is a new object; a pod bound to a node is not).
	nodes []*corev1.Node
	// admit are the names of the nodes the filters admit; nil when
	// PreFilter leaves the nodes to Filter (the filters admit more than
	// half of them; or none: then Filter gives each node its reason).
	admit sets.Set[string]
	// refused are the outcomes of the nodes refused.
	refused []*engine.ListOutcome
	// missing is the index of the first node whose outcome was not
	// remembered (admit is nil then), or -1: the next pod of the class
	// looks at that node alone until its outcome is known.
	missing int
}

// narrow returns the nodes the pod's filter policies admit, as a
// PreFilterResult, when every node's outcome for the pod's class is
// remembered (engine.PolicyList.Cached) and they refuse at least half of
// the nodes but not all: kube-scheduler then walks those nodes only,
// instead of every node with its per-node work for the ones the policies
// refuse (a rule that admits one rack in ten walks ten times the nodes it
// needs). The refused nodes' decisions are counted as Filter counts them.
//
// It returns nil, and the nodes are Filter's as before, when the
// outcomes are not all known (the first pods of a class; a node's new
// version), when the filters read nodeInfo (the pods on a node, which
// preemption may change), when rejections are explained in events, and
// for a pod whose last attempt was unschedulable: kube-scheduler reports
// the nodes PreFilter left out as "didn't satisfy plugin(s) [CELFilter]",
// so a pod whose narrowed cycle found no node is retried (narrowedHint)
// over every node, and its status names each rule that refused a node.
func (pl *Filter) narrow(c *celplugins.Cycle, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	res := pl.narrowFor(c, pod, nodes)
	if pl.narrowedPods != nil {
		if res != nil {
			pl.narrowedPods.Add(pod.UID, struct{}{})
		} else {
			pl.narrowedPods.Remove(pod.UID)
		}
	}
	return res
}

// narrowFor is narrow, but for the pods it narrowed.
func (pl *Filter) narrowFor(c *celplugins.Cycle, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	if pl.narrowed == nil || pl.rt.EveryNode || pl.why != nil || len(nodes) == 0 || unschedulableBefore(pod) {
		return nil
	}
	key, ok := c.FilterList.ClassKey(c.Pod)
	if !ok {
		return nil
	}
	var n *narrowed
	if v, ok := pl.narrowed.Get(key); ok && v.(*narrowed).holds(nodes) {
		n = v.(*narrowed)
		if n.missing >= 0 && pl.known(c, nodes[n.missing]) {
			n = nil // the node it missed is known now: read them all again
		}
	}
	if n == nil {
		n = pl.narrowOver(c, nodes)
		pl.narrowed.Add(key, n)
	}
	if n.admit == nil {
		return nil
	}
	// The refused nodes' decisions are counted as Filter counts them
	// (decided): the policies before each that passed plainly, then it.
	// Nothing else of Filter's applies: the outcomes remembered have no
	// errors, and an Audit denial on a node the pod cannot have is never
	// reported.
	for _, r := range n.refused {
		passing := 0
		for i := range r.Decisions {
			d := &r.Decisions[i]
			c.FilterTally.Passed(passing, d.Index)
			c.FilterTally.Add(d.Index, &d.Decision)
			passing = d.Index + 1
		}
	}
	return &fwk.PreFilterResult{NodeNames: n.admit}
}

// narrowOver reads the class's outcome on every node, up to the first
// that is not remembered (missing).
func (pl *Filter) narrowOver(c *celplugins.Cycle, nodes []fwk.NodeInfo) *narrowed {
	n := &narrowed{nodes: make([]*corev1.Node, len(nodes)), missing: -1}
	for i, ni := range nodes {
		n.nodes[i] = ni.Node()
	}
	admit := sets.New[string]()
	for i, ni := range nodes {
		node := ni.Node()
		o := pl.outcome(c, ni)
		if o == nil {
			n.missing, n.refused = i, nil
			return n
		}
		if k := len(o.Decisions); k > 0 && o.Decisions[k-1].Acts() {
			n.refused = append(n.refused, o)
			continue
		}
		admit.Insert(node.Name)
	}
	// Narrowed when the filters refuse at least half of the nodes: the
	// walk kube-scheduler saves is over the refused nodes it would meet
	// before finding enough feasible ones, and the set it is handed costs
	// a copy per pod of every admitted name. A rule that refuses a few
	// nodes is met rarely and leaves them to Filter.
	if len(admit) > 0 && len(n.refused) >= len(admit) {
		n.admit = admit
	} else {
		n.refused = nil
	}
	return n
}

// outcome is the class's remembered outcome on a node, or nil.
func (pl *Filter) outcome(c *celplugins.Cycle, ni fwk.NodeInfo) *engine.ListOutcome {
	in, err := pl.rt.Inputs.Converter.NodeInput(ni.Node(), ni.GetGeneration(), ni, celplugins.NodeInfoFrom)
	if err != nil {
		return nil
	}
	return c.FilterList.Cached(c.Pod, &in)
}

// known says whether the class's outcome on a node is remembered.
func (pl *Filter) known(c *celplugins.Cycle, ni fwk.NodeInfo) bool { return pl.outcome(c, ni) != nil }

// holds says whether n was made over these nodes.
func (n *narrowed) holds(nodes []fwk.NodeInfo) bool {
	if len(nodes) != len(n.nodes) {
		return false
	}
	for i, ni := range nodes {
		if ni.Node() != n.nodes[i] {
			return false
		}
	}
	return true
}

// unschedulableBefore says whether the pod's last scheduling attempt found
// no node.
func unschedulableBefore(pod *corev1.Pod) bool {
	_, c := podutil.GetPodCondition(&pod.Status, corev1.PodScheduled)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

// narrowedEvents retries a pod whose narrowed cycle found no node, once
// kube-scheduler has written it Unschedulable (the pod's own update),
// over every node (narrow), so that its status names the rules that
// refuse nodes instead of "didn't satisfy plugin(s) [CELFilter]".
// kube-scheduler calls the hint for the events of the pod itself, on
// pods that CELFilter's PreFilter or Filter rejected.
func (pl *Filter) narrowedEvents() fwk.ClusterEventWithHint {
	return fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update},
		QueueingHintFn: pl.narrowedHint,
	}
}

// narrowedHint requeues a pod narrowed in its last cycle (narrowedPods)
// whose PodScheduled condition now says Unschedulable. It only reads.
func (pl *Filter) narrowedHint(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	updated, ok := newObj.(*corev1.Pod)
	if !ok {
		return fwk.Queue, fmt.Errorf("pod update event with %T", newObj)
	}
	if updated.UID != pod.UID || pl.narrowedPods == nil || !pl.wasNarrowed(pod.UID) || !unschedulableBefore(updated) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// wasNarrowed says whether the pod's last cycle was narrowed.
func (pl *Filter) wasNarrowed(uid ktypes.UID) bool {
	_, ok := pl.narrowedPods.Get(uid)
	return ok
}

// maxNarrowedPods bounds narrowedPods: the pods narrowed in their last
// cycle and neither placed nor cycled again since.
const maxNarrowedPods = 10000

// newNarrowedPods returns the set of pods whose last cycle PreFilter
// narrowed. Key: pod UID. Bound: maxNarrowedPods, least recently used
// out (a pod evicted is not retried early: it is retried as any other).
// Invalidated by the pod's next cycle (narrowed again or not) and by its
// Reserve. Written by PreFilter and Reserve; read by narrowedHint.
func newNarrowedPods() *lru.Cache { return lru.New(maxNarrowedPods) }

// newNarrowed returns the cache of narrowed: Key: the class's
// engine.ClassKey (its policy list, of one policy snapshot, and what the
// list reads of the pod). Bound: maxNarrowed, least recently used out.
// Invalidated when the snapshot lists other node objects (holds), and by
// a new policy snapshot, whose lists are new keys. Written by PreFilter,
// on the scheduling cycle's goroutine.
func newNarrowed() *lru.Cache { return lru.New(maxNarrowed) }
