package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/simulate/verdict"
)

// PendingPods answers, for a rollout's gate, what a policy would do to the
// pending pods of one of its waves once the wave is enforced: the pods the
// scheduler has not bound (no scheduling cycle reports on them, as
// ReportAudit does at bind) are evaluated by the one evaluator, over the
// scheduler's own informers, policies, converter and params, outside any
// scheduling cycle.
type PendingPods struct {
	// Live is the scheduler's informers and inputs; the pods of its
	// configuration's profiles are counted, each with its profile's
	// framework.
	Live
}

// WouldStrand counts the pending pods of wave (an index in
// spec.rollout.waves) of the policy, compiled at generation: the pods of
// the scheduler's profiles without a node, not being deleted or
// terminated, whose namespace falls in the wave. A pod counts when the
// framework of its profile finds it a node with the policies as they are
// (the wave audited) and none with the wave enforced (held, rejected, or
// every node refused): the wave is what would keep it pending. A pod no
// node fits either way counts when, capacity aside (verdict.WithoutCapacity), it
// has nodes now and none with the wave enforced: it waits for room on
// nodes the wave refuses, and once the wave is enforced it could never
// run. A pod no node would fit even with room is not counted. Each evaluation has its profile's
// time budget, as a scheduling cycle; a rule cut off under enforcement
// rejects, so it counts. Pods of one class (equal in everything but their
// identity, see verdict.Class) are evaluated once. It fails when the informers
// have not synced, the scheduler has not compiled that generation of
// the policy, or the cluster cannot be listed or evaluated: a gate is
// never passed on a count that could not be made.
func (pp *PendingPods) WouldStrand(ctx context.Context, policy string, generation int64, wave int) (audit.Stranded, error) {
	var out audit.Stranded
	if !pp.HasSynced() {
		return out, fmt.Errorf("the scheduler's informers have not synced yet")
	}
	snapshot := pp.Inputs.Policies.Snapshot()
	compiled := snapshot.Get(policy)
	if compiled == nil || compiled.Generation != generation {
		return out, fmt.Errorf("the scheduler has not compiled generation %d of SchedulingPolicy %s yet", generation, policy)
	}
	pods, err := pp.Pods.List(labels.Everything())
	if err != nil {
		return out, fmt.Errorf("listing pods: %w", err)
	}
	profiles := make([]string, len(pp.Config.Profiles))
	for i, p := range pp.Config.Profiles {
		profiles[i] = p.SchedulerName
	}
	c := &count{pp: pp, snapshot: snapshot, enforced: snapshot.With(compiled.WithWaveEnforced(wave)), pods: pods, classes: map[string]bool{}}
	defer c.close()
	for _, pod := range pods {
		if celplugins.ProfilePod(pod, profiles) != celplugins.PodPending || !pp.inWave(snapshot, pod, policy, wave) {
			continue
		}
		// The cluster and its evaluators, once: without them nothing
		// can be counted, and the count fails (a pod's own error below
		// only leaves that pod out).
		if err := c.evaluators(ctx); err != nil {
			return out, err
		}
		stranded, err := c.strands(ctx, pod)
		if err != nil {
			if ctx.Err() != nil {
				return out, context.Cause(ctx)
			}
			logf.FromContext(ctx).V(2).Info("Not evaluating a pending pod for a rollout", "pod", klog(pod), "policy", policy, "err", err)
			continue
		}
		if stranded {
			out.Count++
			out.Pods = append(out.Pods, pod.Namespace+"/"+pod.Name)
		}
	}
	slices.Sort(out.Pods)
	if len(out.Pods) > audit.MaxStrandedNames {
		out.Pods = out.Pods[:audit.MaxStrandedNames]
	}
	return out, ctx.Err()
}

// inWave says whether the policy (of the count's snapshot) applies to the
// pod with the enforcement of the wave (the wave selects the pod's
// namespace, and no override does first), as the scheduler's match
// decides it.
func (pp *PendingPods) inWave(snapshot *engine.Snapshot, pod *corev1.Pod, policy string, wave int) bool {
	in, err := pp.Inputs.PodInput(pod)
	if err != nil {
		return false
	}
	p := snapshot.Get(policy)
	return p != nil && p.ForNamespace(in.Namespace).Wave() == wave
}

