package engine

import (
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
)

// TestMemoTable: a slot keeps the newest maxPodKeys results of its
// expression, never returns another expression's result (a slot reused
// after its policy went) nor one of another NodeInfo generation, and concurrent stores and loads are safe (run
// under -race by make test).
func TestMemoTable(t *testing.T) {
	var table memoTable
	a, b := &expr{slot: 3}, &expr{slot: 3}
	for key := range uint64(maxPodKeys + 4) {
		table.store(a, memoID{key: key, gen: 0}, types.Int(key), nil)
	}
	for key := range uint64(maxPodKeys + 4) {
		r := table.load(a, memoID{key: key, gen: 0})
		if evicted := key < 4; (r == nil) != evicted {
			t.Errorf("key %d: result %v, want evicted=%v", key, r, evicted)
		}
		if r != nil && r.val != types.Int(key) {
			t.Errorf("key %d: %v", key, r.val)
		}
	}
	if r := table.load(b, memoID{key: 5, gen: 0}); r != nil {
		t.Errorf("another expression in the same slot read %v", r.val)
	}
	table.store(b, memoID{key: 5, gen: 0}, types.String("b"), nil)
	if r := table.load(a, memoID{key: 5, gen: 0}); r != nil {
		t.Errorf("the previous owner's result survived a store of the new one: %v", r.val)
	}
	if r := table.load(b, memoID{key: 5, gen: 0}); r == nil || r.val != types.String("b") {
		t.Errorf("b: %v", r)
	}

	// A new NodeInfo generation replaces the results of the older.
	c := &expr{slot: 5}
	table.store(c, memoID{key: 1, gen: 10}, types.Int(1), nil)
	table.store(c, memoID{key: 2, gen: 10}, types.Int(2), nil)
	table.store(c, memoID{key: 1, gen: 11}, types.Int(3), nil)
	if table.load(c, memoID{key: 1, gen: 10}) != nil || table.load(c, memoID{key: 2, gen: 10}) != nil {
		t.Error("results of an older generation survived a newer one")
	}
	if r := table.load(c, memoID{key: 1, gen: 11}); r == nil || r.val != types.Int(3) {
		t.Errorf("generation 11: %v", r)
	}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			e := &expr{slot: g * 7}
			for key := range uint64(200) {
				table.store(e, memoID{key: key % 20, gen: int64(key % 2)}, types.Int(key%20), nil)
				if r := table.load(e, memoID{key: key % 20, gen: int64(key % 2)}); r != nil && r.val != types.Int(key%20) {
					t.Errorf("slot %d key %d: %v", e.slot, key%20, r.val)
				}
			}
		})
	}
	wg.Wait()
}
