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
// in the slot itself while it holds one result (always, for an expression
// with one result per node version), then, for one with a result per pod
// key (or params object), in one bucket of its slot's places
// (memoPlaces), a cache line that holds four results with their tags.
// Reads take no lock and allocate nothing.

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

// memoID is what a memoized result depends on besides the node version
// and the expression: the pod's memo key (0 for expressions that do not
// read the pod), the params object's (0 for those that do not read
// params), and the NodeInfo generation (0 for those that do not read
// nodeInfo).
type memoID struct {
	key, params uint64
	gen         int64
}

// place returns where e's result for id goes among memoPlaces: the bucket
// of a grown set (from the pod key plus a hash of the rest, so that
// memoWays consecutive keys share a bucket, one cache line that the pods
// of workloads created together read, and the next keys go to the next
// buckets) and the tag that names it there (a hash of all of it, never
// 0).
func (id memoID) place(e *expr) (bucket int, tag uint64) {
	rest := uint64(id.gen)*0x9e3779b97f4a7c15 + id.params*0xc2b2ae3d27d4eb4f + uint64(e.slot)*0x165667b19e3779f9
	tag = (id.key*0xd6e8feb86659fd93 ^ rest) * 0xff51afd7ed558ccd
	return int((id.key + rest>>32) / memoWays % memoBuckets), tag | 1
}

// memoResult is an expression's result on a node version for an id.
// Immutable: a store replaces it.
type memoResult struct {
	e  *expr
	id memoID
	// list is the outcome when e is a PolicyList's: right after e and id,
	// which a reader checks first, so that a filter list's reader finds
	// its decisions in the 56 bytes it loaded for them (one cache line for
	// half the results, whose 160-byte size class starts them on a line;
	// two adjacent ones for the others), not 96 bytes further on.
	list ListOutcome
	val  ref.Val
	err  error
	// cost is what computing val cost, charged to every evaluation that
	// reads it (account.go).
	cost costRecord
	// stored orders the results of a node version by their store
	// (memoTable.stores): the oldest of a bucket is replaced first.
	stored uint64
}

const (
	// memoWays is how many results a bucket holds: with their tags, one
	// cache line.
	memoWays = 4
	// memoBuckets is how many buckets a grown set has: the results of
	// any memoBuckets*memoWays consecutive pod keys of an expression (for
	// one params object and NodeInfo generation) fit in it, since pod keys are handed out in sequence (podKeys)
	// and go to the buckets in turn (memoID.place); of the results that
	// share a bucket, the oldest goes first. Pods of workloads created
	// together have near keys.
	memoBuckets = 16
)

// memoBucket holds up to memoWays results, each named by its tag
// (memoID.place). A store writes the result, then its tag; a reader that
// finds the tag checks the result's expression and id, so a tag and a
// result of two racing stores never give a wrong answer.
type memoBucket struct {
	tags    [memoWays]atomic.Uint64
	results [memoWays]atomic.Pointer[memoResult]
}

// load returns the result of e for id with this tag, or nil.
func (b *memoBucket) load(e *expr, id memoID, tag uint64) *memoResult {
	for w := range memoWays {
		if b.tags[w].Load() == tag {
			if r := b.results[w].Load(); r != nil && r.e == e && r.id == id {
				return r
			}
		}
	}
	return nil
}

// store puts r in the bucket: in the place of a result of the same
// expression and id, or an empty place, or that of the oldest result. It
// returns the result it replaced, if another.
func (b *memoBucket) store(r *memoResult, tag uint64) (replaced *memoResult) {
	way := -1
	for w := range memoWays {
		old := b.results[w].Load()
		if old == nil || (old.e == r.e && old.id == r.id) {
			way, replaced = w, nil
			break
		}
		if way < 0 || old.stored < replaced.stored {
			way, replaced = w, old
		}
	}
	b.results[way].Store(r)
	b.tags[way].Store(tag)
	return replaced
}

// memoPlaces holds the results of a slot (or a list way). An expression
// with one id per node version keeps its newest result in first. Those
// with several ids keep one result in first, until a result of the same
// NodeInfo generation comes for another id (a result of an older
// generation is not read again); then a bucket (small), until it must
// replace a result of the same generation; then a set of memoBuckets
// (big), where each id has its bucket (memoID.place). The stages that
// come later are read first.
type memoPlaces struct {
	first atomic.Pointer[memoResult]
	small atomic.Pointer[memoBucket]
	big   atomic.Pointer[[memoBuckets]memoBucket]
}

