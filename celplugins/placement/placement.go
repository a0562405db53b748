// Package placement is the kube-scheduler PlacementGenerate and
// PlacementScore plugin of celsched, CELPlacement: it generates a pod
// group's candidate placements as kube-scheduler's
// TopologyPlacementGenerator does (it runs that plugin), then keeps those
// that the placement filters of the policies matching the group's pods
// accept; and it scores the placements the group fits with those
// policies' placement scores.
//
// kube-scheduler runs one PlacementGenerate plugin per profile and has no
// placement-filter extension point, so the policies' placement filters
// run here, in place of TopologyPlacementGenerator. One plugin may serve
// several extension points (as NodeResourcesFit is a Filter, Score and
// PlacementScore plugin), so a profile that enables CELPlacement in
// multiPoint runs both.
package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/topologyaware"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "CELPlacement"

// Placement generates a pod group's placements and filters them with the
// matching policies' placement filters, and scores them with their
// placement scores.
type Placement struct {
	rt *celplugins.Runtime
	// generator is kube-scheduler's TopologyPlacementGenerator: the
	// candidates come from it, one per domain of the group's topology
	// constraint (or every node, without one).
	generator fwk.PlacementGeneratePlugin
}

var (
	_ fwk.PlacementGeneratePlugin = &Placement{}
	_ fwk.PlacementScorePlugin    = &Placement{}
	_ fwk.EnqueueExtensions       = &Placement{}
)

