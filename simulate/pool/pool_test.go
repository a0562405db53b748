package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRun: every index once, on at most the workers asked for; the first
// error stops the rest and is returned; a cancelled context is an error.
func TestRun(t *testing.T) {
	for _, workers := range []int{0, 1, 3} {
		var mu sync.Mutex
		seen := map[int]int{}
		var running, most atomic.Int32
		err := Run(context.Background(), workers, 100, func(_ context.Context, i int) error {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				if m := most.Load(); now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatalf("workers %d: %v", workers, err)
		}
		for i := range 100 {
			if seen[i] != 1 {
				t.Errorf("workers %d: index %d run %d times", workers, i, seen[i])
			}
		}
		if workers > 0 && int(most.Load()) > workers {
			t.Errorf("workers %d: %d ran at once", workers, most.Load())
		}
	}

	boom := errors.New("boom")
	var after atomic.Int32
	err := Run(context.Background(), 1, 100, func(ctx context.Context, i int) error {
		if i == 10 {
			return boom
		}
		if i > 10 {
			after.Add(1)
		}
		return nil
	})
	if !errors.Is(err, boom) || after.Load() != 0 {
		t.Errorf("err %v and %d indexes run after the error; want boom and none", err, after.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, 2, 10, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: err %v, want context.Canceled", err)
	}
}