// load returns the result of e for id, or nil.
func (p *memoPlaces) load(e *expr, id memoID) *memoResult {
	if big := p.big.Load(); big != nil {
		bucket, tag := id.place(e)
		return big[bucket].load(e, id, tag)
	}
	if small := p.small.Load(); small != nil {
		_, tag := id.place(e)
		return small.load(e, id, tag)
	}
	return p.loadFirst(e, id)
}

// loadFirst returns the result in first if it is e's for id, or nil.
func (p *memoPlaces) loadFirst(e *expr, id memoID) *memoResult {
	if r := p.first.Load(); r != nil && r.e == e && r.id == id {
		return r
	}
	return nil
}

// store records r, numbered by its memo's stores (see memoPlaces). A
// store that races with another may be lost, as may one into the small
// bucket while the set grows; the result is then computed again.
func (p *memoPlaces) store(t *memoOrder, r *memoResult) {
	r.stored = t.stores.Add(1)
	bucket, tag := r.id.place(r.e)
	if big := p.big.Load(); big != nil {
		big[bucket].store(r, tag)
		return
	}
	small := p.small.Load()
	if small == nil {
		first := p.first.Load()
		if first == nil || (first.e == r.e && first.id == r.id) || first.id.gen != r.id.gen {
			p.first.Store(r)
			return
		}
		// A second id of this generation: both go to a bucket.
		small = new(memoBucket)
		_, firstTag := first.id.place(first.e)
		small.store(first, firstTag)
		small.store(r, tag)
		p.small.CompareAndSwap(nil, small)
		return
	}
	old := small.store(r, tag)
	if old == nil || old.id.gen != r.id.gen || t.small {
		return
	}
	// The bucket held more results of this generation than it has places
	// (of this expression, or of another list of the way): every result
	// it held, and the one it dropped, goes to its own bucket of a set
	// (where, should more than memoWays share one, the oldest go).
	big := new([memoBuckets]memoBucket)
	move := func(res *memoResult) {
		b, tag := res.id.place(res.e)
		big[b].store(res, tag)
	}
	move(old)
	for w := range memoWays {
		if res := small.results[w].Load(); res != nil {
			move(res)
		}
	}
	p.big.CompareAndSwap(nil, big)
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
// what its policy reads of the pod, the namespace object's version and
// the pod group's value when read), the params object, the NodeInfo
// generation. Bound: per slot, one
// result, or for an expression with several ids (manyIDs) one, then
// memoWays, then memoBuckets*memoWays, memoWays of them per bucket, the
// oldest of a bucket replaced first (memoPlaces). Invalidated by a new node version (a
// new table) or policy version (new expressions; a reused slot's entries
// name their old expression, and go first). Written by the evaluations
// that miss (atomic stores; a racing store may be lost); every entry
// carries the cost of computing it (account.go), so a result read costs
// what it cost.
type memoTable struct {
	slots atomic.Pointer[[]memoPlaces]
	// lists hold the outcomes of PolicyLists (list.go), each in the way
	// its slot names: in the node's cache entry itself, so that a pod
	// that reads a list's outcome loads no slot table. Lists of one way
	// share its places, as the ids of a slot do.
	lists [listWays]memoPlaces
	// passes hold, per way, the id of a node-only filter list whose every
	// policy passes plainly on this node version (PolicyList.Remember):
	// the common outcome, read without following a pointer.
	passes [listWays]atomic.Uint64
	memoOrder
}

// memoOrder orders a memo's results and bounds its places.
type memoOrder struct {
	// stores counts the results stored (memoResult.stored).
	stores atomic.Uint64
	// small: a place's results never grow past its bucket
	// (Converter.SmallMemo). Set before the memo is shared.
	small bool
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
	if e.manyIDs() {
		return slot.load(e, id)
	}
	// The stages of a slot's previous owner with several ids are not read.
	return slot.loadFirst(e, id)
}

// storeResult records a result of r.e on the node for r.id, in its slot
// (see memoTable for what it replaces). A store that races with another
// may be lost; the result is then computed again.
func (t *memoTable) storeResult(r *memoResult) {
	slot := t.slot(r.e.slot)
	if r.e.manyIDs() {
		slot.store(&t.memoOrder, r)
		return
	}
	slot.first.Store(r)
}

// slot returns the table's slot i, growing the table when needed. A store
// into the table being replaced by a racing growth may be lost.
func (t *memoTable) slot(i int) *memoPlaces {
	for {
		old := t.slots.Load()
		if old != nil && i < len(*old) {
			return &(*old)[i]
		}
		n := 2 * (i + 1)
		if old != nil {
			n = max(n, 2*len(*old))
		}
		grown := make([]memoPlaces, n)
		if old != nil {
			for j := range *old {
				grown[j].first.Store((*old)[j].first.Load())
				grown[j].small.Store((*old)[j].small.Load())
				grown[j].big.Store((*old)[j].big.Load())
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
	// specs are the key specs of the expressions evaluated without a
	// node, by their form (podSpec).
	specs *lru.Cache
}

func newMemoNumbers() *memoNumbers {
	return &memoNumbers{specs: lru.New(podSpecs)}
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
// memo keys: equal values, equal keys. Bound: the Converter's max (LRU).
// Keys are never reused, in the whole process (podKeysIssued): a key
// evicted and interned again gets a new one, and only misses the results
// kept for the old; and the memos that outlive a Converter, those of the
// expressions evaluated without a node (podmemo.go), which every
// Converter over the policies reads, never mistake one Converter's key
// for another's. Written by the first evaluation of a cycle that needs a
// key.
type podKeys struct {
	ids *lru.Cache // JSON -> uint64
}

// podKeysIssued is the last pod key handed out.
var podKeysIssued atomic.Uint64

// key returns the memo key of what spec names of the pod, or false when
// it cannot be computed.
func (in *PodInput) key(spec *podKeySpec) (uint64, bool) {
	r := spec.reads
	if r&podReadsUnkeyable != 0 || in.podKeys == nil {
		return 0, false
	}
	r &= podKeyReads
	if spec.someLabels() {
		// Kept per spec (its address: a policy's or a list's, as long as
		// they live).
		return keyOf(&in.labelKeys, spec, func() (uint64, bool) { return in.someLabelsKey(spec, r) })
	}
	return keyOf(&in.keys, r, func() (uint64, bool) {
		var sig PodSignature
		r.fill(&sig, in.Pod, in.Namespace, in.Group)
		return in.podKeys.internSignature(&sig)
	})
}

// keyOf returns the key kept in list for by, or computes it with compute
// and keeps it. The list is the cycle's evaluations' to share: read
// without a lock, extended by a copy (a pod has a few keys); two
// evaluations that compute the same key at once intern equal values, so
// either copy is right.
func keyOf[K comparable](list *atomic.Pointer[[]keyFor[K]], by K, compute func() (uint64, bool)) (uint64, bool) {
	for {
		old := list.Load()
		if old != nil {
			for _, e := range *old {
				if e.by == by {
					return e.key, true
				}
			}
		}
		k, ok := compute()
		if !ok {
			return 0, false
		}
		var entries []keyFor[K]
		if old != nil {
			entries = append(make([]keyFor[K], 0, len(*old)+1), *old...)
		}
		entries = append(entries, keyFor[K]{by: by, key: k})
		if list.CompareAndSwap(old, &entries) {
			return k, true
		}
	}
}

// keyFor is a pod's memo key for by: the reads it holds, or the spec
// that holds some of its labels.
type keyFor[K comparable] struct {
	by  K
	key uint64
}

// someLabelsKey computes the key of a spec that holds some of the pod's
// labels.
func (in *PodInput) someLabelsKey(spec *podKeySpec, r podReads) (uint64, bool) {
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
	return in.podKeys.internSignature(&sig)
}

// someLabels is what a memo key holds of a pod when it holds some of its
// labels.
type someLabels struct {
	PodSignature
	Labeled bool `json:"labeled"`
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
	k := podKeysIssued.Add(1)
	p.ids.Add(s, k)
	return k
}
