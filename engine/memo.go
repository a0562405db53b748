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
// slot's previous owner is never returned. A result is found in one step:
// an expression with one result per node version has it in its slot; one
// with a result per pod key (or params object) has a fixed array of
// memoWays entries, where the id's entry is at a place computed from the
// id (memoID.index). Reads take no lock and allocate nothing.

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

// memoWays bounds the results kept per node and expression that has
// several ids on a node version (one per pod key, or params object): the
// distinct workloads whose results a node keeps. Pod keys are handed out
// in sequence (podKeys), and consecutive keys have consecutive places
// (memoID.index): the results of the memoWays newest keys, for one
// expression, params object and NodeInfo generation, never displace each
// other; an older key's result is displaced by the newer key that has its
// place. A power of two.
const memoWays = 32

// memoID is what a memoized result depends on besides the node version
// and the expression: the pod's memo key (0 for expressions that do not
// read the pod), the params object's (0 for those that do not read
// params), and the NodeInfo generation (0 for those that do not read
// nodeInfo).
type memoID struct {
	key, params uint64
	gen         int64
}

// index is the place of e's result for id in a memoSet: the pod key plus
// a hash of what else the result depends on, so that consecutive keys
// take consecutive places, and the results of another generation, params
// object or expression (a PolicyList sharing the set) take others.
func (id memoID) index(e *expr) int {
	h := id.key + uint64(id.gen)*0x9e3779b97f4a7c15 + id.params*0xc2b2ae3d27d4eb4f + uint64(e.slot)*0x165667b19e3779f9
	return int(h % memoWays)
}

// memoResult is an expression's result on a node version for an id.
// Immutable: a store replaces it.
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
}

// memoSet is the results of one slot (or list way) that has several ids,
// each at its id's place (memoID.index): a new result replaces the one
// at its place, whatever its id or expression.
type memoSet [memoWays]atomic.Pointer[memoResult]

// load returns the result of e for id, or nil.
func (s *memoSet) load(e *expr, id memoID) *memoResult {
	if r := s[id.index(e)].Load(); r != nil && r.e == e && r.id == id {
		return r
	}
	return nil
}

// store records r at its place. A store that races with another of the
// same place may be lost; the result is then computed again.
func (s *memoSet) store(r *memoResult) { s[r.id.index(r.e)].Store(r) }

// setOf returns the set a pointer holds, making it on first use (of
// concurrent makers, one wins and the others use its set).
func setOf(p *atomic.Pointer[memoSet]) *memoSet {
	if s := p.Load(); s != nil {
		return s
	}
	p.CompareAndSwap(nil, new(memoSet))
	return p.Load()
}

// memoSlot is one slot of a node's table: the result of an expression
// with one id per node version (one), or the set of the results of one
// with several (set, made on first store): manyIDs says which.
type memoSlot struct {
	one atomic.Pointer[memoResult]
	set atomic.Pointer[memoSet]
}

// manyIDs says whether e's results on a node version have several ids:
// when it reads the pod (an id per pod key) or params (per params object).
// Otherwise its id is the same for every pod (or changes with the
// NodeInfo generation, when the older generation's result is not read
// again): its slot keeps one result, the newest.
func (e *expr) manyIDs() bool {
	return e.readsParams || e.memo == memoPodAndNode || e.memo == memoPodAndNodeInfo
}

// memoTable is the memo of one node version. Key: the expression (its
// slot, checked by pointer) and a memoID: the pod key (the pod's namespace,
// what its policy reads of the pod, the namespace object's version when
// read), the params object, the NodeInfo generation. Bound: per slot, one
// result, or memoWays for an expression with several ids (manyIDs), each
// id at its place, where a newer result replaces it. Invalidated by a new
// node version (a new table) or policy version (new expressions; a reused
// slot's entries name their old expression). Written by the evaluations
// that miss (atomic stores; a racing store may be lost); every entry
// carries the cost of computing it (account.go), so a result read costs
// what it cost.
type memoTable struct {
	slots atomic.Pointer[[]memoSlot]
	// lists hold the outcomes of PolicyLists (list.go), each in the way
	// its slot names: in the node's cache entry itself, so that a pod
	// that reads a list's outcome loads no slot table. Lists of one way
	// share its set, as the ids of a slot do.
	lists [listWays]atomic.Pointer[memoSet]
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
	slot := &(*slots)[e.slot]
	if !e.manyIDs() {
		if r := slot.one.Load(); r != nil && r.e == e && r.id == id {
			return r
		}
		return nil
	}
	if s := slot.set.Load(); s != nil {
		return s.load(e, id)
	}
	return nil
}

// storeResult records a result of r.e on the node for r.id: in its slot,
// replacing the one there (see memoTable for which). A store that races
// with another may be lost; the result is then computed again.
func (t *memoTable) storeResult(r *memoResult) {
	slot := t.slot(r.e.slot)
	if !r.e.manyIDs() {
		slot.one.Store(r)
		return
	}
	setOf(&slot.set).store(r)
}

// slot returns the table's slot i, growing the table when needed. A store
// into the table being replaced by a racing growth may be lost.
func (t *memoTable) slot(i int) *memoSlot {
	for {
		old := t.slots.Load()
		if old != nil && i < len(*old) {
			return &(*old)[i]
		}
		n := 2 * (i + 1)
		if old != nil {
			n = max(n, 2*len(*old))
		}
		grown := make([]memoSlot, n)
		if old != nil {
			for j := range *old {
				grown[j].one.Store((*old)[j].one.Load())
				grown[j].set.Store((*old)[j].set.Load())
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
// namespace object's version when read) into memo keys: equal values,
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
	r.fill(&sig, in.Pod, in.Namespace)
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
		r.fill(&sig.PodSignature, in.Pod, in.Namespace)
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
