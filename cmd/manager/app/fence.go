package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// ErrFenced is the error of a scheduler write refused by the leader fence.
var ErrFenced = errors.New("leader fence: the Lease may have expired")

// leaderFence tells whether this replica may still act as the leader by its
// own clock: until the renew deadline has passed since the start of its
// last successful acquire or renewal of the Lease. A standby takes the
// Lease only after it has seen no renewal for the lease duration, counted
// from when it observed the last one, which is after that renewal was sent;
// so the fence closes at least lease duration − renew deadline before any
// other replica can hold the Lease, a margin for a write sent just before
// it closes and for clocks running at slightly different rates. client-go
// itself stops leading a little later (the renew deadline counted from the
// start of the retries after the last success).
//
// Times are read with time.Now, whose monotonic reading (CLOCK_MONOTONIC)
// keeps running while the process is stopped (SIGSTOP, a frozen cgroup):
// the first check after the process wakes sees the whole pause. Where the
// clock missed the pause (a suspended host), the fence closes when the
// lock reads the Lease held by another replica. The zero value is closed.
type leaderFence struct {
	renewDeadline time.Duration
	logger        klog.Logger

	mu sync.Mutex
	// renewed is when the last successful acquire or renewal was sent;
	// zero when this replica has not held the Lease, or has seen it held
	// by another or released it.
	renewed time.Time
	// closedLogged says the closing since renewed was logged.
	closedLogged bool
}

func newLeaderFence(renewDeadline time.Duration, logger klog.Logger) *leaderFence {
	return &leaderFence{renewDeadline: renewDeadline, logger: logger}
}

// extend records a successful acquire or renewal whose request was sent at
// sent.
func (f *leaderFence) extend(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sent.After(f.renewed) {
		f.renewed, f.closedLogged = sent, false
	}
}

// revoke closes the fence: the Lease is another replica's, or released.
func (f *leaderFence) revoke() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed, f.closedLogged = time.Time{}, false
}

// check returns nil while the fence is open, else an error wrapping
// ErrFenced that says why.
func (f *leaderFence) check() error {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed.IsZero() {
		return fmt.Errorf("%w: this replica does not hold it", ErrFenced)
	}
	since := now.Sub(f.renewed)
	if since < f.renewDeadline {
		return nil
	}
	err := fmt.Errorf("%w: last renewed %v ago, more than the renew deadline %v", ErrFenced, since.Round(time.Millisecond), f.renewDeadline)
	if !f.closedLogged {
		f.closedLogged = true
		f.logger.Info("The leader fence closed: the scheduler writes nothing until the Lease is renewed", "sinceRenewal", since.Round(time.Millisecond), "renewDeadline", f.renewDeadline)
	}
	return err
}

// fencedLock is the leader election's resource lock, reporting to the
// fence each successful acquire or renewal (a write of the Lease that
// names this replica as the holder), and each read or write that shows the
// Lease is not this replica's.
type fencedLock struct {
	resourcelock.Interface
	fence *leaderFence
}

var _ resourcelock.Interface = &fencedLock{}

func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil && rec.HolderIdentity != l.Identity() {
		l.fence.revoke()
	}
	return rec, raw, err
}

func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Create)
}

func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Update)
}

// write writes the record and tells the fence. The time is taken before
// the request is sent: the API server stores the write later, so a standby
// observes it later still.
func (l *fencedLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord,
	do func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	sent := time.Now()
	if err := do(ctx, ler); err != nil {
		return err
	}
	if ler.HolderIdentity == l.Identity() {
		l.fence.extend(sent)
	} else {
		l.fence.revoke() // released
	}
	return nil
}

// fencedTransport refuses the writes (every method but GET, HEAD and
// OPTIONS) of the scheduler's client while the fence is closed, right
// before the request would be sent: bindings, and also pod status and
// nominations, preemption's deletions and the claims written at PreBind. A
// refused binding fails the binding cycle: the framework unreserves the pod
// and puts it back in the queue. Reads go through; Events use their own
// client.
type fencedTransport struct {
	fence *leaderFence
	next  http.RoundTripper
}

func (t *fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := t.fence.check(); err != nil {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, err // the client reports it with the method and URL
		}
	}
	return t.next.RoundTrip(req)
}

// wrap returns the transport wrapper for rest.Config.Wrap.
func (f *leaderFence) wrap(rt http.RoundTripper) http.RoundTripper {
	return &fencedTransport{fence: f, next: rt}
}
