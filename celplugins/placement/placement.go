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
	"sync"

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
	// tableMu makes finding or writing a group cycle's scoreTable one
	// step; only the calls that find no table yet take it, never per
	// node.
	tableMu sync.Mutex
}

var (
	_ fwk.PlacementGeneratePlugin  = &Placement{}
	_ fwk.PlacementScorePlugin     = &Placement{}
	_ fwk.PlacementScoreExtensions = &Placement{}
	_ fwk.EnqueueExtensions        = &Placement{}
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

// ScorePlacement implements fwk.PlacementScorePlugin: it evaluates the
// placement scores of the policies matching the group's pods on the
// placement, with the nodes kube-scheduler proposed for them, and keeps
// their raw values in the group cycle's scoreTable; it returns the row it
// wrote, which NormalizePlacementScore turns into the placement's score
// once every placement has been scored. An enforced policy's error under
// failurePolicy Fail fails the group's cycle (as a score rule's fails a
// pod's).
//
// kube-scheduler scores the placements in parallel, one call per
// placement, with the placement's cycle state, whose group cycle state
// (the one NormalizePlacementScore gets) holds the table.
func (pl *Placement) ScorePlacement(ctx context.Context, state fwk.PlacementCycleState, group fwk.PodGroupInfo, assignments *fwk.PodGroupAssignments) (int64, *fwk.Status) {
	t, err := pl.table(ctx, state.GetPodGroupSchedulingCycle(), group)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if len(t.rules) == 0 {
		return 0, nil
	}
	assigned := make([]string, len(assignments.ProposedAssignments))
	for i, a := range assignments.ProposedAssignments {
		assigned[i] = a.GetNodeName()
	}
	in, err := placementInput(assignments.Placement, group, assigned)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	raw := make([]float64, len(t.rules))
	offset := 0
	for _, p := range t.policies {
		values := raw[offset : offset+p.NumPlacementScores()]
		offset += len(values)
		d := p.PlacementScore(ctx, in, values)
		pl.rt.Report.NoteErrors(ctx, 0, &d, t.pod, "")
		if d.Acts() {
			return 0, celplugins.Status(&d, fmt.Sprintf("pod group %s/%s, placement %s: %s", group.GetNamespace(), group.GetName(), in.Name, d.String()))
		}
	}
	return t.add(raw), nil
}

// PlacementScoreExtensions implements fwk.PlacementScorePlugin.
func (pl *Placement) PlacementScoreExtensions() fwk.PlacementScoreExtensions { return pl }

// NormalizePlacementScore implements fwk.PlacementScoreExtensions: each
// placement score is normalized across the placements scored (its
// normalization, as a score rule's across the nodes) and a placement's
// score is the weighted mean, 0..100, of the enforced policies' rules; 0
// on every placement when no enforced policy has any, so the other
// placement scores decide. Audit policies' rules are combined too, and the
// placement they would have preferred is logged, but they change no
// score.
func (pl *Placement) NormalizePlacementScore(ctx context.Context, state fwk.PodGroupCycleState, group fwk.PodGroupInfo, scores []fwk.PlacementScore) *fwk.Status {
	if len(scores) == 0 {
		return nil // no ScorePlacement call, so no table
	}
	t, err := celplugins.ReadState[*scoreTable](state, stateKey)
	if err != nil {
		return fwk.AsStatus(err)
	}
	var rows [][]float64
	if len(t.rules) > 0 {
		if rows, err = t.rowsOf(scores); err != nil {
			return fwk.AsStatus(fmt.Errorf("pod group %s/%s: %w", group.GetNamespace(), group.GetName(), err))
		}
	}
	var b engine.CombineBuffers
	enforced := engine.CombineRows(make([]int64, len(rows)), rows, t.rules, false, &b)
	for i := range scores {
		scores[i].Score = 0
		if enforced != nil {
			scores[i].Score = enforced[i]
		}
	}
	if logger := klog.FromContext(ctx).V(2); logger.Enabled() {
		if audit := engine.CombineRows(make([]int64, len(rows)), rows, t.rules, true, &b); audit != nil {
			best := 0
			for i, v := range audit {
				if v > audit[best] {
					best = i
				}
			}
			logger.Info("Audit placement scores would prefer a placement", "podGroup", klog.KRef(group.GetNamespace(), group.GetName()),
				"placement", scores[best].Placement.Name, "score", audit[best])
		}
	}
	return nil
}

// scoreTable holds a pod group cycle's raw placement scores: the policies
// with placement scores that match the group, matched once per cycle, and
// a row of their rules' raw values per placement scored. Key: stateKey in
// the group's PodGroupCycleState, so it lives as long as the group's
// cycle; bound: one row of len(rules) values per candidate placement.
// ScorePlacement creates it (Placement.table) and appends the rows under
// mu; NormalizePlacementScore reads them after every ScorePlacement of the
// cycle has returned.
type scoreTable struct {
	policies []*engine.CompiledPolicy
	// rules are the policies' placement scores, in order: a row holds
	// their raw values.
	rules []engine.WeightedRule
	// pod is the group's member whose errors are reported.
	pod *corev1.Pod

	mu   sync.Mutex
	rows [][]float64
}

// stateKey is the scoreTable's key in the group's cycle state.
const stateKey fwk.StateKey = Name + "/scores"

// Clone implements fwk.StateData. The group's cycle state is not cloned
// while the placements are scored.
func (t *scoreTable) Clone() fwk.StateData { return t }

// add appends a placement's raw values and returns their row.
func (t *scoreTable) add(raw []float64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, raw)
	return int64(len(t.rows) - 1)
}

// rowsOf returns the raw values of the placements scored, from the rows
// that ScorePlacement returned: each must be a row of the table, and no
// row the score of two placements.
func (t *scoreTable) rowsOf(scores []fwk.PlacementScore) ([][]float64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows := make([][]float64, len(scores))
	seen := make([]bool, len(t.rows))
	for i, s := range scores {
		if s.Score < 0 || s.Score >= int64(len(t.rows)) || seen[s.Score] {
			return nil, fmt.Errorf("placement %s: its raw score (row %d of %d) was not written by ScorePlacement in this cycle", s.Placement.Name, s.Score, len(t.rows))
		}
		seen[s.Score] = true
		rows[i] = t.rows[s.Score]
	}
	return rows, nil
}

// table returns the group cycle's scoreTable, matching the policies and
// writing it on the first call of the cycle. The parallel calls of one
// cycle wait for the first: tableMu makes reading and writing the key one
// step (a cycle state has no load-or-store).
func (pl *Placement) table(ctx context.Context, state fwk.PodGroupCycleState, group fwk.PodGroupInfo) (*scoreTable, error) {
	if state == nil {
		return nil, fmt.Errorf("pod group %s/%s: ScorePlacement without a pod group cycle state", group.GetNamespace(), group.GetName())
	}
	if t, err := celplugins.ReadState[*scoreTable](state, stateKey); err == nil {
		return t, nil
	}
	pl.tableMu.Lock()
	defer pl.tableMu.Unlock()
	if t, err := celplugins.ReadState[*scoreTable](state, stateKey); err == nil {
		return t, nil
	}
	policies, err := pl.matching(ctx, group, (*engine.CompiledPolicy).HasPlacementScores)
	if err != nil {
		return nil, err
	}
	t := &scoreTable{policies: policies}
	for _, p := range policies {
		t.rules = append(t.rules, p.PlacementScoreRules()...)
	}
	if len(policies) > 0 {
		t.pod = group.GetUnscheduledPods()[0]
	}
	state.Write(stateKey, t)
	return t, nil
}

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
