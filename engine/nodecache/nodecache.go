// Package nodecache keeps a value per node version, found from the node
// object the scheduler hands out in every cycle: what engine keeps per node
// (its CEL value and the results remembered on it) lives here.
package nodecache

import (
	"maps"
	"sync"
	"sync/atomic"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Entry is a node version and its value.
type Entry[V any] struct {
	// Node is the object the value was made from; another object of the
	// same version is found by UID and ResourceVersion.
	Node            *corev1.Node
	UID             types.UID
	ResourceVersion string
	Value           V
}

// New returns a cache of at most max node names.
func New[V any](max int) *Cache[V] { return &Cache[V]{max: max} }

// Cache maps node names to the cached value of their current version.
// It is read for every (pod, node) of every cycle, twice (Filter and
// Score), and written once per node version. A read first looks in the
// set of the node object's address (byObject): the scheduler hands the
// plugins the informer's object of a node version, the same pointer in
// every cycle, so a read is one multiplication and a look at one cache
// line, without hashing the name. Otherwise it goes to an immutable map
// by name behind an atomic pointer (no lock, one string hash), and fills
// a way of the set. Writes go to a small map under a mutex, merged into a
// new read map once it has been missed as many times as it has entries (as
// sync.Map does), and at least a quarter as many times as the read map has
// (a merge copies it): a node's new version is read under the mutex until
// then.
type Cache[V any] struct {
	// byObject is a set-associative table from a node object's address to
	// its entry: byObjectWays ways per set, each the address it answers
	// for and the entry (made from that very object, which the entry
	// keeps alive, so the address is not reused while it is there). Sized
	// on first use; a replaced or forgotten entry leaves its way. Four ways
	// keep the objects of a large cluster apart: with one (a
	// direct-mapped table of 32768 slots) about one node in seven of 5000
	// shared its slot with another, and both went to the map by name in
	// every cycle.
	byObject     []objectSet[V]
	byObjectOnce sync.Once

	read atomic.Pointer[map[string]*Entry[V]]

	mu sync.Mutex
	// dirty holds the entries newer than read's (nil: the node is gone).
	dirty  map[string]*Entry[V]
	misses int
	// max bounds the names held; past it the cache starts over (nodes
	// deleted while nobody called forget).
	max int
}

// LoadObject returns the entry made from this very object, from its
// byObject set, or nil. It reads nothing of the object.
func (c *Cache[V]) LoadObject(node *corev1.Node) *Entry[V] {
	return c.set(node).load(node)
}

// Load returns the entry of a node's version, or nil. (An older version
// may still be found until the next merge: it is that version's value.)
// The informer's object of a version is one object, whose strings the
// entry shares: comparing pointers first saves reading the UID.
func (c *Cache[V]) Load(node *corev1.Node) *Entry[V] {
	set := c.set(node)
	if e := set.load(node); e != nil {
		return e
	}
	// The same object is the same version: comparing the pointer reads
	// nothing but the entry, where comparing the strings reads both.
	current := func(e *Entry[V]) bool {
		return e.Node == node || (e.ResourceVersion == node.ResourceVersion && e.UID == node.UID)
	}
	name := node.Name
	if read := c.read.Load(); read != nil {
		if e := (*read)[name]; e != nil && current(e) {
			if e.Node == node {
				set.store(node, e)
			}
			return e
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.dirty[name]
	c.missed()
	if e != nil && current(e) {
		return e
	}
	return nil
}

// byObjectSets and byObjectWays size the byObject table: 8192 sets of
// four ways (32768 node objects, twice the nodes of a large cluster), a
// set in one cache line.
const (
	byObjectSets = 1 << 13
	byObjectWays = 4
)

// objectSet is a set of byObject: the address each way answers for, and
// its entry. A reader matches the address, then checks that the entry was
// made from the object (a way being refilled may hold another's entry
// for an instant).
type objectSet[V any] struct {
	objects [byObjectWays]atomic.Uintptr
	entries [byObjectWays]atomic.Pointer[Entry[V]]
}

func (s *objectSet[V]) load(node *corev1.Node) *Entry[V] {
	addr := uintptr(unsafe.Pointer(node))
	for w := range byObjectWays {
		if s.objects[w].Load() == addr {
			if e := s.entries[w].Load(); e != nil && e.Node == node {
				return e
			}
		}
	}
	return nil
}

// store puts e, made from node, in a way: the object's own, else an empty
// one, else one chosen by the address (the sets of a cluster rarely fill:
// 5000 nodes put 0.6 objects in a set on average).
func (s *objectSet[V]) store(node *corev1.Node, e *Entry[V]) {
	addr := uintptr(unsafe.Pointer(node))
	way := -1
	for w := range byObjectWays {
		if s.objects[w].Load() == addr {
			way = w
			break
		}
		if way < 0 && s.entries[w].Load() == nil {
			way = w
		}
	}
	if way < 0 {
		way = int(addr>>6) % byObjectWays
	}
	s.entries[way].Store(e)
	s.objects[way].Store(addr)
}

// clear lets go of e wherever its set holds it.
func (s *objectSet[V]) clear(e *Entry[V]) {
	for w := range byObjectWays {
		s.entries[w].CompareAndSwap(e, nil)
	}
}

// set returns the byObject set of a node object: its address, multiplied
// by a Fibonacci hashing constant, gives the set's index.
func (c *Cache[V]) set(node *corev1.Node) *objectSet[V] {
	c.byObjectOnce.Do(func() { c.byObject = make([]objectSet[V], byObjectSets) })
	// The top 13 bits of the hash: byObjectSets is 1<<13.
	const shift = 64 - 13
	h := uint64(uintptr(unsafe.Pointer(node))) * 0x9e3779b97f4a7c15
	return &c.byObject[h>>shift]
}

// Store records a node's entry, or its absence (nil). The way of the entry
// it replaces is cleared, so that the table keeps no node alive that the
// cache no longer holds.
func (c *Cache[V]) Store(name string, e *Entry[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.dirty[name]
	if !ok {
		if read := c.read.Load(); read != nil {
			old = (*read)[name]
		}
	}
	if old != nil && old.Node != nil {
		c.set(old.Node).clear(old)
	}
	if c.dirty == nil {
		c.dirty = map[string]*Entry[V]{}
	}
	c.dirty[name] = e
}

// missed counts a read that the read map could not answer, and merges the
// dirty map into a new read map when the misses have cost about as much as
// a merge, which copies the read map: so converting every node of a large
// cluster once, one after the other (a miss and a store each), merges
// O(log n) times, not once per node.
func (c *Cache[V]) missed() {
	c.misses++
	old := c.read.Load()
	readLen := 0
	if old != nil {
		readLen = len(*old)
	}
	if c.misses < max(len(c.dirty), readLen/4) || len(c.dirty) == 0 {
		return
	}
	var read map[string]*Entry[V]
	if old != nil && len(*old)+len(c.dirty) <= c.max {
		read = maps.Clone(*old)
	}
	if read == nil {
		read = make(map[string]*Entry[V], len(c.dirty))
	}
	for name, e := range c.dirty {
		if e == nil {
			delete(read, name)
		} else {
			read[name] = e
		}
	}
	c.read.Store(&read)
	c.dirty = map[string]*Entry[V]{}
	c.misses = 0
}
