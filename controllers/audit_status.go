package controllers

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/engine/audit"
)

// DefaultAuditStatusInterval is the least time between two writes of a
// policy's evidence (status.audit, its Reports, the counts of its
// rollout's waves).
const DefaultAuditStatusInterval = 10 * time.Second

// AuditStatusWriter writes what Audit policies would have done (the
// evidence cache audit.Log.Policies) into their status.audit. It is a
// reconciler of policies, woken when a policy gains evidence: it writes
// at most once per Interval per policy (coalescing what came meanwhile;
// RequeueAfter brings it back), adding to the stored counts with an
// optimistic lock, and takes the evidence out of the cache only once the
// write succeeded: a write that fails loses nothing and is retried, and
// no count is written twice. It runs on the leader, where the scheduler
// binds pods, and writes what is left when the leader stops.
type AuditStatusWriter struct {
	Client client.Client
	// Reader, when set, confirms that a policy missing from the cache is
	// gone before its evidence is dropped (the manager's API reader).
	Reader   client.Reader
	Log      *audit.Log
	Interval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// mu makes one write of a policy's evidence at a time (a reconcile,
	// the flush at the stop).
	mu sync.Mutex
	// lastWrite is when each policy's status.audit was last written by
	// this writer. Key: policy name; bound: the policies written; an
	// entry leaves with its policy. Written under mu.
	lastWrite map[string]time.Time
}

// SetupWithManager registers the writer, which runs on the leader, and
// its flush at the stop.
func (w *AuditStatusWriter) SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("schedulingpolicy-audit").
		WatchesRawSource(evidenceSource(&w.Log.Policies)).
		Complete(w); err != nil {
		return err
	}
	return mgr.Add(flushOnStop(w.Flush))
}

// Reconcile writes a policy's evidence, or says when it may.
func (w *AuditStatusWriter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.write(ctx, req.Name, false)
}

// Flush writes the evidence of every policy now, whenever it was last
// written.
func (w *AuditStatusWriter) Flush(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range w.Log.Policies.Policies() {
		if _, err := w.write(ctx, name, true); err != nil {
			ctrl.LoggerFrom(ctx).WithName("audit-status").Info("Writing the audit summary failed", "policy", name, "err", err)
		}
	}
}

func (w *AuditStatusWriter) interval() time.Duration {
	if w.Interval > 0 {
		return w.Interval
	}
	return DefaultAuditStatusInterval
}

func (w *AuditStatusWriter) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// write adds a policy's unwritten evidence to its status.audit: now when
// force is set or Interval has passed since the last write, otherwise
// later (RequeueAfter).
func (w *AuditStatusWriter) write(ctx context.Context, name string, force bool) (ctrl.Result, error) {
	policy, err := livePolicy(ctx, w.Client, w.Reader, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if policy == nil {
		w.Log.Policies.Drop(name)
		delete(w.lastWrite, name)
		return ctrl.Result{}, nil
	}
	unwritten := w.Log.Policies.Unwritten(name)
	d, ok := unwritten[struct{}{}]
	switch {
	case !ok:
		return ctrl.Result{}, nil
	case policy.Generation > d.Generation:
		// Evaluations of an older spec: its counts restarted.
		w.Log.Policies.Written(name, unwritten)
		return ctrl.Result{}, nil
	case policy.Generation < d.Generation:
		// The scheduler saw a newer spec than this cache yet.
		return ctrl.Result{RequeueAfter: registryLag}, nil
	}
	now := w.now()
	if !force {
		last := w.lastWrite[name]
		if a := policy.Status.Audit; a != nil && a.LastUpdateTime != nil && a.LastUpdateTime.After(last) {
			last = a.LastUpdateTime.Time // written by a previous leader
		}
		if wait := untilNextWrite(last, w.interval(), now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	patch := client.MergeFromWithOptions(policy.DeepCopy(), client.MergeFromWithOptimisticLock{})
	policy.Status.Audit = d.Apply(policy.Status.Audit, now)
	if err := w.Client.Status().Patch(ctx, policy, patch); err != nil {
		// The evidence stays in the cache for the next try.
		if apierrors.IsConflict(err) {
			// A newer version exists (another writer's, not yet in the
			// cache): nothing was written.
			ctrl.LoggerFrom(ctx).WithName("audit-status").V(1).Info("SchedulingPolicy changed while its audit summary was written; trying again", "policy", name)
			return ctrl.Result{RequeueAfter: registryLag}, nil
		}
		return ctrl.Result{}, err
	}
	if w.lastWrite == nil {
		w.lastWrite = map[string]time.Time{}
	}
	w.lastWrite[name] = now
	if w.Log.Policies.Written(name, unwritten) {
		return ctrl.Result{RequeueAfter: w.interval()}, nil
	}
	return ctrl.Result{}, nil
}
