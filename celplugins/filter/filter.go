// Package filter is the kube-scheduler Filter plugin of celsched: PreFilter
// matches the SchedulingPolicies against the pod once per cycle, Filter
// evaluates their filters on each node.
package filter

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/metrics"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "CELFilter"

// Filter evaluates the filters of the SchedulingPolicies that match a pod.
type Filter struct {
	rt       *celplugins.Runtime
	recorder events.EventRecorder
	args     celplugins.Args
	// why explains rejections in events (Args.ExplainRejections); nil
	// when off.
	why *engine.Why
	// cycle is the Cycle PreFilter last wrote, for Filter to find
	// without reading the CycleState per node.
	cycle celplugins.LastState[*celplugins.Cycle]
	// narrowed are the nodes the filters admit, per class of pods
	// (narrow.go; newNarrowed says how it is kept).
	narrowed *lru.Cache
	// narrowedPods are the pods whose last cycle PreFilter narrowed
	// (narrow.go; newNarrowedPods says how it is kept).
	narrowedPods *lru.Cache
	// percentage is the profile's percentageOfNodesToScore, if it has one
	// (worthNarrowing).
	percentage *int32
}

var (
	_ fwk.PreFilterPlugin   = &Filter{}
	_ fwk.FilterPlugin      = &Filter{}
	_ fwk.PostBindPlugin    = &Filter{}
	_ fwk.ReservePlugin     = &Filter{}
	_ fwk.EnqueueExtensions = &Filter{}
	_ fwk.SignPlugin        = &Filter{}
)

// New builds the plugin; use celplugins.Factory(rt, New) to register it.
func New(_ context.Context, obj runtime.Object, h fwk.Handle, rt *celplugins.Runtime) (*Filter, error) {
	args, err := celplugins.DecodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if err := rt.Attach(h); err != nil {
		return nil, err
	}
	pl := &Filter{rt: rt, recorder: h.EventRecorder(), args: args, narrowed: newNarrowed(), narrowedPods: newNarrowedPods()}
	// kube-scheduler's framework, the handle, has its profile's percentage.
	if f, ok := h.(interface{ PercentageOfNodesToScore() *int32 }); ok {
		pl.percentage = f.PercentageOfNodesToScore()
	}
	if args.ExplainRejections {
		pl.why = &engine.Why{}
		if r, ok := rt.Inputs.Policies.(interface{ ExplainRules() }); ok {
			r.ExplainRules()
		}
	}
	return pl, nil
}

// Name implements fwk.Plugin.
func (pl *Filter) Name() string { return Name }

// PreFilter matches the policies and converts the pod once for the cycle.
// Pods that no policy with filters matches skip Filter entirely; for the
// others it may name the nodes the filters admit (narrow).
func (pl *Filter) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	c, err := pl.rt.Prepare(ctx, pod, pl.args.EvaluationBudget.Duration)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	c.Attach(celplugins.ReadRecord(state))
	state.Write(celplugins.StateKey, c)
	pl.cycle.Remember(state, c)
	if c.Rejection != nil {
		// No node can help, and neither can preemption.
		return nil, celplugins.Status(c.Rejection, c.Rejection.String())
	}
	if len(c.Filters) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return pl.narrow(c, pod, nodes), nil
}

// SignPod implements fwk.SignPlugin (see celplugins.Inputs.SignPod).
func (pl *Filter) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return pl.rt.Inputs.SignPod(ctx, pod)
}

// PreFilterExtensions implements fwk.PreFilterPlugin; the state does not
// depend on other pods.
func (pl *Filter) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter evaluates the matching policies' filters on one node. An enforced
// rule that is false rejects the node; an Audit one is recorded for
// PostBind.
func (pl *Filter) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	c, ok := pl.cycle.Get(state)
	if !ok {
		if c = celplugins.ReadCycle(state); c == nil {
			return fwk.AsStatus(fmt.Errorf("reading %s: PreFilter did not run", celplugins.StateKey))
		}
	}
	node := nodeInfo.Node()
	in, err := pl.rt.Inputs.Converter.NodeInput(node, nodeInfo.GetGeneration(), nodeInfo, celplugins.NodeInfoFrom)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if c.Record != nil {
		return pl.recorded(ctx, c, pod, &in)
	}
	if o := c.FilterList.Cached(c.Pod, &in); o != nil {
		// Another pod that the same policies apply to, and that reads the
		// same of the pod, was filtered on this node version (and
		// NodeInfo generation): replay its outcome.
		passing := 0
		for j := range o.Decisions {
			d := &o.Decisions[j]
			if status, done := pl.decided(ctx, c, pod, &in, &passing, d.Index, &d.Decision); done {
				return status
			}
		}
		c.FilterTally.Passed(passing, len(c.Filters))
		return nil
	}
	var outcome engine.ListOutcome
	// passing is the first of the policies that passed plainly on the
	// node since the last that did not: they are counted as a run.
	passing := 0
	timed := c.FilterTally.Timed()
	var start time.Time
	for i, p := range c.Filters {
		if timed {
			start = time.Now()
		}
		d := p.Filter(c.Ctx, c.Pod, &in)
		if timed {
			c.FilterTally.Time(i, time.Since(start))
		}
		if metrics.Plain(&d) {
			continue
		}
		if c.FilterList.Kept() {
			outcome.Decisions = append(outcome.Decisions, engine.IndexedDecision{Index: i, Decision: d})
		}
		if status, done := pl.decided(ctx, c, pod, &in, &passing, i, &d); done {
			if ctx.Err() == nil {
				c.FilterList.Remember(c.Pod, &in, outcome)
			}
			return status
		}
	}
	c.FilterTally.Passed(passing, len(c.Filters))
	c.FilterList.Remember(c.Pod, &in, outcome)
	return nil
}

