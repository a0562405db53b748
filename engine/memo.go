package engine

import (
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/common/types/ref"
	"k8s.io/utils/lru"
)

// This file is the memo of expression results per node version: each rule
// is evaluated at most once per distinct input (docs/scheduler.md, "What
// each cache holds").
//
//   - An expression that reads only node (directly or through variables)
//     has one result per node version: the first pod to need it evaluates
//     it, every other pod reads it.
//   - An expression that reads the pod (or its namespace) has one result
//     per node version and per value of what its policy reads of the pod
//     (podReads: the labels, the spec, ...): the replicas of a workload
//     share it. Those values are interned into a podKey once per pod and
//     cycle (PodInput.key).
//   - An expression that reads nodeInfo also depends on the pods on the
//     node: its results are kept for the generation of the scheduler's
//     NodeInfo (which changes whenever a pod is added to or removed from
//     it, or the node changes), so they serve every pod until one lands
//     on the node.
//
// The memo lives beside the node's CEL value (nodeEntry), so a new node
// version starts empty. Each memoized expression has a slot, an index into
// the node's table; a slot is reused when its Program is garbage
// collected, and every entry records its expression, so an entry of a
// slot's previous owner is never returned. Reads take no lock and allocate
// nothing.

// memoKind says how an expression's results are memoized.
type memoKind uint8

const (
	// notMemoized: the expression reads nodeInfo (which changes with the
	// pods on the node, not with the node's version) or what no key
	// captures.
	notMemoized memoKind = iota
	// memoNode: reads only node and constants.
	memoNode
	// memoNodeInfo: reads node and nodeInfo.
	memoNodeInfo
	// memoPodAndNode: reads node and the pod's fields named by its policy's
	// podReads.
	memoPodAndNode
	// memoPodAndNodeInfo: reads node, nodeInfo and the pod's fields named
	// by its policy's podReads.
	memoPodAndNodeInfo
)

// maxPodKeys bounds the results kept per node and expression of kind
// memoPodAndNode: the distinct workloads whose results a node keeps. The
// oldest goes first.
const maxPodKeys = 16

// memoID is what a memoized result depends on besides the node version
// and the expression: the pod's memo key (0 for expressions that do not
// read the pod), the params object's (0 for those that do not read
// params), and the NodeInfo generation (0 for those that do not read
// nodeInfo).
type memoID struct {
	key, params uint64
	gen         int64
}

// memoResult is an expression's result on a node version for an id: a
// list, newest first, of the results of one slot. Immutable: a store
// replaces the list.
type memoResult struct {
	e   *expr
	id  memoID
	val ref.Val
	err error
	// cost is what computing val cost, charged to every evaluation that
	// reads it (account.go).
	cost costRecord
	// list is the outcome when e is a PolicyList's (in the result, so that
	// reading it costs no other cache line).
	list ListOutcome
	next *memoResult
	// depth is the length of the list from this result on.
	depth int
}

// memoTable is the memo of one node version. Key: the expression (its
// slot, checked by pointer) and a memoID: the pod key (the pod's namespace,
// what its policy reads of the pod, the namespace object's version and the
// pod group's value when read), the params object, the NodeInfo
// generation. Bound: 2*maxPodKeys
// results per slot, compacted to the newest maxPodKeys of the generation.
// Invalidated by a new node version (a new table) or policy version (new
// expressions). Written by the evaluations that miss (compare-and-swap);
// every entry carries the cost of computing it (account.go), so a result
// read costs what it cost.
type memoTable struct {
	slots atomic.Pointer[[]atomic.Pointer[memoResult]]
	// lists hold the outcomes of PolicyLists (list.go), each in the way
	// its slot names: in the node's cache entry itself, so that a pod
	// that reads a list's outcome loads no slot table. Lists of one way
	// share it, newest first, as a slot's results do.
	lists [listWays]atomic.Pointer[memoResult]
	// passes hold, per way, the id of a node-only filter list whose every
	// policy passes plainly on this node version (PolicyList.Remember):
	// the common outcome, read without following a pointer.
	passes [listWays]atomic.Uint64
}

