package nodecache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// TestNodeCache: a node's entry is found only for its version, a newer
// version is found at once and replaces the old once merged into the read
// map, a forgotten node is gone after a merge, the cache starts over past
// its bound, and
// concurrent reads and writes are safe (run under -race by make test).
func TestNodeCache(t *testing.T) {
	t.Parallel()
	c := New[int](100)
	node := func(name, rv string) *corev1.Node {
		n := &corev1.Node{}
		n.Name, n.UID, n.ResourceVersion = name, ktypes.UID("uid-"+name), rv
		return n
	}
	entry := func(name, rv string) *Entry[int] {
		return &Entry[int]{UID: ktypes.UID("uid-" + name), ResourceVersion: rv}
	}
	for i := range 50 {
		name := fmt.Sprintf("n%d", i)
		c.Store(name, entry(name, "1"))
	}
	for round := range 3 { // the first rounds read the dirty map, then the merged one
		for i := range 50 {
			name := fmt.Sprintf("n%d", i)
			if e := c.Load(node(name, "1")); e == nil {
				t.Fatalf("round %d: %s not found", round, name)
			}
			if e := c.Load(node(name, "2")); e != nil {
				t.Fatalf("round %d: %s found for another version", round, name)
			}
		}
	}
	c.Store("n1", entry("n1", "2"))
	if c.Load(node("n1", "2")) == nil {
		t.Error("a new version is not found")
	}
	c.Store("n2", nil)
	for range 50 { // misses, which merge (a merge waits for a quarter of the read map's size)
		c.Load(node("x", "1"))
	}
	if c.Load(node("n1", "1")) != nil || c.Load(node("n1", "2")) == nil {
		t.Error("after a merge, the new version does not replace the old one")
	}
	if c.Load(node("n2", "1")) != nil {
		t.Error("a forgotten node is still there after a merge")
	}
	for i := range 200 {
		name := fmt.Sprintf("m%d", i)
		c.Store(name, entry(name, "1"))
	}
	if read := c.read.Load(); len(*read) > c.max {
		t.Errorf("%d nodes held, over the bound of %d", len(*read), c.max)
	}

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				name := fmt.Sprintf("c%d", i%30)
				rv := fmt.Sprint(i % 3)
				if e := c.Load(node(name, rv)); e != nil && e.ResourceVersion != rv {
					t.Errorf("goroutine %d: %s version %s read for %s", g, name, e.ResourceVersion, rv)
				}
				if i%7 == g {
					c.Store(name, entry(name, rv))
				}
			}
		})
	}
	wg.Wait()
}

// TestNodeCacheByObject: a node object is found through its slot once the
// map found it, only that object (another object of another version with
// the same name is not), and the slot lets go of an entry the cache
// replaces or forgets.
func TestNodeCacheByObject(t *testing.T) {
	t.Parallel()
	c := New[int](100)
	v1 := &corev1.Node{}
	v1.Name, v1.UID, v1.ResourceVersion = "n", "uid-n", "1"
	e1 := &Entry[int]{Node: v1, UID: v1.UID, ResourceVersion: "1"}
	c.Store("n", e1)
	if c.Load(v1) != e1 {
		t.Fatal("the stored version is not found")
	}
	for range 3 { // merge into the read map, whose hit fills the slot
		c.Load(v1)
	}
	if c.set(v1).load(v1) != e1 {
		t.Fatal("a read of the object did not fill its slot")
	}
	v2 := v1.DeepCopy()
	v2.ResourceVersion = "2"
	if c.Load(v2) != nil {
		t.Fatal("another version was found")
	}
	e2 := &Entry[int]{Node: v2, UID: v2.UID, ResourceVersion: "2"}
	c.Store("n", e2)
	if held(c, e1) {
		t.Error("the replaced entry is still in its set")
	}
	if c.Load(v2) != e2 {
		t.Error("the new version is not found")
	}
	for range 3 {
		c.Load(v2)
	}
	c.Store("n", nil)
	if held(c, e2) {
		t.Error("the forgotten entry is still in its set")
	}
}

// held says whether e is in a way of its set.
func held(c *Cache[int], e *Entry[int]) bool {
	s := c.set(e.Node)
	for w := range byObjectWays {
		if s.entries[w].Load() == e {
			return true
		}
	}
	return false
}

// TestNodeCacheByObjectAtScale: the objects of 5000 nodes, once read
// through the map, are all found through their sets, each as itself.
func TestNodeCacheByObjectAtScale(t *testing.T) {
	t.Parallel()
	c := New[int](15000)
	// An informer's node objects are not allocated one after the other:
	// 5000 of 50000 objects, taken at random, are spread as theirs are.
	pool := make([]*corev1.Node, 50000)
	for i := range pool {
		pool[i] = &corev1.Node{}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	nodes := pool[:5000]
	for i, n := range nodes {
		n.Name, n.UID, n.ResourceVersion = fmt.Sprintf("node-%d", i), ktypes.UID(fmt.Sprintf("uid-%d", i)), "1"
		c.Store(n.Name, &Entry[int]{Node: n, UID: n.UID, ResourceVersion: "1", Value: i})
	}
	for range 3 { // merged into the read map, whose hits fill the sets
		for _, n := range nodes {
			c.Load(n)
		}
	}
	missed := 0
	for i, n := range nodes {
		e := c.LoadObject(n)
		switch {
		case e == nil:
			missed++
		case e.Node != n || e.Value != i:
			t.Fatalf("node %d: the entry of %s", i, e.Node.Name)
		}
	}
	// Five objects in one set (8192 sets, 0.6 objects each on average)
	// overflow it: a few sets do, and a few objects are missed. A
	// direct-mapped table of 32768 slots missed 210 here.
	if missed > 25 {
		t.Errorf("%d of %d node objects not found through their sets", missed, len(nodes))
	}
}