// New builds the plugin; use celplugins.Factory(rt, New) to register it.
// The generator gets the features kube-scheduler gives its own plugins,
// from the process's feature gates (set before the scheduler is built,
// celplugins/featuregates).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle, rt *celplugins.Runtime) (*Placement, error) {
	if err := rt.Attach(h); err != nil {
		return nil, err
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	generator, err := topologyaware.New(ctx, obj, h, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &Placement{rt: rt, generator: generator}, nil
}

// Name implements fwk.Plugin.
func (pl *Placement) Name() string { return Name }

// GeneratePlacements implements fwk.PlacementGeneratePlugin: the
// generator's placements that every enforced policy matching the group's
// pods accepts. When it refuses them all, the status names a policy and
// rule that refused each (kube-scheduler gives it to the group's pods).
func (pl *Placement) GeneratePlacements(ctx context.Context, state fwk.PodGroupCycleState, group fwk.PodGroupInfo, parent *fwk.Placement) (*fwk.GeneratePlacementsResult, *fwk.Status) {
	result, status := pl.generator.GeneratePlacements(ctx, state, group, parent)
	if !status.IsSuccess() || result == nil || len(result.Placements) == 0 {
		return result, status
	}
	policies, err := pl.matching(ctx, group, (*engine.CompiledPolicy).HasPlacementFilters)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if len(policies) == 0 {
		return result, nil
	}
	logger := klog.FromContext(ctx)
	kept := make([]*fwk.Placement, 0, len(result.Placements))
	var refusals []string
	var refused []celplugins.RefusedPlacement
	var refusal *engine.Decision
	for _, p := range result.Placements {
		in, err := placementInput(p, group, nil)
		if err != nil {
			return nil, fwk.AsStatus(err)
		}
		d := pl.decide(ctx, policies, in, group)
		if d == nil {
			kept = append(kept, p)
			continue
		}
		if refusal == nil {
			refusal = d
		}
		refusals = append(refusals, engine.PlacementRejection(in.Name, d))
		if pl.rt.Report.RefusedPlacements != nil {
			refused = append(refused, celplugins.RefusedPlacement{Placement: in.Name, Refusal: refusals[len(refusals)-1], Policy: d.Policy.Name, Rule: d.Rule})
		}
	}
	if len(refused) > 0 {
		pl.rt.Report.RefusedPlacements(ktypes.NamespacedName{Namespace: group.GetNamespace(), Name: group.GetName()}, refused)
	}
	if len(kept) > 0 {
		if len(refusals) > 0 {
			logger.V(4).Info("SchedulingPolicies refused placements of the pod group", "podGroup", klog.KRef(group.GetNamespace(), group.GetName()), "refused", refusals)
		}
		return &fwk.GeneratePlacementsResult{Placements: kept}, nil
	}
	// Sorted: the generator's order changes from one try to the next, and
	// a message that changes is a status write of every member per try.
	slices.Sort(refusals)
	msg := engine.Truncate(fmt.Sprintf("pod group %s/%s: no placement passes the SchedulingPolicies: %s", group.GetNamespace(), group.GetName(), strings.Join(refusals, "; ")), engine.MaxMessageLength)
	// No node of a refused placement can help, and neither can preemption
	// unless a rule failed (Error), which a retry may not repeat.
	if refusal.Verdict == engine.Error {
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
}

// matching returns the policies with placement rules of a kind (has says
// which policies have them) that apply to the group: those that match its
// first unscheduled member (Match, as for filters). A policy whose match
// fails is left to CELFilter, which rejects the pods (failurePolicy Fail)
// or skips it (Ignore).
func (pl *Placement) matching(ctx context.Context, group fwk.PodGroupInfo, has func(*engine.CompiledPolicy) bool) ([]*engine.CompiledPolicy, error) {
	pods := group.GetUnscheduledPods()
	if len(pods) == 0 {
		return nil, nil
	}
	snapshot := pl.rt.Inputs.Policies.Snapshot()
	if !slices.ContainsFunc(snapshot.Policies(), has) {
		return nil, nil
	}
	podIn, err := pl.rt.Inputs.PodInput(pods[0])
	if err != nil {
		return nil, err
	}
	var out []*engine.CompiledPolicy
	for _, m := range snapshot.Match(ctx, podIn, nil) {
		d := m.Decision
		if d.Verdict == engine.Pass && has(d.Policy) {
			out = append(out, d.Policy)
		}
	}
	return out, nil
}

// decide returns the first enforced decision that refuses the placement,
// nil when every policy accepts it. Audit policies' refusals and the errors
// are reported.
func (pl *Placement) decide(ctx context.Context, policies []*engine.CompiledPolicy, in *engine.PlacementInput, group fwk.PodGroupInfo) *engine.Decision {
	logger := klog.FromContext(ctx)
	var pod *corev1.Pod
	if pods := group.GetUnscheduledPods(); len(pods) > 0 {
		pod = pods[0]
	}
	for _, p := range policies {
		d := p.PlacementFilter(ctx, in)
		if pod != nil {
			pl.rt.Report.NoteErrors(ctx, 0, &d, pod, "")
		}
		switch {
		case d.Acts():
			return &d
		case d.WouldAct():
			logger.V(2).Info("SchedulingPolicy would refuse the placement (Audit)", "podGroup", klog.KRef(group.GetNamespace(), group.GetName()),
				"placement", in.Name, "policy", p.Name, "reason", engine.PlacementRejection(in.Name, &d))
		}
	}
	return nil
}

// ScorePlacement implements fwk.PlacementScorePlugin: the weighted mean
// (0..100) of the placement scores of the enforced policies matching the
// group's pods on the placement with the nodes kube-scheduler proposed for
// them; 0 on every placement when none has any, so the other placement
// scores decide. An enforced policy's error under failurePolicy Fail fails
// the group's cycle (as a score rule's fails a pod's); Audit policies'
// scores are logged and change nothing.
//
// kube-scheduler scores the placements in parallel and gives each call one
// placement, so each call matches the policies itself: a match per
// placement, beside a scheduling cycle per pod per placement.
func (pl *Placement) ScorePlacement(ctx context.Context, _ fwk.PlacementCycleState, group fwk.PodGroupInfo, assignments *fwk.PodGroupAssignments) (int64, *fwk.Status) {
	policies, err := pl.matching(ctx, group, (*engine.CompiledPolicy).HasPlacementScores)
	if err != nil || len(policies) == 0 {
		return 0, fwk.AsStatus(err)
	}
	assigned := make([]string, len(assignments.ProposedAssignments))
	for i, a := range assignments.ProposedAssignments {
		assigned[i] = a.GetNodeName()
	}
	in, err := placementInput(assignments.Placement, group, assigned)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	pod := group.GetUnscheduledPods()[0]
	enforced, audit := engine.NewScoreCombiner(1), engine.NewScoreCombiner(1)
	audited := false
	for _, p := range policies {
		scores := enforced
		if !p.Enforced() {
			scores, audited = audit, true
		}
		d := p.PlacementScore(ctx, in, scores)
		pl.rt.Report.NoteErrors(ctx, 0, &d, pod, "")
		if d.Acts() {
			return 0, celplugins.Status(&d, fmt.Sprintf("pod group %s/%s, placement %s: %s", group.GetNamespace(), group.GetName(), in.Name, d.String()))
		}
	}
	if logger := klog.FromContext(ctx).V(4); audited && logger.Enabled() {
		logger.Info("Audit placement scores", "podGroup", klog.KRef(group.GetNamespace(), group.GetName()), "placement", in.Name, "score", audit.Mean()[0])
	}
	return enforced.Mean()[0], nil
}

// PlacementScoreExtensions implements fwk.PlacementScorePlugin: the
// scores are in 0..100 already, and need no normalization.
func (pl *Placement) PlacementScoreExtensions() fwk.PlacementScoreExtensions { return nil }

// placementInput converts a placement and its group for the engine, with
// the nodes assigned to the group's pods (nil when none are yet).
func placementInput(p *fwk.Placement, group fwk.PodGroupInfo, assigned []string) (*engine.PlacementInput, error) {
	nodes := make([]*corev1.Node, 0, len(p.Nodes))
	for _, n := range p.Nodes {
		if node := n.Node(); node != nil {
			nodes = append(nodes, node)
		}
	}
	name := p.Name
	if name == "" {
		name = "(all nodes)"
	}
	return engine.NewPlacementInput(name, nodes, group.GetPodGroup(), group.GetNamespace(), group.GetName(), assigned)
}

// EventsToRegister implements fwk.EnqueueExtensions: the events that may
// change a refusal (a policy or its namespace, a node added or relabelled,
// a member's labels). kube-scheduler 1.37 records no rejecting plugin for a
// PlacementGenerate status, so it retries a refused group after its error
// backoff whatever the events; registering them keeps the plugin from
// defaulting to every event.
func (pl *Placement) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		pl.rt.Requeue.PolicyEvents(),
		pl.rt.Requeue.NamespaceEvents(),
		pl.rt.Requeue.PodLabelEvents(),
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}},
	}, nil
}
