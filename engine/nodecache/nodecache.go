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
// Score), and written once per node version. A read first looks at the
// slot of the node object's address (byObject): the scheduler hands the
// plugins the informer's object of a node version, the same pointer in
// every cycle, so a read is one multiplication and one pointer
// comparison, without hashing the name. Otherwise it goes to an immutable
// map by name behind an atomic pointer (no lock, one string hash), and
// fills the slot. Writes go to a small map under a mutex, merged into a
// new read map once it has been missed as many times as it has entries (as
// sync.Map does), and at least a quarter as many times as the read map has
// (a merge copies it): a node's new version is read under the mutex until
// then.
type Cache[V any] struct {
	// byObject is a direct-mapped table from a node object's address to
	// its entry: a slot answers only for the object its entry holds (which
	// the entry keeps alive, so the address is not reused while it is
	// there). Sized on first use; a replaced or forgotten entry leaves its
	// slot.
	byObject     []atomic.Pointer[Entry[V]]
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

// Load returns the entry of a node's version, or nil. (An older version
// may still be found until the next merge: it is that version's value.)
// The informer's object of a version is one object, whose strings the
// entry shares: comparing pointers first saves reading the UID.
// LoadObject returns the entry made from this very object, from its
// byObject slot, or nil. It reads nothing of the object.
func (c *Cache[V]) LoadObject(node *corev1.Node) *Entry[V] {
	if e := c.slot(node).Load(); e != nil && e.Node == node {
		return e
	}
	return nil
}

func (c *Cache[V]) Load(node *corev1.Node) *Entry[V] {
	slot := c.slot(node)
	if e := slot.Load(); e != nil && e.Node == node {
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
				slot.Store(e)
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

// byObjectSlots is the size of the byObject table: a power of two, twice
// the nodes of a large cluster.
const byObjectSlots = 1 << 15

// slot returns the byObject slot of a node object: its address,
// multiplied by a Fibonacci hashing constant, gives the slot's index.
func (c *Cache[V]) slot(node *corev1.Node) *atomic.Pointer[Entry[V]] {
	c.byObjectOnce.Do(func() { c.byObject = make([]atomic.Pointer[Entry[V]], byObjectSlots) })
	// The top 15 bits of the hash: byObjectSlots is 1<<15.
	const shift = 64 - 15
	h := uint64(uintptr(unsafe.Pointer(node))) * 0x9e3779b97f4a7c15
	return &c.byObject[h>>shift]
}

// Store records a node's entry, or its absence (nil). The slot of the entry
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
		c.slot(old.Node).CompareAndSwap(old, nil)
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
