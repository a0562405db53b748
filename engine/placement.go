package engine

// Placement rules: spec.placement.filters and spec.placement.scores, CEL
// expressions over one candidate placement of a pod group (placement) and
// the group itself (podGroup), compiled against their own environment and
// decided with the policy's failurePolicy and enforcement like every other
// rule.

import (
	"context"
	"fmt"
	"math"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

// Names of the CEL variables of placement rules.
const (
	PlacementVar = "placement"
	PodGroupVar  = "podGroup"
)

// PointPlacement is the placement filters, per candidate placement of a
// pod group; PointPlacementScore the placement scores, per candidate
// placement that the group fits.
const (
	PointPlacement Point = PointScore + 1 + iota
	PointPlacementScore
)

// MaxLabelsPerObject is the number of labels a node or a pod group is
// declared to have at most, for the cost estimates of placement rules (as
// nodeInfo's pods declare theirs).
const MaxLabelsPerObject = 64

// placementEnv is the environment of placement rules: the Kubernetes base
// environment with placement and podGroup, and nothing else (no pod, node,
// params or variables). It is immutable once built.
type placementEnv struct {
	envSet         *environment.EnvSet
	worst, typical *celcost.Estimator
}

// placementEnvs are the environments of the two kinds of placement rules.
// Filters run when the placements are generated, before any pod is
// proposed for one; scores run after kube-scheduler has proposed a node
// for each pod of the group in the placement, so their placement also has
// assignedNodes. A filter that reads placement.assignedNodes is a compile
// error (undefined field), not an empty list at runtime.
type placementEnvs struct {
	filters, scores *placementEnv
}

// newPlacementEnvs declares the environments of placement filters and
// scores over the base environment.
func newPlacementEnvs(base *environment.EnvSet) (*placementEnvs, error) {
	filters, err := newPlacementEnv(base, false)
	if err != nil {
		return nil, err
	}
	scores, err := newPlacementEnv(base, true)
	if err != nil {
		return nil, err
	}
	return &placementEnvs{filters: filters, scores: scores}, nil
}

// newPlacementEnv declares placement and podGroup over the base
// environment; with assigned, placement has assignedNodes: the node
// proposed for each pod, with the fields of placement.nodes, declared as
// long as placement.nodes at most for the estimates (a group may have more
// pods; placement rules are tracked at runtime).
func newPlacementEnv(base *environment.EnvSet, assigned bool) (*placementEnv, error) {
	labels := apiservercel.NewMapType(apiservercel.StringType, apiservercel.StringType, MaxLabelsPerObject)
	nodeMeta := apiservercel.NewObjectType("celsched.placement.node.metadata", map[string]*apiservercel.DeclField{
		"name":   apiservercel.NewDeclField("name", apiservercel.StringType, true, nil, nil),
		"labels": apiservercel.NewDeclField("labels", labels, true, nil, nil),
	})
	node := apiservercel.NewObjectType("celsched.placement.node", map[string]*apiservercel.DeclField{
		"metadata": apiservercel.NewDeclField("metadata", nodeMeta, true, nil, nil),
	})
	placementFields := map[string]*apiservercel.DeclField{
		"nodes": apiservercel.NewDeclField("nodes", apiservercel.NewListType(node, celcost.MaxPlacementNodes), true, nil, nil),
		"count": apiservercel.NewDeclField("count", apiservercel.IntType, true, nil, nil),
	}
	if assigned {
		placementFields["assignedNodes"] = apiservercel.NewDeclField("assignedNodes",
			apiservercel.NewListType(node, celcost.MaxPlacementNodes), true, nil, nil)
	}
	placement := apiservercel.NewObjectType("celsched.placement", placementFields)
	podGroup, groupTypes := podGroupDeclType(false)
	envSet, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(PlacementVar, placement.CelType()),
			cel.Variable(PodGroupVar, podGroup.CelType()),
		},
		DeclTypes: append([]*apiservercel.DeclType{nodeMeta, node, placement}, groupTypes...),
	})
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment of placement rules: %w", err)
	}
	roots := map[string]*apiservercel.DeclType{PlacementVar: placement, PodGroupVar: podGroup}
	return &placementEnv{
		envSet:  envSet,
		worst:   celcost.NewEstimator(roots, celcost.Vars{}, false),
		typical: celcost.NewEstimator(roots, celcost.Vars{}, true),
	}, nil
}

