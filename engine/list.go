package engine

import (
	"runtime"
	"strings"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// PolicyList is the policies whose filters (or scores) a scheduling cycle
// evaluates on every node, in order. When every expression they evaluate
// at that point reads only the node (memoNode), the list's whole outcome
// on a node is a function of the node's version: it is kept in the node's
// memo, and a pod that the same policies apply to reads it in one lookup
// instead of one per rule. Lists are interned per Snapshot, so
// consecutive pods of a workload share one.
type PolicyList struct {
	Policies []*CompiledPolicy
	// memo is the list's slot in the nodes' memo tables; nil when its
	// outcome depends on more than the node.
	memo *expr
}

// ListOutcome is what a PolicyList decided on a node.
type ListOutcome struct {
	// Stop is the index of the first policy whose decision was not a plain
	// pass (Decision), or len(Policies) when all passed.
	Stop     int
	Decision Decision
	// Raw are the scores' raw values, every policy's in order (scores).
	Raw []float64
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
	}
	if l, ok := s.lists.Load(key.String()); ok {
		return l.(*PolicyList)
	}
	l := &PolicyList{Policies: policies}
	if s.listCount.Add(1) > maxLists {
		return l // a snapshot applied in that many ways: lists are not kept
	}
	if listMemoizable(point, policies) {
		l.memo = &expr{memo: memoNode, slot: memoSlots.get()}
		runtime.AddCleanup(l, func(slot int) { memoSlots.put([]int{slot}) }, l.memo.slot)
	}
	actual, _ := s.lists.LoadOrStore(key.String(), l)
	return actual.(*PolicyList)
}

// listMemoizable says whether every expression that the policies evaluate
// at point reads only the node, and every policy is enforced (an Audit
// policy's denials are recorded per node).
func listMemoizable(point Point, policies []*CompiledPolicy) bool {
	for _, p := range policies {
		if p.Err() != nil || p.Enforcement != schedv1alpha1.Enforce {
			return false
		}
		if point == PointScore {
			for _, r := range p.scores {
				if r.memo != memoNode {
					return false
				}
			}
			continue
		}
		for _, r := range p.filters {
			if r.memo != memoNode || (r.messageExpression != nil && r.messageExpression.memo != memoNode) {
				return false
			}
		}
	}
	return true
}

// Cached returns the list's outcome on the node's version, or nil when it
// is not known.
func (l *PolicyList) Cached(node *NodeInput) *ListOutcome {
	if l.memo == nil || node.memo == nil {
		return nil
	}
	if r := node.memo.load(l.memo, 0, 0); r != nil {
		return r.list
	}
	return nil
}

// Remember keeps the list's outcome on the node's version, for the next
// pod. Only an outcome that every pod would get goes in: all plain passes,
// or plain passes up to an enforced rejection (no error).
func (l *PolicyList) Remember(node *NodeInput, o ListOutcome) {
	if l.memo == nil || node.memo == nil {
		return
	}
	if o.Stop < len(l.Policies) && (o.Decision.Verdict != Reject || o.Decision.Err != nil || len(o.Decision.Ignored) > 0) {
		return
	}
	kept := o // on the heap only when kept
	node.memo.storeResult(&memoResult{e: l.memo, list: &kept})
}
