package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// policySignals is what has something new to write per policy: an
// evidence kind (audit.Evidence) or the drift tracker's changes.
type policySignals interface {
	// Wake receives when policies were touched since the last Touched.
	Wake() <-chan struct{}
	// Touched returns and clears the policies touched.
	Touched() []string
	// Policies are the policies with something unwritten at the start.
	Policies() []string
}

// evidenceSource is a controller's source of the policies with something
// new to write: those whose evidence of one kind (audit.Evidence) went
// from none to some, or whose drift changed. The plugins' evidence cache
// (the drift tracker) signals them without blocking, and the source adds
// them to the controller's queue, where a policy is queued once however
// often it is signalled. At its start it also queues every policy with
// something unwritten (collected before this replica led).
func evidenceSource(e policySignals) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		add := func(names []string) {
			for _, name := range names {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
			}
		}
		wake := e.Wake()
		add(e.Policies())
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-wake:
					add(e.Touched())
				}
			}
		}()
		return nil
	})
}

// livePolicy reads a policy from c (the manager's cache); nil when it is
// gone. A policy missing from the cache is looked up with reader, when
// set, before it is called gone: the scheduler's informer may have seen
// it (and collected evidence for it) before this cache.
func livePolicy(ctx context.Context, c client.Client, reader client.Reader, name string) (*schedv1alpha1.SchedulingPolicy, error) {
	policy := &schedv1alpha1.SchedulingPolicy{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, policy)
	if apierrors.IsNotFound(err) && reader != nil {
		err = reader.Get(ctx, client.ObjectKey{Name: name}, policy)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return policy, nil
}

// untilNextWrite is how long a writer that last wrote at last waits
// before it writes again, at most one write per interval; 0 or less: it
// may write now.
func untilNextWrite(last time.Time, interval time.Duration, now time.Time) time.Duration {
	if last.IsZero() {
		return 0
	}
	return last.Add(interval).Sub(now)
}

// flushOnStop writes, when the leader stops (its context is done), the
// evidence its writer has not written yet, with a few seconds to finish.
type flushOnStop func(context.Context)

// Start waits until ctx is done, then flushes.
func (f flushOnStop) Start(ctx context.Context) error {
	<-ctx.Done()
	last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	f(last)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader collects evidence.
func (f flushOnStop) NeedLeaderElection() bool { return true }