// placementRule is a compiled placement filter or score.
type placementRule struct {
	name string
	path *field.Path
	prg  celcost.Program
	// message is a filter's message; weight and normalization a score's.
	message       string
	weight        int32
	normalization schedv1alpha1.ScoreNormalization
}

// HasPlacementFilters says whether the policy has placement filters.
func (p *Program) HasPlacementFilters() bool { return len(p.placementFilters) > 0 }

// HasPlacementScores says whether the policy has placement scores.
func (p *Program) HasPlacementScores() bool { return len(p.placementScores) > 0 }

// NumPlacementScores is the number of placement scores: the length of
// PlacementScore's raw values.
func (p *Program) NumPlacementScores() int { return len(p.placementScores) }

// PlacementScoreRules returns how the placement scores' raw values become
// scores, in order, for CombineRows across a group's placements.
func (p *CompiledPolicy) PlacementScoreRules() []WeightedRule {
	out := make([]WeightedRule, len(p.placementScores))
	for i, r := range p.placementScores {
		out[i] = WeightedRule{Weight: r.weight, Normalization: r.normalization, Audit: !p.Enforced()}
	}
	return out
}

// PlacementFilterRuleNames returns the names of the placement filters, in
// order.
func (p *Program) PlacementFilterRuleNames() []string {
	out := make([]string, len(p.placementFilters))
	for i, r := range p.placementFilters {
		out[i] = r.name
	}
	return out
}

// compilePlacement compiles spec.placement.filters and
// spec.placement.scores.
func (pc *policyCompiler) compilePlacement(spec *schedv1alpha1.SchedulingPolicySpec, envs *placementEnvs) {
	if spec.Placement == nil || len(spec.Placement.Filters)+len(spec.Placement.Scores) == 0 {
		return
	}
	placementPath := field.NewPath("spec", "placement")
	if envs == nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(placementPath, fmt.Errorf("no environment for placement rules")))
		return
	}
	for i, r := range spec.Placement.Filters {
		path := placementPath.Child("filters").Index(i).Child("expression")
		if prg := pc.placementProgram(envs.filters, path, r.Expression, outputBool); prg != nil {
			pc.out.placementFilters = append(pc.out.placementFilters, &placementRule{name: r.Name, path: path, prg: prg, message: r.Message})
		}
	}
	for i, r := range spec.Placement.Scores {
		path := placementPath.Child("scores").Index(i)
		prg := pc.placementProgram(envs.scores, path.Child("expression"), r.Expression, outputNumber)
		if prg == nil {
			continue
		}
		weight, normalization := pc.scoring(path, r.Weight, r.Normalization)
		pc.out.placementScores = append(pc.out.placementScores, &placementRule{name: r.Name, path: path.Child("expression"), prg: prg, weight: weight, normalization: normalization})
	}
}

// placementProgram is trackedProgram for a placement rule: placement.nodes
// is declared to hold at most celcost.MaxPlacementNodes nodes for the
// estimates, and a larger cluster's placements may hold more.
func (pc *policyCompiler) placementProgram(env *placementEnv, path *field.Path, text string, want outputKind) celcost.Program {
	return pc.trackedProgram(env, path, text, want, fmt.Sprintf("placements of up to %d nodes", celcost.MaxPlacementNodes), "large placements", false)
}

