package analyze

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/celsched/celsched/simulate/pool"
)

// TestWindow: classes evaluated in parallel, in any order of completion,
// are taken in their order, with never more than the window's size
// evaluated and not yet taken; a failed class stops the rest without a
// worker left waiting.
func TestWindow(t *testing.T) {
	const n, workers, size = 40, 3, 4
	tests := map[string]struct {
		fail    int // the class that fails; -1: none
		wantErr bool
	}{
		"all succeed":        {fail: -1},
		"the first fails":    {fail: 0, wantErr: true},
		"one in the middle":  {fail: 17, wantErr: true},
		"the last one fails": {fail: n - 1, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := &window{size: size, done: make([]*classVerdicts, n)}
			w.moved = sync.NewCond(&w.mu)
			var taken []int
			maxHeld := 0
			errFail := errors.New("class failed")
			err := pool.Run(context.Background(), workers, n, func(ctx context.Context, i int) error {
				if !w.wait(i) {
					return nil
				}
				// Later classes finish first, now and then.
				time.Sleep(time.Duration((n-i)%5) * time.Millisecond)
				var err error
				if i == tc.fail {
					err = errFail
				}
				w.finish(i, &classVerdicts{applies: []string{"p"}}, err, func(i int, _ *classVerdicts) {
					taken = append(taken, i)
				})
				w.mu.Lock()
				held := 0
				for _, cv := range w.done {
					if cv != nil {
						held++
					}
				}
				maxHeld = max(maxHeld, held)
				w.mu.Unlock()
				return err
			})
			if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, errFail) {
				t.Fatalf("error %v, want one: %t", err, tc.wantErr)
			}
			want := make([]int, 0, n)
			for i := range n {
				if i == tc.fail {
					break
				}
				want = append(want, i)
			}
			if tc.fail < 0 {
				if diff := cmp.Diff(want, taken); diff != "" {
					t.Errorf("classes taken (-want +got):\n%s", diff)
				}
			} else if diff := cmp.Diff(want[:min(len(taken), len(want))], taken, cmpopts.EquateEmpty()); diff != "" || len(taken) > tc.fail {
				t.Errorf("classes taken, before the failed one only (-want +got):\n%s", diff)
			}
			if maxHeld > size {
				t.Errorf("%d classes held at once; the window is %d", maxHeld, size)
			}
		})
	}
}
