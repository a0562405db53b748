package engine

import (
	"maps"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

// nodeCache maps node names to the cached value of their current version.
// It is read for every (pod, node) of every cycle, twice (Filter and
// Score), and written once per node version, so reads go to an immutable
// map behind an atomic pointer: no lock, one hash lookup. Writes go to a
// small map under a mutex, merged into a new read map once it has been
// missed as many times as it has entries (as sync.Map does):
// a node's new version is read under the mutex until then.
type nodeCache struct {
	read atomic.Pointer[map[string]*nodeEntry]

	mu sync.Mutex
	// dirty holds the entries newer than read's (nil: the node is gone).
	dirty  map[string]*nodeEntry
	misses int
	// max bounds the names held; past it the cache starts over (nodes
	// deleted while nobody called forget).
	max int
}

// load returns the entry of a node's version, or nil. (An older version
// may still be found until the next merge: it is that version's value.)
// The informer's object of a version is one object, whose strings the
// entry shares: comparing pointers first saves reading the UID.
func (c *nodeCache) load(node *corev1.Node) *nodeEntry {
	// The same object is the same version: comparing the pointer reads
	// nothing but the entry, where comparing the strings reads both.
	current := func(e *nodeEntry) bool {
		return e.node == node || (e.resourceVersion == node.ResourceVersion && e.uid == node.UID)
	}
	name := node.Name
	if read := c.read.Load(); read != nil {
		if e := (*read)[name]; e != nil && current(e) {
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

// store records a node's entry, or its absence (nil).
func (c *nodeCache) store(name string, e *nodeEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty == nil {
		c.dirty = map[string]*nodeEntry{}
	}
	c.dirty[name] = e
}

// missed counts a read that the read map could not answer, and merges the
// dirty map into a new read map when they have cost as much as a merge.
func (c *nodeCache) missed() {
	c.misses++
	if c.misses < len(c.dirty) || len(c.dirty) == 0 {
		return
	}
	var read map[string]*nodeEntry
	if old := c.read.Load(); old != nil && len(*old)+len(c.dirty) <= c.max {
		read = maps.Clone(*old)
	}
	if read == nil {
		read = make(map[string]*nodeEntry, len(c.dirty))
	}
	for name, e := range c.dirty {
		if e == nil {
			delete(read, name)
		} else {
			read[name] = e
		}
	}
	c.read.Store(&read)
	c.dirty = map[string]*nodeEntry{}
	c.misses = 0
}