// trackedProgram parses, type-checks (its result must be want) and
// cost-checks one rule of an environment of its own (placement and victim
// rules) and builds its program, or records its errors and returns nil.
// assumed says what the estimate assumed, cutOff where it would be cut
// off. Such a rule is tracked at runtime (the runtime limit,
// celcost.PerExpressionCostLimit, is what bounds inputs larger than the
// estimate's), unless bounded is set and its worst case is within that
// limit.
func (pc *policyCompiler) trackedProgram(env *placementEnv, path *field.Path, text string, want outputKind, assumed, cutOff string, bounded bool) celcost.Program {
	if pc.stopped() {
		return nil
	}
	celEnv, ast := pc.typeChecked(env.envSet, path, text, want)
	if ast == nil {
		return nil
	}
	typical, err := celEnv.EstimateCost(ast, env.typical)
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(path, fmt.Errorf("estimating cost: %w", err)))
		return nil
	}
	if !pc.withinCost(path, ast, typical.Max, assumed, cutOff) {
		return nil
	}
	// A victim rule whose worst case is within the limit of one evaluation
	// cannot be cut off: it runs without runtime cost tracking, charged its
	// estimate, as the pod filters do (celcost.Bounded: tracking triples
	// the cost of a typical rule, and victim rules run per candidate
	// victim). Placement rules stay tracked: their placement's nodes are
	// bounded by declaration only (celcost.MaxPlacementNodes), as
	// nodeInfo.pods is for filters.
	if bounded {
		if worst, err := celEnv.EstimateCost(ast, env.worst); err == nil && worst.Max <= celcost.PerExpressionCostLimit {
			prg, err := celcost.NewBounded(celEnv, ast, worst.Max)
			if err != nil {
				pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text), "program construction failed: "+err.Error()))
				return nil
			}
			return prg
		}
	}
	prg, err := celcost.NewTracked(celEnv, ast, celcost.PerExpressionCostLimit)
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text), "program construction failed: "+err.Error()))
		return nil
	}
	return prg
}

// PlacementInput is one candidate placement of a pod group, as placement
// rules read it. Build it once per placement (NewPlacementInput) and
// decide every matching policy's rules on it.
type PlacementInput struct {
	// Name is the placement's name (its topology domain), for messages.
	Name string
	vars interpreter.Activation
}

// NewPlacementInput converts a candidate placement (its nodes) and its pod
// group. group may be nil (a composite group): podGroup then has the
// namespace and name given, and minCount 0. assigned are the names of the
// nodes proposed for the group's pods in the placement, one per pod, which
// placement scores read as placement.assignedNodes; nil for the filters,
// which run before any is proposed (and cannot read it).
func NewPlacementInput(name string, nodes []*corev1.Node, group *schedulingv1beta1.PodGroup, namespace, groupName string, assigned []string) (*PlacementInput, error) {
	list := make([]any, len(nodes))
	for i, n := range nodes {
		list[i] = placementNode(n.Name, n.Labels)
	}
	placement := map[string]any{"nodes": list, "count": int64(len(nodes))}
	if assigned != nil {
		byName := make(map[string]any, len(nodes))
		for i, n := range nodes {
			byName[n.Name] = list[i]
		}
		assignedNodes := make([]any, len(assigned))
		for i, name := range assigned {
			if assignedNodes[i] = byName[name]; assignedNodes[i] == nil {
				// Not one of the placement's nodes (kube-scheduler
				// proposes only those): its name, without labels.
				assignedNodes[i] = placementNode(name, nil)
			}
		}
		placement["assignedNodes"] = assignedNodes
	}
	vars, err := interpreter.NewActivation(map[string]any{
		PlacementVar: placement,
		// The group as pod rules read it, without members: placement
		// rules' podGroup declares no assignedNodes.
		PodGroupVar: NewPodGroup(namespace, groupName, group, nil).val,
	})
	if err != nil {
		return nil, fmt.Errorf("converting placement %s: %w", name, err)
	}
	return &PlacementInput{Name: name, vars: vars}, nil
}

// placementNode is a node as placement rules read it.
func placementNode(name string, labels map[string]string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "labels": labelsOf(labels)}}
}

func labelsOf(l map[string]string) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

// PlacementFilter decides the placement filters on one candidate
// placement: Reject at the first false filter, Error at the first error
// under Fail. Under Ignore a failing filter is skipped and the filters
// after it still apply. The policy must apply to the group's pods
// (Match on a member); the caller acts on the decision (Acts) or reports
// it (WouldAct).
func (p *CompiledPolicy) PlacementFilter(ctx context.Context, in *PlacementInput) Decision {
	return p.decideBoolRules(ctx, PointPlacement, p.placementFilters, in.vars)
}

