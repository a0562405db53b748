package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
)

// DefaultAuditStatusInterval is how often the audit summaries are written.
const DefaultAuditStatusInterval = 10 * time.Second

// AuditStatusWriter writes what Audit policies would have done
// (audit.Log) into their status.audit: at most once per Interval
// per policy, adding to the stored counts with an optimistic lock, so no
// count is lost or counted twice across writes, retries and leader
// changes. It runs on the leader, where the scheduler binds pods.
type AuditStatusWriter struct {
	Client   client.Client
	Log      *audit.Log
	Interval time.Duration
}

// SetupWithManager adds the writer to the manager.
func (w *AuditStatusWriter) SetupWithManager(mgr ctrl.Manager) error {
	return mgr.Add(w)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *AuditStatusWriter) NeedLeaderElection() bool { return true }

// Start writes every Interval until ctx is done, then once more.
func (w *AuditStatusWriter) Start(ctx context.Context) error {
	every(ctx, w.Interval, DefaultAuditStatusInterval, w.Flush, true)
	return nil
}

// every runs step every interval (fallback when interval is not positive)
// until ctx is done; then once more when final is set, with a few seconds
// to finish (what the leader collected last is written before it steps
// down).
func every(ctx context.Context, interval, fallback time.Duration, step func(context.Context), final bool) {
	if interval <= 0 {
		interval = fallback
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			step(ctx)
		case <-ctx.Done():
			if final {
				last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				step(last)
				cancel()
			}
			return
		}
	}
}

// Flush writes what was collected; what cannot be written now is kept for
// the next time.
func (w *AuditStatusWriter) Flush(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("audit-status")
	for name, d := range w.Log.Take() {
		policy := &schedv1alpha1.SchedulingPolicy{}
		if err := w.Client.Get(ctx, client.ObjectKey{Name: name}, policy); err != nil {
			if !apierrors.IsNotFound(err) {
				log.Error(err, "Reading the policy for its audit summary", "policy", name)
				w.Log.Return(name, d)
			}
			continue
		}
		switch {
		case policy.Generation > d.Generation:
			continue // evaluations of an older spec: its counts restarted
		case policy.Generation < d.Generation:
			// The scheduler saw a newer spec than this cache yet.
			w.Log.Return(name, d)
			continue
		}
		patch := client.MergeFromWithOptions(policy.DeepCopy(), client.MergeFromWithOptimisticLock{})
		policy.Status.Audit = d.Apply(policy.Status.Audit, time.Now())
		if err := w.Client.Status().Patch(ctx, policy, patch); err != nil {
			log.V(2).Info("Writing the audit summary failed; retrying at the next interval", "policy", name, "err", err)
			w.Log.Return(name, d)
		}
	}
}