// listWays is how many ways the list outcomes of a node version have.
const listWays = 4

// load returns the result of e on the node for id, or nil.
func (t *memoTable) load(e *expr, id memoID) *memoResult {
	slots := t.slots.Load()
	if slots == nil || e.slot >= len(*slots) {
		return nil
	}
	return loadFrom(&(*slots)[e.slot], e, id)
}

// loadFrom returns the result of e for id kept in a slot, or nil.
func loadFrom(slot *atomic.Pointer[memoResult], e *expr, id memoID) *memoResult {
	for r := slot.Load(); r != nil; r = r.next {
		if r.e == e && r.id == id {
			return r
		}
	}
	return nil
}

// storeResult records a result of head.e on the node for head.id, before
// the others kept in the slot: at most 2*maxPodKeys in all, and after a
// compaction the newest maxPodKeys of e for the same generation (the
// results of other generations and of the slot's previous owner go). A
// store that races with another may be lost; the result is then computed
// again.
func (t *memoTable) storeResult(head *memoResult) {
	storeIn(t.slot(head.e.slot), head)
}

// storeIn records a result in a slot (see storeResult).
func storeIn(slot *atomic.Pointer[memoResult], head *memoResult) {
	e, id := head.e, head.id
	for {
		old := slot.Load()
		// The new result goes before the list, which is shared as it is:
		// one allocation per store. Once the list is twice as long as
		// what is kept, it is compacted to the newest maxPodKeys results
		// of e for this generation.
		head.next, head.depth = old, 1
		if old != nil {
			head.depth = old.depth + 1
		}
		if head.depth > 2*maxPodKeys {
			last := head
			head.depth = 1
			for r := old; r != nil && head.depth < maxPodKeys; r = r.next {
				if r.e == e && r.id.gen == id.gen && r.id != id {
					c := *r
					last.next, last = &c, &c
					head.depth++
				}
			}
			last.next = nil
		}
		if slot.CompareAndSwap(old, head) {
			return
		}
	}
}

// slot returns the table's slot i, growing the table when needed.
func (t *memoTable) slot(i int) *atomic.Pointer[memoResult] {
	for {
		old := t.slots.Load()
		if old != nil && i < len(*old) {
			return &(*old)[i]
		}
		n := 2 * (i + 1)
		if old != nil {
			n = max(n, 2*len(*old))
		}
		grown := make([]atomic.Pointer[memoResult], n)
		if old != nil {
			for j := range *old {
				grown[j].Store((*old)[j].Load())
			}
		}
		if t.slots.CompareAndSwap(old, &grown) {
			return &grown[i]
		}
	}
}

// memoNumbers hands out the numbers that name things in the nodes' memo
// tables: the slots of memoized expressions and of policy lists, the ids of
// the lists whose plain passes a table keeps (memoTable.passes) and the ids
// of converted params objects (memoID.params). An Environment owns one:
// the policies compiled over it, the lists of their snapshots and the
// params objects it converts share the memo tables of the Converters over
// it, where their numbers must not collide. Written by compilation
// (assignSlots), Snapshot.List and ParamsValue; slots come back when their
// owner is garbage collected, ids are never reused.
type memoNumbers struct {
	slots slotAllocator
	// lists and params are the last list and params ids handed out.
	lists, params atomic.Uint64
}

// slotAllocator hands out memo slots.
type slotAllocator struct {
	mu   sync.Mutex
	free []int
	next int
}

func (a *slotAllocator) get() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.free); n > 0 {
		s := a.free[n-1]
		a.free = a.free[:n-1]
		return s
	}
	a.next++
	return a.next - 1
}

func (a *slotAllocator) put(slots []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free = append(a.free, slots...)
}

// assignSlots gives each memoized expression of a program a slot,
// returned to the allocator when the program is garbage collected: when no
// CompiledPolicy made of it (its enforcement views, rollout states and
// params bindings, which share it) is held by a snapshot or a scheduling
// cycle any more. Entries of a returned slot stay in
// the nodes' tables until overwritten, but name their expression, which
// keeps them from being read for another.
func (a *slotAllocator) assignSlots(p *Program) {
	var slots []int
	for _, e := range p.exprs() {
		if e.memo == notMemoized {
			continue
		}
		e.slot = a.get()
		slots = append(slots, e.slot)
	}
	if len(slots) > 0 {
		runtime.AddCleanup(p, a.put, slots)
	}
}