// count is one count of a wave's pending pods: the cluster and the two
// evaluators (the policies as they are; the wave enforced), taken from
// the Live's Simulator when first needed, and the answer of each class of
// pods.
type count struct {
	pp                 *PendingPods
	snapshot, enforced *engine.Snapshot
	pods               []*corev1.Pod
	// session holds the Simulator's Evaluators for the count (nil until
	// first needed).
	session   *verdict.Session
	cluster   *verdict.Cluster
	now, next *verdict.Evaluator
	// roomyNow and roomyNext are now and next with capacity aside
	// (verdict.WithoutCapacity), taken when a pod has no node either way.
	roomyNow, roomyNext *verdict.Evaluator
	classes             map[string]bool
}

// The Simulator's slots of a count.
var (
	slotNow       = verdict.Slot{Name: "now"}
	slotNext      = verdict.Slot{Name: "wave-enforced"}
	slotRoomyNow  = verdict.Slot{Name: "now", WithoutCapacity: true}
	slotRoomyNext = verdict.Slot{Name: "wave-enforced", WithoutCapacity: true}
)

// evaluators builds the cluster from the informers, and takes the
// evaluators.
func (c *count) evaluators(ctx context.Context) error {
	if c.now != nil {
		return nil
	}
	cluster, err := c.pp.cluster(c.pods)
	if err != nil {
		return err
	}
	if c.session == nil {
		c.session = c.pp.Simulator.Session()
	}
	c.cluster = cluster
	policies := verdict.Policies{Snapshot: c.snapshot, Params: c.pp.Inputs.Params, Converter: c.pp.Inputs.Converter}
	if c.now, err = c.session.Evaluator(ctx, slotNow, cluster, policies, c.pp.Config); err != nil {
		return err
	}
	policies.Snapshot = c.enforced
	if c.next, err = c.session.Evaluator(ctx, slotNext, cluster, policies, c.pp.Config); err != nil {
		c.now = nil
		return err
	}
	return nil
}

func (c *count) close() {
	if c.session != nil {
		c.session.Release()
	}
}

// strandedAsideCapacity says whether the pod has a node with the
// policies as they are and none with the wave enforced, when nodes had
// room for it: the evaluators of the profiles without NodeResourcesFit's
// filter, taken the first time a pod needs them.
func (c *count) strandedAsideCapacity(ctx context.Context, pod *corev1.Pod) (bool, error) {
	if c.roomyNow == nil {
		policies := verdict.Policies{Snapshot: c.snapshot, Params: c.pp.Inputs.Params, Converter: c.pp.Inputs.Converter}
		now, err := c.session.Evaluator(ctx, slotRoomyNow, c.cluster, policies, c.pp.Config)
		if err != nil {
			return false, err
		}
		policies.Snapshot = c.enforced
		next, err := c.session.Evaluator(ctx, slotRoomyNext, c.cluster, policies, c.pp.Config)
		if err != nil {
			return false, err
		}
		c.roomyNow, c.roomyNext = now, next
	}
	next, err := c.roomyNext.AnyFeasible(ctx, pod)
	if err != nil || len(next.Feasible) > 0 {
		return false, err
	}
	now, err := c.roomyNow.AnyFeasible(ctx, pod)
	if err != nil {
		return false, err
	}
	return len(now.Feasible) > 0, nil
}

// strands says whether enforcing the wave is what leaves the pod without
// a node: the answer of its class when an earlier pod of the class had
// one. The count's evaluators are built (evaluators).
func (c *count) strands(ctx context.Context, pod *corev1.Pod) (bool, error) {
	class, classed := verdict.Class(c.snapshot, pod)
	if stranded, ok := c.classes[class]; classed && ok {
		return stranded, nil
	}
	next, err := c.next.AnyFeasible(ctx, pod)
	if err != nil {
		return false, err
	}
	stranded := false
	if len(next.Feasible) == 0 {
		now, err := c.now.AnyFeasible(ctx, pod)
		if err != nil {
			return false, err
		}
		stranded = len(now.Feasible) > 0
		if !stranded {
			// No node now either: pending for capacity, perhaps, on nodes
			// the wave refuses. With capacity aside (the same profiles
			// without NodeResourcesFit's filter), a pod that has nodes
			// now and none with the wave enforced could never run once
			// it is, even when the room frees.
			if stranded, err = c.strandedAsideCapacity(ctx, pod); err != nil {
				return false, err
			}
		}
	}
	if classed {
		c.classes[class] = stranded
	}
	return stranded, nil
}
