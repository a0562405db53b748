package filter

import (
	"fmt"
	"sync/atomic"

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
// counts as Filter would have. Immutable once made, but for uses.
type narrowed struct {
	// nodes are the snapshot's nodes it was made over, in order: it holds
	// while the snapshot lists the same node objects (a node's new
	// version is a new object; a pod bound to a node is not).
	nodes []*corev1.Node
	// admit are the names of the nodes the filters admit; nil when
	// PreFilter leaves the nodes to Filter (worthNarrowing says it would
	// cost more than it saves; or the filters admit no node: then Filter
	// gives each node its reason).
	admit sets.Set[string]
	// refused are the refused nodes' decisions, equal ones once with
	// their count: what Filter would have counted on them.
	refused []refusedRun
	// missing is the index of the first node whose outcome was not
	// remembered (admit is nil then), or -1: the next pod of the class
	// looks at that node alone until its outcome is known.
	missing int
	// uses counts the pods an entry that does not narrow (admit nil,
	// missing -1) answered: it is not checked against the nodes per pod
	// (holds: a walk over every node), as it leaves them to Filter
	// anyway; it is made again after recheck pods, or when the number of
	// nodes changes, so that a class the nodes' new versions make worth
	// narrowing is narrowed. Atomic: the only field written after the
	// entry is made.
	uses atomic.Int32
	// recheck is the number of pods after which an entry that does not
	// narrow is made again: recheckAfter, twice its predecessor's when
	// that did not narrow either over as many nodes, at most
	// maxRecheckAfter.
	recheck int32
}

// recheckAfter is how many pods an entry that does not narrow answers
// before it is made again (narrowed.uses): its making reads every node's
// outcome, which over that many pods costs about what checking it against
// the nodes per pod would. A class that is still not worth narrowing is
// looked at half as often each time, down to once per maxRecheckAfter
// pods: a class that the nodes do not change (most of them) then costs
// one walk over the nodes per that many pods, not per 64 (at 5000 nodes a
// walk took about 1.2 ms of the manager's CPU, 20 us per pod when made
// every 64 pods), and one that they change is narrowed within that many
// pods.
const (
	recheckAfter    = 64
	maxRecheckAfter = 1024
)

// refusedRun is n refused nodes on which the same decision of the same
// policy refused the pod, the policies from `from` up to it having passed
// plainly.
type refusedRun struct {
	from int
	d    *engine.IndexedDecision
	n    int64
}

// narrow returns the nodes the pod's filter policies admit, as a
// PreFilterResult, when every node's outcome for the pod's class is
// remembered (engine.PolicyList.Cached) and handing kube-scheduler the
// admitted nodes saves it work (worthNarrowing): it then walks those only,
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

// narrowFor is narrow without its record of the pods narrowed
// (narrowedPods).
func (pl *Filter) narrowFor(c *celplugins.Cycle, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	if pl.narrowed == nil || pl.rt.EveryNode || pl.why != nil || len(nodes) == 0 || unschedulableBefore(pod) {
		return nil
	}
	key, ok := c.FilterList.ClassKey(c.Pod)
	if !ok {
		return nil
	}
	// prev is the entry made again for not narrowing after its recheck.
	var n, prev *narrowed
	if v, ok := pl.narrowed.Get(key); ok {
		n = v.(*narrowed)
		switch {
		case n.admit == nil && n.missing < 0:
			if n.uses.Add(1) > n.recheck || len(n.nodes) != len(nodes) {
				prev, n = n, nil
			}
		case !n.holds(nodes):
			n = nil
		case n.missing >= 0 && pl.known(c, nodes[n.missing]):
			n = nil // the node it missed is known now: read them all again
		}
	}
	if n == nil {
		n = pl.narrowOver(c, nodes)
		n.recheck = recheckAfter
		if prev != nil && n.admit == nil && n.missing < 0 && len(prev.nodes) == len(n.nodes) {
			n.recheck = min(2*prev.recheck, maxRecheckAfter)
		}
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
		c.FilterTally.PassedN(r.from, r.d.Index, r.n)
		c.FilterTally.AddN(r.d.Index, &r.d.Decision, r.n)
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
	// The admitted nodes' indexes: their names go into a set only when
	// narrowing is worth it (the set of 5000 names costs ten times more).
	admitted := make([]int32, 0, len(nodes))
	refused := 0
	// The refused nodes' decisions, equal ones counted once (refusedRun).
	type runKey struct {
		from, index int
		policy      *engine.CompiledPolicy
		verdict     engine.Verdict
		rule        string
	}
	runs := map[runKey]int{}
	for i, ni := range nodes {
		o := pl.outcome(c, ni)
		if o == nil {
			n.missing, n.refused = i, nil
			return n
		}
		if k := len(o.Decisions); k == 0 || !o.Decisions[k-1].Acts() {
			admitted = append(admitted, int32(i))
			continue
		}
		refused++
		passing := 0
		for j := range o.Decisions {
			d := &o.Decisions[j]
			from := passing
			passing = d.Index + 1
			if len(d.Ignored) > 0 || d.Err != nil {
				n.refused = append(n.refused, refusedRun{from: from, d: d, n: 1})
				continue
			}
			k := runKey{from: from, index: d.Index, policy: d.Policy, verdict: d.Verdict, rule: d.Rule}
			if r, ok := runs[k]; ok {
				n.refused[r].n++
				continue
			}
			runs[k] = len(n.refused)
			n.refused = append(n.refused, refusedRun{from: from, d: d, n: 1})
		}
	}
	if worthNarrowing(len(admitted), refused, pl.percentageOfNodesToScore()) {
		n.admit = sets.New[string]()
		for _, i := range admitted {
			n.admit.Insert(n.nodes[i].Name)
		}
	} else {
		n.refused = nil
	}
	return n
}

// Relative costs per node of what narrowing changes in a scheduling
// cycle, from a CPU profile of the scheduler (RequiredAffinity at 5000
// nodes, docs/performance.md): kube-scheduler's walk of a node through
// the Filter plugins (about 3 us), its Score plugins on a feasible node
// (about 4 us), and a name of the PreFilterResult, which kube-scheduler
// copies (PreFilterResult.Merge) and looks up in its snapshot (about
// 1.2 us).
const (
	walkCost  = 3
	scoreCost = 4
	nameCost  = 1
)

// worthNarrowing says whether handing kube-scheduler the admitted nodes
// costs less than leaving every node to Filter. kube-scheduler looks for
// a number of feasible nodes that depends on the number of nodes it is
// given (feasibleToFind), walking the nodes from where the last pod
// stopped, and scores those it finds. Over every node it walks about
// toFind/(admitted/all) nodes, the refused ones among them, and scores
// toFind; over the admitted nodes it walks and scores the number found
// for that many nodes, and pays for the set's names. So a rule that admits
// one node in ten is narrowed at any size; one that admits half of the
// nodes is narrowed at 1000 nodes (420 found over all, 230 over the
// half) and not at 5000 (500 over all, 750 over the half: more to score).
func worthNarrowing(admitted, refused int, percentage int32) bool {
	if admitted == 0 || refused == 0 {
		return false
	}
	all := admitted + refused
	toFind := feasibleToFind(percentage, all)
	walked := min(all, toFind*all/admitted)
	scored := min(toFind, admitted)
	found := feasibleToFind(percentage, admitted)
	over := walkCost*found + scoreCost*found + nameCost*admitted
	return over < walkCost*walked+scoreCost*scored
}

// feasibleToFind is how many feasible nodes kube-scheduler looks for
// among all nodes, at a profile's percentageOfNodesToScore (0: adaptive):
// kube-scheduler's numFeasibleNodesToFind, which it does not export.
func feasibleToFind(percentage int32, all int) int {
	const minFeasible, minPercentage = 100, 5
	if all < minFeasible {
		return all
	}
	if percentage == 0 {
		percentage = max(int32(50-all/125), minPercentage)
	}
	return max(all*int(percentage)/100, minFeasible)
}

// percentageOfNodesToScore is the percentage of the plugin's profile, or
// else the scheduler's (0: adaptive).
func (pl *Filter) percentageOfNodesToScore() int32 {
	if pl.percentage != nil {
		return *pl.percentage
	}
	return pl.rt.PercentageOfNodesToScore
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