// exprs returns the policy's expressions that are evaluated per node.
func (p *Program) exprs() []*expr {
	var out []*expr
	for _, v := range p.variables {
		out = append(out, &v.expr)
	}
	for _, r := range p.filters {
		out = append(out, &r.expr)
		if r.messageExpression != nil {
			out = append(out, r.messageExpression)
		}
	}
	for _, s := range p.scores {
		out = append(out, &s.expr)
	}
	return out
}

// podKeys interns the values of what policies read of pods (a
// PodSignature's JSON: the pod's namespace always, the fields read, the
// namespace object's version and the pod group's value when read) into
// memo keys: equal values,
// equal keys. Bound: the Converter's max (LRU). Keys are never reused, so
// a key evicted and interned again gets a new one, and only misses the
// results kept for the old. Written by the first evaluation of a cycle
// that needs a key.
type podKeys struct {
	ids  *lru.Cache // JSON -> uint64
	next atomic.Uint64
}

// key returns the memo key of what spec names of the pod, or false when
// it cannot be computed.
func (in *PodInput) key(spec *podKeySpec) (uint64, bool) {
	r := spec.reads
	if r&podReadsUnkeyable != 0 || in.podKeys == nil {
		return 0, false
	}
	r &= podKeyReads
	if spec.someLabels() {
		return in.someLabelsKey(spec, r)
	}
	if k := in.keys[r].Load(); k != 0 {
		return k, true
	}
	var sig PodSignature
	r.fill(&sig, in.Pod, in.Namespace, in.Group)
	k, ok := in.podKeys.internSignature(&sig)
	if ok {
		in.keys[r].Store(k)
	}
	return k, ok
}

// someLabelsKey is key for a spec that holds some of the pod's labels:
// kept per spec (its address: a policy's or a list's, as long as they
// live), in a list that the cycle's evaluations share.
func (in *PodInput) someLabelsKey(spec *podKeySpec, r podReads) (uint64, bool) {
	for {
		old := in.labelKeys.Load()
		if old != nil {
			for _, e := range *old {
				if e.spec == spec {
					return e.key, true
				}
			}
		}
		// Whether the pod has labels at all is read too: an absent key of
		// absent labels is another error than of present ones.
		sig := someLabels{Labeled: len(in.Pod.Labels) > 0}
		r.fill(&sig.PodSignature, in.Pod, in.Namespace, in.Group)
		sig.Labels = nil
		for _, k := range spec.labels {
			if v, ok := in.Pod.Labels[k]; ok {
				if sig.Labels == nil {
					sig.Labels = make(map[string]string, len(spec.labels))
				}
				sig.Labels[k] = v
			}
		}
		k, ok := in.podKeys.internSignature(&sig)
		if !ok {
			return 0, false
		}
		var entries []specKey
		if old != nil {
			entries = append(entries, *old...)
		}
		entries = append(entries, specKey{spec: spec, key: k})
		if in.labelKeys.CompareAndSwap(old, &entries) {
			return k, true
		}
	}
}

// someLabels is what a memo key holds of a pod when it holds some of its
// labels.
type someLabels struct {
	PodSignature
	Labeled bool `json:"labeled"`
}

// specKey is a pod's memo key for a spec that holds some of its labels.
type specKey struct {
	spec *podKeySpec
	key  uint64
}

// internSignature returns the memo key of a signature's values.
func (p *podKeys) internSignature(sig any) (uint64, bool) {
	b, err := json.Marshal(sig)
	if err != nil {
		return 0, false
	}
	return p.intern(string(b)), true
}

func (p *podKeys) intern(s string) uint64 {
	if v, ok := p.ids.Get(s); ok {
		return v.(uint64)
	}
	k := p.next.Add(1)
	p.ids.Add(s, k)
	return k
}
