package engine

import (
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
)

// TestMemoTable: a slot keeps the newest maxPodKeys results of its
// expression, never returns another expression's result (a slot reused
// after its policy went), and concurrent stores and loads are safe (run
// under -race by make test).
func TestMemoTable(t *testing.T) {
	var table memoTable
	a, b := &expr{slot: 3}, &expr{slot: 3}
	for key := range uint64(maxPodKeys + 4) {
		table.store(a, key, types.Int(key), nil)
	}
	for key := range uint64(maxPodKeys + 4) {
		r := table.load(a, key)
		if evicted := key < 4; (r == nil) != evicted {
			t.Errorf("key %d: result %v, want evicted=%v", key, r, evicted)
		}
		if r != nil && r.val != types.Int(key) {
			t.Errorf("key %d: %v", key, r.val)
		}
	}
	if r := table.load(b, 5); r != nil {
		t.Errorf("another expression in the same slot read %v", r.val)
	}
	table.store(b, 5, types.String("b"), nil)
	if r := table.load(a, 5); r != nil {
		t.Errorf("the previous owner's result survived a store of the new one: %v", r.val)
	}
	if r := table.load(b, 5); r == nil || r.val != types.String("b") {
		t.Errorf("b: %v", r)
	}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			e := &expr{slot: g * 7}
			for key := range uint64(200) {
				table.store(e, key%20, types.Int(key%20), nil)
				if r := table.load(e, key%20); r != nil && r.val != types.Int(key%20) {
					t.Errorf("slot %d key %d: %v", e.slot, key%20, r.val)
				}
			}
		})
	}
	wg.Wait()
}