// recorded is Filter in a cycle that records (a dry run's): every policy
// is evaluated on the node and recorded (Cycle.FilterNode), and the node's
// status is the first that ends its filtering, as Filter's.
func (pl *Filter) recorded(ctx context.Context, c *celplugins.Cycle, pod *corev1.Pod, in *engine.NodeInput) *fwk.Status {
	passing := 0
	for i, o := range c.FilterNode(ctx, in) {
		if metrics.Plain(&o.Decision) {
			continue
		}
		if status, done := pl.decided(ctx, c, pod, in, &passing, i, &o.Decision); done {
			return status
		}
	}
	c.FilterTally.Passed(passing, len(c.Filters))
	return nil
}

// decided handles a decision of policy i on a node that is not a plain
// pass: it counts it, records its errors and an Audit policy's would-be
// rejection, and says whether it ends the node's filtering (an enforced
// rejection or error), with the status. It does not change d, which may
// be a remembered outcome's that every pod of the class reads.
func (pl *Filter) decided(ctx context.Context, c *celplugins.Cycle, pod *corev1.Pod, in *engine.NodeInput, passing *int, i int, d *engine.Decision) (*fwk.Status, bool) {
	node := in.Node
	c.FilterTally.Passed(*passing, i)
	c.FilterTally.Add(i, d)
	*passing = i + 1
	pl.rt.Report.NoteErrors(ctx, c.Budget, d, pod, node.Name)
	if len(d.Ignored) > 0 {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("Ignoring filter errors (failurePolicy Ignore)", "pod", klog.KObj(pod), "node", klog.KObj(node), "policy", d.Policy.Name, "errs", d.Ignored)
		}
	}
	switch {
	case d.Acts():
		if ctx.Err() != nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("filtering cancelled: %v", context.Cause(ctx))), true
		}
		if pl.why != nil && d.Verdict == engine.Reject && c.ExplainOnce() {
			pl.explain(ctx, c, pod, in, d)
		}
		return celplugins.Status(d, c.Message(i, d)), true
	case d.WouldAct():
		// Guarded: the arguments (d.String() above all) would be built
		// per node whatever the verbosity.
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("SchedulingPolicy would reject the node (Audit)", "pod", klog.KObj(pod), "node", klog.KObj(node), "policy", d.Policy.Name, "reason", d.String())
		}
		c.DenyAudit(node.Name, d)
	}
	return nil, false
}

// explain records on the pod why a rule rejected the node: its
// sub-expressions' values (Args.ExplainRejections).
func (pl *Filter) explain(ctx context.Context, c *celplugins.Cycle, pod *corev1.Pod, in *engine.NodeInput, d *engine.Decision) {
	steps, err := pl.why.Filter(c.Ctx, d.Policy, c.Pod, in, d.Rule)
	if err != nil || len(steps) == 0 {
		klog.FromContext(ctx).V(4).Info("No explanation of a rejection", "pod", klog.KObj(pod), "policy", d.Policy.Name, "rule", d.Rule, "err", err)
		return
	}
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.String()
	}
	note := fmt.Sprintf("node %s, SchedulingPolicy %s, rule %s: %s", in.Node.Name, d.Policy.Name, d.Rule, strings.Join(parts, "; "))
	pl.recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonRejectionDetail, "Filter", "%s", engine.Truncate(note, maxEventNote))
}

// ReasonRejectionDetail is the reason of the events that explain a
// rejection (Args.ExplainRejections).
const ReasonRejectionDetail = "RejectionDetail"

// maxEventNote is the API server's bound on an event's note.
const maxEventNote = 1024

// Reserve implements fwk.ReservePlugin: the cycle's filters are done, and
// their counts go to celsched_policy_evaluations_total.
func (pl *Filter) Reserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) *fwk.Status {
	if c := celplugins.ReadCycle(state); c != nil {
		c.FilterTally.Flush()
	}
	if pl.narrowedPods != nil {
		pl.narrowedPods.Remove(pod.UID) // placed
	}
	return nil
}

// Unreserve implements fwk.ReservePlugin.
func (pl *Filter) Unreserve(context.Context, fwk.CycleState, *corev1.Pod, string) {}

// PostBind reports what the matching Audit policies would have done with
// the placement.
func (pl *Filter) PostBind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) {
	if c := celplugins.ReadCycle(state); c != nil {
		pl.rt.Report.ReportAudit(ctx, c, pl.recorder, pod, nodeName)
	}
}

// EventsToRegister implements fwk.EnqueueExtensions: a pod rejected by a
// policy filter is retried when the policy changes, when a node may pass
// now, when the pods on a node change (for nodeInfo rules and the members
// of its group), when its PodGroup changes, and when the labels of the pod
// or its namespace change; and a pod whose narrowed cycle found no node
// once kube-scheduler has written so (narrow.go).
func (pl *Filter) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		pl.narrowedEvents(),
		pl.rt.Requeue.PolicyEvents(),
		pl.rt.Requeue.NamespaceEvents(),
		pl.rt.Requeue.PodGroupEvents(),
		{
			Event:          fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint | fwk.UpdateNodeAllocatable | fwk.UpdateNodeAnnotation},
			QueueingHintFn: pl.rt.Requeue.NodeHint,
		},
		{
			Event:          fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add | fwk.Delete | fwk.UpdatePodLabel | fwk.UpdatePodScaleDown},
			QueueingHintFn: pl.rt.Requeue.PodHint,
		},
	}, nil
}
