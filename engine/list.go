package engine

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// PolicyList is the policies whose filters (or scores) a scheduling cycle
// evaluates on every node, in order. When every expression they evaluate
// at that point is memoized (memo.go), the list's whole outcome on a node
// is a function of the node's version, of what the policies read of the
// pod and of the NodeInfo's generation when they read nodeInfo: it is kept
// in the node's memo, and a pod that the same policies apply to reads it
// in one lookup instead of one per rule. Lists are interned per Snapshot,
// so consecutive pods of a workload share one.
type PolicyList struct {
	Policies []*CompiledPolicy
	// memo is the list's slot in the nodes' memo tables; nil when its
	// outcome is not kept.
	memo *expr
	// readsPod says whether the policies read the pod or its namespace,
	// reads what they read of them (the memo key holds the pod's
	// namespace and those fields), and nodeInfo whether they read
	// nodeInfo (the generation is in the key).
	readsPod bool
	reads    podKeySpec
	nodeInfo bool
	// id identifies the list in its nodes' passes (memoTable.passes),
	// when nodeOnly: its policies read nothing but the node, so that
	// their outcome is one per node version.
	id       uint64
	nodeOnly bool
}

// plainPass is the outcome of a list whose every policy passed plainly:
// read-only.
var plainPass ListOutcome

// ListOutcome is what a PolicyList decided on a node: the decisions that
// were not plain passes (metrics.Plain), in order, with their policies'
// indexes; every other policy passed. For filters, the last may be the
// enforced rejection that ended the evaluation; the others are Audit
// rejections. For scores, Raw are the raw values, every policy's in order.
type ListOutcome struct {
	Decisions []IndexedDecision
	Raw       []float64
}

// IndexedDecision is a decision of the policy Policies[Index].
type IndexedDecision struct {
	Index int
	Decision
}

// maxLists bounds the lists interned per snapshot: the distinct sets of
// policies that apply to the pods of a cluster.
const maxLists = 1024

// List returns the interned list of policies (of this snapshot, in the
// order given) evaluated at point: PointFilter or PointScore.
func (s *Snapshot) List(point Point, policies []*CompiledPolicy) *PolicyList {
	var key strings.Builder
	key.WriteByte(byte(point))
	for _, p := range policies {
		key.WriteByte(0)
		key.WriteString(p.Name)
		if p.view != 0 {
			// A copy for the namespaces of one enforcement override: its
			// decisions carry its Enforcement.
			fmt.Fprintf(&key, "/%d", p.view)
		}
	}
	if l, ok := s.lists.Load(key.String()); ok {
		return l.(*PolicyList)
	}
	l := &PolicyList{Policies: policies}
	if s.listCount.Add(1) > maxLists {
		return l // a snapshot applied in that many ways: lists are not kept
	}
	if l.memoizable(point) {
		// Numbered by the policies' Environment (memoizable checked that
		// they share one), whose Converters hold the tables.
		numbers := policies[0].numbers
		l.nodeOnly = !l.readsPod && !l.nodeInfo
		l.id = numbers.lists.Add(1)
		l.memo = &expr{memo: memoNode, slot: numbers.slots.get()}
		runtime.AddCleanup(l, func(slot int) { numbers.slots.put([]int{slot}) }, l.memo.slot)
	}
	actual, _ := s.lists.LoadOrStore(key.String(), l)
	return actual.(*PolicyList)
}

// memoizable says whether every expression that the policies evaluate at
// point is memoized, and finds what the list's key holds.
func (l *PolicyList) memoizable(point Point) bool {
	for _, p := range l.Policies {
		// A parameterized policy's copies bound to different params
		// objects have the same name: its outcome is not kept. Nor is that
		// of policies compiled over different Environments, whose slots
		// and ids are numbered apart.
		if p.Err() != nil || p.params != nil || p.numbers == nil || p.numbers != l.Policies[0].numbers {
			return false
		}
		var exprs []*expr
		if point == PointScore {
			for _, r := range p.scores {
				exprs = append(exprs, &r.expr)
			}
		} else {
			for _, r := range p.filters {
				exprs = append(exprs, &r.expr)
				if r.messageExpression != nil {
					exprs = append(exprs, r.messageExpression)
				}
			}
		}
		for _, e := range exprs {
			switch e.memo {
			case notMemoized:
				return false
			case memoNodeInfo:
				l.nodeInfo = true
			case memoPodAndNode:
				l.readsPod = true
				l.reads.merge(&p.signs)
			case memoPodAndNodeInfo:
				l.readsPod = true
				l.reads.merge(&p.signs)
				l.nodeInfo = true
			}
		}
	}
	return l.reads.reads&podReadsUnkeyable == 0
}

