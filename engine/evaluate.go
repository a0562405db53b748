package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Rejection is a rule that is false for a pod (preEnqueue) or for a pod and
// a node (filter).
type Rejection struct {
	Policy  string
	Rule    string
	Message string
}

// EvalError is an evaluation that failed: a runtime error, an exceeded cost
// limit, a cancelled context or a result of the wrong type. The caller
// applies the policy's failurePolicy (CompiledPolicy.FailClosed).
type EvalError struct {
	Policy string
	// Rule is the rule (or match condition) being evaluated, when any.
	Rule string
	// Field is the path of the expression that failed, e.g.
	// spec.filters[2].expression or spec.variables[0].expression.
	Field string
	Err   error
}

func (e *EvalError) Error() string {
	if e.Rule != "" {
		return fmt.Sprintf("SchedulingPolicy %s, rule %s: %s: %v", e.Policy, e.Rule, e.Field, e.Err)
	}
	return fmt.Sprintf("SchedulingPolicy %s: %s: %v", e.Policy, e.Field, e.Err)
}

func (e *EvalError) Unwrap() error { return e.Err }

// ErrCostBudgetExceeded is wrapped by the EvalError of an evaluation that
// went over PolicyEvaluationCostBudget.
var ErrCostBudgetExceeded = errors.New("policy evaluation exceeded its cost budget")

// FailClosed says whether an error (compile or evaluation) of this policy
// rejects (failurePolicy Fail) or passes (Ignore).
func (p *CompiledPolicy) FailClosed() bool {
	return p.FailurePolicy != schedv1alpha1.Ignore
}

// Audit says whether the policy only reports (enforcement Audit).
func (p *CompiledPolicy) Audit() bool {
	return p.Enforcement == schedv1alpha1.Audit
}

// MatchesSelectors checks the scheduler name and the label selectors, the
// cheap part of matching, without evaluating CEL.
func (p *CompiledPolicy) MatchesSelectors(in *PodInput) bool {
	if p.SchedulerNames.Len() > 0 && !p.SchedulerNames.Has(in.schedulerName) {
		return false
	}
	if p.podSelector != nil && !p.podSelector.Matches(in.podLabels) {
		return false
	}
	if p.namespaceSelector != nil && (in.Namespace == nil || !p.namespaceSelector.Matches(in.nsLabels)) {
		return false
	}
	return true
}

// SelectsPod is MatchesSelectors for a policy that is not compiled, e.g.
// an old version seen in an update event: it checks the scheduler names and
// the label selectors of spec against a pod and its namespace (nil when
// unknown). A selector that does not parse selects every pod, so that
// callers deciding whether a policy is relevant err on the safe side.
func SelectsPod(spec *schedv1alpha1.SchedulingPolicySpec, pod *corev1.Pod, ns *corev1.Namespace) bool {
	if len(spec.SchedulerNames) > 0 && !slices.Contains(spec.SchedulerNames, pod.Spec.SchedulerName) {
		return false
	}
	if spec.Match == nil {
		return true
	}
	if !selects(spec.Match.PodSelector, pod.Labels) {
		return false
	}
	if spec.Match.NamespaceSelector != nil && ns != nil && !selects(spec.Match.NamespaceSelector, ns.Labels) {
		return false
	}
	return true
}

func selects(s *metav1.LabelSelector, set map[string]string) bool {
	if s == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err != nil || sel.Matches(labels.Set(set))
}

// Matches says whether the policy applies to the pod: the selectors, then
// the match conditions. A policy that did not compile returns its compile
// error when its selectors match.
func (p *CompiledPolicy) Matches(ctx context.Context, in *PodInput) (bool, error) {
	if !p.MatchesSelectors(in) {
		return false, nil
	}
	return p.matchConditions(ctx, in)
}