// decideBoolRules decides rules of an environment of their own (placement
// filters, victim rules) over vars: Reject at the first false rule, with
// its message, Error at the first error under Fail; under Ignore a failing
// rule is skipped and the rules after it still apply.
func (p *CompiledPolicy) decideBoolRules(ctx context.Context, point Point, rules []*placementRule, vars interpreter.Activation) Decision {
	d := Decision{Policy: p, Point: point}
	if err := p.Err(); err != nil {
		d.fail("", err)
		return d
	}
	var spent uint64
	for _, r := range rules {
		v, err := p.evalRule(ctx, r, vars, &spent)
		if err == nil {
			if _, ok := v.(types.Bool); !ok {
				err = fmt.Errorf("evaluated to %s, want bool", v.Type().TypeName())
			}
		}
		if err != nil {
			if d.fail(r.name, &EvalError{Policy: p.Name, Rule: r.name, Field: r.path.String(), Err: err}) {
				return d
			}
			continue
		}
		if v == types.False {
			d.Verdict, d.Rule = Reject, r.name
			d.Message = r.message
			if d.Message == "" {
				d.Message = "expression is false"
			}
			return d
		}
	}
	return d
}

// PlacementScore evaluates the placement scores on one candidate placement
// (an input with the nodes assigned), writing their raw values into raw
// (NumPlacementScores long, in order); the caller normalizes each rule
// across the group's placements and combines them (CombineRows with
// PlacementScoreRules), as a pod's score rules across the nodes. A rule
// that fails under Ignore is skipped: its value is NaN, which takes no
// part in the normalization and scores 0, as an ordinary rule that failed
// on a node. Under Fail the first error decides Error, and every value is
// NaN. The policy must apply to the group's pods; the caller uses the
// scores of enforced policies and reports the others'.
func (p *CompiledPolicy) PlacementScore(ctx context.Context, in *PlacementInput, raw []float64) Decision {
	d := Decision{Policy: p, Point: PointPlacementScore}
	noValues(raw)
	if err := p.Err(); err != nil {
		d.fail("", err)
		return d
	}
	var spent uint64
	for i, r := range p.placementScores {
		v, err := p.evalRule(ctx, r, in.vars, &spent)
		var f float64
		if err == nil {
			f, err = number(v)
		}
		if err != nil {
			if d.fail(r.name, &EvalError{Policy: p.Name, Rule: r.name, Field: r.path.String(), Err: err}) {
				noValues(raw)
				return d
			}
			continue
		}
		raw[i] = f
	}
	return d
}

// noValues sets every raw value to NaN: no value, a rule that failed.
func noValues(raw []float64) {
	for i := range raw {
		raw[i] = math.NaN()
	}
}

// evalRule evaluates one placement or victim rule over vars, adding what
// it cost to *spent, the cost of the policy's evaluation on the input so
// far, which must stay within the policy's budget. A failed evaluation is
// an error, not a value.
func (p *CompiledPolicy) evalRule(ctx context.Context, r *placementRule, vars interpreter.Activation, spent *uint64) (ref.Val, error) {
	v, cost, err := r.prg.Eval(ctx, vars)
	*spent += cost
	if err == nil {
		err = errorOf(ctx, v)
	}
	if err == nil && *spent > p.costBudget {
		err = fmt.Errorf("%w: %d", ErrCostBudgetExceeded, p.costBudget)
	}
	return v, err
}

// PlacementRejection is a placement filter's decision as a pod's owner
// reads it, on one line and at most MaxMessageLength bytes: which
// placement, which policy and rule, and the rule's message (or the error).
func PlacementRejection(placement string, d *Decision) string {
	switch d.Verdict {
	case Reject:
		return Truncate(fmt.Sprintf("placement %s rejected by SchedulingPolicy %s, rule placement.filters/%s: %s", placement, d.Policy.Name, d.Rule, oneLine(d.Message)), MaxMessageLength)
	case Error:
		return Truncate(fmt.Sprintf("placement %s rejected: %s", placement, podErrorMessage(d.Err)), MaxMessageLength)
	}
	return ""
}