// Kept says whether the list's outcomes are kept (Remember does anything).
func (l *PolicyList) Kept() bool { return l != nil && l.memo != nil }

// key returns the memo key and generation of the list's outcome for a pod
// on a node, or false when it is not kept.
func (l *PolicyList) key(pod *PodInput, node *NodeInput) (key uint64, gen int64, ok bool) {
	if l == nil || l.memo == nil || node.memo == nil {
		return 0, 0, false
	}
	if l.nodeInfo {
		if gen = node.generation; gen == 0 {
			return 0, 0, false
		}
	}
	if l.readsPod {
		if key, ok = pod.key(&l.reads); !ok {
			return 0, 0, false
		}
	}
	return key, gen, true
}

// ClassKey identifies a list and what its policies read of a pod: pods
// with one ClassKey get one outcome on each node version (Cached), so
// that what the list admits of a set of nodes is theirs alike. Comparable.
type ClassKey struct {
	list *PolicyList
	pod  uint64
}

// ClassKey returns the pod's ClassKey, or false when the list's outcomes
// are not kept or depend on the NodeInfo (the pods on the node), which a
// node's version does not identify.
func (l *PolicyList) ClassKey(pod *PodInput) (ClassKey, bool) {
	if l == nil || l.memo == nil || l.nodeInfo {
		return ClassKey{}, false
	}
	var key uint64
	if l.readsPod {
		var ok bool
		if key, ok = pod.key(&l.reads); !ok {
			return ClassKey{}, false
		}
	}
	return ClassKey{list: l, pod: key}, true
}

// Cached returns the list's outcome for the pod on the node, or nil when it
// is not known.
func (l *PolicyList) Cached(pod *PodInput, node *NodeInput) *ListOutcome {
	if l != nil && l.nodeOnly && node.memo != nil && node.memo.passes[l.memo.slot%listWays].Load() == l.id {
		return &plainPass
	}
	key, gen, ok := l.key(pod, node)
	if !ok {
		return nil
	}
	if r := node.memo.lists[l.memo.slot%listWays].load(l.memo, memoID{key: key, gen: gen}); r != nil {
		return &r.list
	}
	return nil
}

// Remember keeps the list's outcome for the pod on the node, for the next
// pod that reads it. Only an outcome that every such pod would get goes
// in: plain passes and rejections, without errors. It keeps a copy of
// o.Raw (the caller may reuse its slice), not of o.Decisions.
func (l *PolicyList) Remember(pod *PodInput, node *NodeInput, o ListOutcome) {
	key, gen, ok := l.key(pod, node)
	if !ok {
		return
	}
	for i := range o.Decisions {
		if d := &o.Decisions[i].Decision; d.Verdict != Reject || d.Err != nil || len(d.Ignored) > 0 {
			return
		}
	}
	if l.nodeOnly && len(o.Decisions) == 0 && o.Raw == nil {
		// Every policy passed plainly on this node version, whatever the
		// pod: one word in the node's entry says so.
		node.memo.passes[l.memo.slot%listWays].Store(l.id)
		return
	}
	// One allocation per outcome: a filter list's without room for raw
	// values, a score list's with its raw values beside it.
	id := memoID{key: key, gen: gen}
	var r *memoResult
	switch n := len(o.Raw); {
	case o.Raw == nil: // a filter list's
		r = &memoResult{e: l.memo, id: id, list: o}
	case n <= len(listResult{}.raw):
		withRaw := &listResult{memoResult: memoResult{e: l.memo, id: id, list: o}}
		withRaw.list.Raw = withRaw.raw[:n:n]
		copy(withRaw.list.Raw, o.Raw)
		r = &withRaw.memoResult
	default:
		o.Raw = slices.Clone(o.Raw)
		r = &memoResult{e: l.memo, id: id, list: o}
	}
	node.memo.lists[l.memo.slot%listWays].store(&node.memo.memoOrder, r)
}

// listResult is a list's remembered outcome with room for the raw values
// of up to 8 score rules beside it: a pod that reads them loads the lines
// of one object (Score copies them for every node it scores), not of a
// slice allocated apart.
type listResult struct {
	memoResult
	raw [8]float64
}