// matchConditions is Matches after the selectors matched.
func (p *CompiledPolicy) matchConditions(ctx context.Context, in *PodInput) (bool, error) {
	if err := p.Err(); err != nil {
		return true, err
	}
	if len(p.conditions) == 0 {
		return true, nil
	}
	ev := p.newEvaluation(ctx, in, nil)
	for _, c := range p.conditions {
		ok, err := ev.evalBool(&c.expr)
		if err != nil {
			return true, p.evalError(c.name, &c.expr, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// PreEnqueue evaluates the preEnqueue rules for a matching pod and returns
// the first rule that is false, if any.
func (p *CompiledPolicy) PreEnqueue(ctx context.Context, in *PodInput) (*Rejection, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	return p.firstFalse(p.newEvaluation(ctx, in, nil), p.preEnqueue)
}

// Filter evaluates the filters for a matching pod on a node and returns the
// first rule that is false, if any.
func (p *CompiledPolicy) Filter(ctx context.Context, in *PodInput, node *NodeInput) (*Rejection, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	return p.firstFalse(p.newEvaluation(ctx, in, node), p.filters)
}

// Score evaluates the score rules for a matching pod on a node and returns
// their raw values, in the order of ScoreRules.
func (p *CompiledPolicy) Score(ctx context.Context, in *PodInput, node *NodeInput) ([]float64, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	ev := p.newEvaluation(ctx, in, node)
	out := make([]float64, len(p.scores))
	for i, s := range p.scores {
		v, err := ev.eval(&s.expr)
		if err == nil {
			out[i], err = number(v)
		}
		if err != nil {
			return nil, p.evalError(s.name, &s.expr, err)
		}
	}
	return out, nil
}

func (p *CompiledPolicy) firstFalse(ev *evaluation, rules []*boolRule) (*Rejection, error) {
	for _, r := range rules {
		ok, err := ev.evalBool(&r.expr)
		if err != nil {
			return nil, p.evalError(r.name, &r.expr, err)
		}
		if !ok {
			return &Rejection{Policy: p.Name, Rule: r.name, Message: ev.message(r)}, nil
		}
	}
	return nil, nil
}

func (p *CompiledPolicy) evalError(rule string, e *expr, err error) error {
	var ee *EvalError
	if errors.As(err, &ee) {
		ee.Rule = rule // an error of a variable the rule read
		return ee
	}
	return &EvalError{Policy: p.Name, Rule: rule, Field: e.path.String(), Err: err}
}

// evaluation is one evaluation of a policy: for a pod, or for a pod and a
// node. It is the CEL activation, evaluates each variable at most once, and
// accounts the cost against PolicyEvaluationCostBudget.
type evaluation struct {
	ctx    context.Context
	policy *CompiledPolicy
	pod    *PodInput
	node   *NodeInput
	spent  uint64
	// variables is built on first use.
	variables *variablesValue
}

func (p *CompiledPolicy) newEvaluation(ctx context.Context, in *PodInput, node *NodeInput) *evaluation {
	return &evaluation{ctx: ctx, policy: p, pod: in, node: node}
}

// ResolveName implements interpreter.Activation.
func (ev *evaluation) ResolveName(name string) (any, bool) {
	switch name {
	case PodVar:
		return ev.pod.pod, true
	case NamespaceVar:
		if ev.pod.namespace == nil {
			return types.NewErr("the pod's namespace %q is not known", ev.pod.Pod.Namespace), true
		}
		return ev.pod.namespace, true
	case NodeVar:
		if ev.node == nil {
			return nil, false
		}
		return ev.node.node, true
	case NodeInfoVar:
		if ev.node == nil {
			return nil, false
		}
		return ev.node.nodeInfoValue(), true
	case VariablesVar:
		if ev.variables == nil {
			ev.variables = &variablesValue{ev: ev, values: make([]ref.Val, len(ev.policy.variables))}
		}
		return ev.variables, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (ev *evaluation) Parent() interpreter.Activation { return nil }

func (ev *evaluation) eval(e *expr) (ref.Val, error) {
	val, cost, err := e.prg.eval(ev.ctx, ev)
	ev.spent += cost
	if err != nil {
		return nil, err
	}
	if ev.spent > PolicyEvaluationCostBudget {
		return nil, fmt.Errorf("%w of %d", ErrCostBudgetExceeded, PolicyEvaluationCostBudget)
	}
	if types.IsError(val) {
		if err, ok := val.Value().(error); ok {
			return nil, err
		}
		return nil, fmt.Errorf("%v", val)
	}
	return val, nil
}

func (ev *evaluation) evalBool(e *expr) (bool, error) {
	val, err := ev.eval(e)
	if err != nil {
		return false, err
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %s, want bool", val.Type().TypeName())
	}
	return bool(b), nil
}

// message is a false rule's message: its messageExpression, else its
// message, else a generic one.
func (ev *evaluation) message(r *boolRule) string {
	if r.messageExpression != nil {
		if v, err := ev.eval(r.messageExpression); err == nil {
			if s, ok := v.(types.String); ok && s != "" {
				return string(s)
			}
		}
	}
	if r.message != "" {
		return r.message
	}
	return "expression is false"
}

func number(v ref.Val) (float64, error) {
	var f float64
	switch n := v.(type) {
	case types.Int:
		f = float64(n)
	case types.Uint:
		f = float64(n)
	case types.Double:
		f = float64(n)
	default:
		return 0, fmt.Errorf("evaluated to %s, want int, uint or double", v.Type().TypeName())
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("evaluated to %v, want a finite number", f)
	}
	return f, nil
}

// variablesValue is the CEL value of `variables` in one evaluation: each
// variable is evaluated on first read, at most once. (apiserver's
// lazy.MapValue does the same with a map of closures per evaluation; this
// indexes the policy's compiled variables instead, which allocates less on
// the per-node path.)
type variablesValue struct {
	ev     *evaluation
	values []ref.Val
}

var (
	_ ref.Val       = (*variablesValue)(nil)
	_ traits.Mapper = (*variablesValue)(nil)

	variablesType = types.NewObjectType("celsched.variables", traits.IndexerType|traits.FieldTesterType)
)

func (v *variablesValue) get(name string) (ref.Val, bool) {
	i, ok := v.ev.policy.variableIndex[name]
	if !ok {
		return nil, false
	}
	if v.values[i] == nil {
		vr := v.ev.policy.variables[i]
		val, err := v.ev.eval(&vr.expr)
		if err != nil {
			val = types.WrapErr(&EvalError{Policy: v.ev.policy.Name, Field: vr.path.String(), Err: err})
		}
		v.values[i] = val
	}
	return v.values[i], true
}

// Find implements traits.Mapper.
func (v *variablesValue) Find(key ref.Val) (ref.Val, bool) {
	name, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	return v.get(string(name))
}

// Get implements traits.Indexer.
func (v *variablesValue) Get(key ref.Val) ref.Val {
	if val, ok := v.Find(key); ok {
		return val
	}
	return types.NewErr("no such variable: %v", key)
}

// Contains implements traits.Container.
func (v *variablesValue) Contains(key ref.Val) ref.Val {
	name, ok := key.(types.String)
	if !ok {
		return types.False
	}
	_, found := v.ev.policy.variableIndex[string(name)]
	return types.Bool(found)
}

// IsSet implements traits.FieldTester.
func (v *variablesValue) IsSet(field ref.Val) ref.Val { return v.Contains(field) }

// Iterator implements traits.Iterable.
func (v *variablesValue) Iterator() traits.Iterator {
	names := make([]ref.Val, len(v.ev.policy.variables))
	for i, vr := range v.ev.policy.variables {
		names[i] = types.String(vr.name)
	}
	return types.NewRefValList(types.DefaultTypeAdapter, names).Iterator()
}

// Size implements traits.Sizer.
func (v *variablesValue) Size() ref.Val { return types.Int(len(v.ev.policy.variables)) }

// ConvertToNative implements ref.Val.
func (v *variablesValue) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("variables cannot be converted to %v", typeDesc)
}

// ConvertToType implements ref.Val.
func (v *variablesValue) ConvertToType(typeVal ref.Type) ref.Val {
	if typeVal.TypeName() == types.TypeType.TypeName() {
		return variablesType
	}
	return types.NewErr("variables cannot be converted to %s", typeVal.TypeName())
}

// Equal implements ref.Val.
func (v *variablesValue) Equal(other ref.Val) ref.Val { return types.Bool(v == other) }

// Type implements ref.Val.
func (v *variablesValue) Type() ref.Type { return variablesType }

// Value implements ref.Val.
func (v *variablesValue) Value() any { return v }
