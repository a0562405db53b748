// Package pool runs a report's independent evaluations (impact's pods,
// analyze's classes) on a few goroutines, with client-go's
// workqueue.ParallelizeUntil, as kube-scheduler's framework parallelizes
// its filters.
package pool

import (
	"context"
	"runtime"

	"k8s.io/client-go/util/workqueue"
)

// Run calls f for each i in 0..n-1 on at most workers goroutines
// (GOMAXPROCS when workers is 0 or less). The first error f returns
// cancels the context f is given, with that error as its cause, and no
// further i is started; Run returns it, or the cause of ctx when ctx ends
// first, or nil.
func Run(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workqueue.ParallelizeUntil(ctx, workers, n, func(i int) {
		if err := f(ctx, i); err != nil {
			cancel(err)
		}
	})
	return context.Cause(ctx)
}
