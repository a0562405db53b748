package celplugins

import (
	"context"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/engine/metrics"
)

// Reporter is what the CEL plugins report about their decisions:
// celsched_policy_evaluations_total (Count, Tally), each policy's last
// evaluation error and the rules a cycle's time budget cut off (for the
// policies' status), and what Audit policies would have done (ReportAudit).
// The scheduling cycle reports; queueing hints never do.
type Reporter struct {
	// AuditLog collects what Audit policies would have done, for their
	// status.
	AuditLog *audit.Log
	// Slow keeps the rules that a cycle's time budget cut off, for the
	// policies' status.
	Slow *metrics.SlowLog
	// Errors keeps each policy's last evaluation error, for its status
	// (pods see only CEL's own error texts).
	Errors *metrics.ErrorLog
	// Notify, when set, is told the name of a policy whose status has news
	// (a rule cut off by the time budget). It must not block.
	Notify func(name string)
	// Dry says the decisions are a dry run's (simulate/verdict: the
	// CLI, the rollout gate), not the scheduler's: nothing is counted in
	// the metrics, and no error, cut-off or audited rejection is recorded
	// for status or reports.
	Dry bool
	// RefusedPlacements, when set, is told the candidate placements of a
	// pod group that placement filters refused in a cycle (a dry run's
	// explanation). It must not block.
	RefusedPlacements func(group ktypes.NamespacedName, refusals []RefusedPlacement)

	counters metrics.Counters
	// tallies are the current cycle's tallies of filter and score
	// decisions (Tally).
	tallies [2]atomic.Pointer[metrics.Tally]
}

// RefusedPlacement is a candidate placement of a pod group that a
// placement filter refused.
type RefusedPlacement struct {
	// Placement is the placement's name: its topology domain (the value
	// of the group's topology constraint key), or "(all nodes)".
	Placement string `json:"placement"`
	// Refusal names the policy and rule, with the rule's message
	// (engine.PlacementRejection).
	Refusal string `json:"refusal"`
	// Policy is the SchedulingPolicy that refused it, and Rule the rule
	// of its spec.placement.filters (empty when the policy does not
	// compile): Refusal's names, for a report to count by.
	Policy string `json:"policy"`
	Rule   string `json:"rule,omitempty"`
}

// NoteErrors records the errors of a decision of the cycle: the last one
// per policy for its status (EvaluationError), and a rule that the cycle's
// time budget cut off while it ran (the slow rule) in
// celsched_policy_time_budget_exceeded_total, the log and the policy's
// status (Slow).
func (r *Reporter) NoteErrors(ctx context.Context, budget time.Duration, d *engine.Decision, pod *corev1.Pod, node string) {
	if r.Dry || (d.Err == nil && len(d.Ignored) == 0) {
		return
	}
	if r.Errors.Record(d, time.Now()) && r.Notify != nil {
		klog.FromContext(ctx).V(2).Info("A SchedulingPolicy rule failed", "pod", klog.KObj(pod), "node", node, "policy", d.Policy.Name, "err", d.Err, "ignored", d.Ignored)
		r.Notify(d.Policy.Name)
	}
	err := metrics.CutOff(d)
	if err == nil {
		return
	}
	klog.FromContext(ctx).Info("A SchedulingPolicy rule was cut off by the cycle's CEL time budget", "pod", klog.KObj(pod), "node", node,
		"policy", d.Policy.Name, "budget", budget, "err", err)
	r.Slow.Record(d, err, pod.Namespace+"/"+pod.Name, node, budget, time.Now())
	if r.Notify != nil {
		r.Notify(d.Policy.Name)
	}
}

// Matched reports what matching the policies against the pod for cycle c
// saw: the errors of the policies skipped under failurePolicy Ignore and of
// those that apply, and the Audit policies that would have rejected the
// pod.
func (r *Reporter) Matched(ctx context.Context, c *Cycle, pod *corev1.Pod) {
	if r.Dry {
		return
	}
	logger := klog.FromContext(ctx)
	for i := range c.ignored {
		m := &c.ignored[i]
		r.NoteErrors(ctx, c.Budget, &m.Decision, pod, "")
		logger.V(4).Info("SchedulingPolicy skipped: its match failed (failurePolicy Ignore)", "pod", klog.KObj(pod), "policy", m.Decision.Policy.Name, "err", m.Decision.Ignored[0])
	}
	for i := range c.matched {
		d := &c.matched[i].Decision
		metrics.CountEnforcement(d.Policy)
		r.NoteErrors(ctx, c.Budget, d, pod, "")
		if v := logger.V(2); d.WouldAct() && v.Enabled() {
			v.Info("SchedulingPolicy would reject the pod (Audit)", "pod", klog.KObj(pod), "policy", d.Policy.Name, "reason", d.String())
		}
	}
}

// Count counts a decision's rule evaluations in celsched_policy_evaluations_total.
func (r *Reporter) Count(d *engine.Decision) {
	if !r.Dry {
		r.counters.Count(d)
	}
}

// Tally returns the tally of a new cycle's decisions at point (PointFilter
// or PointScore) for policies, and flushes the previous cycle's: the
// plugins flush a cycle's tally when its evaluations are done (Reserve,
// NormalizeScore), and a cycle that ended otherwise (no node fits, an
// error) is flushed here. kube-scheduler runs one scheduling cycle at a
// time, so the previous cycle's evaluations are done.
// A dry run's Tally is nil: it counts nothing.
func (r *Reporter) Tally(point engine.Point, policies []*engine.CompiledPolicy) *metrics.Tally {
	if r.Dry {
		return nil
	}
	t := r.counters.Tally(point, policies)
	i := 0
	if point == engine.PointScore {
		i = 1
	}
	r.tallies[i].Swap(t).Flush()
	return t
}
