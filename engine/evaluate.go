package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// EvalError is an evaluation that failed: a runtime error, an exceeded cost
// limit, a cancelled context or a result of the wrong type. The policy's
// failurePolicy decides what it does (see Decision).
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

// ErrTimeBudgetExceeded is the cause of a context whose deadline is a
// scheduling cycle's CEL time budget (celplugins.Args.EvaluationBudget):
// evaluations cut off by it wrap it.
var ErrTimeBudgetExceeded = errors.New("the CEL time budget of the pod's scheduling cycle is spent")

// ErrNotEvaluated is wrapped by the error of an expression that was not
// evaluated because the context was already done (its cause is wrapped
// too): it did not cause the cut-off, an earlier evaluation did.
var ErrNotEvaluated = errors.New("not evaluated")

// ErrCostBudgetExceeded is wrapped by the EvalError of an evaluation that
// went over celcost.PolicyEvaluationCostBudget.
var ErrCostBudgetExceeded = errors.New("policy evaluation exceeded its cost budget")

// Selectors are the cheap part of matching a policy to a pod, without CEL:
// the scheduler names and the label selectors. A nil selector matches
// every pod.
type Selectors struct {
	// SchedulerNames are the profiles that evaluate the policy; empty means
	// all.
	SchedulerNames    sets.Set[string]
	NamespaceSelector labels.Selector
	PodSelector       labels.Selector
}

// NewSelectors returns the selectors of a policy spec, and the errors of
// selectors that do not parse, with their field paths.
func NewSelectors(spec *schedv1alpha1.SchedulingPolicySpec) (Selectors, field.ErrorList) {
	s := Selectors{SchedulerNames: sets.New(spec.SchedulerNames...)}
	var errs field.ErrorList
	if m := spec.Match; m != nil {
		path := field.NewPath("spec", "match")
		s.NamespaceSelector, errs = selector(path.Child("namespaceSelector"), m.NamespaceSelector, errs)
		s.PodSelector, errs = selector(path.Child("podSelector"), m.PodSelector, errs)
	}
	return s, errs
}

func selector(path *field.Path, s *metav1.LabelSelector, errs field.ErrorList) (labels.Selector, field.ErrorList) {
	if s == nil {
		return nil, errs
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, append(errs, field.Invalid(path, s, err.Error()))
	}
	if sel.Empty() {
		return nil, errs
	}
	return sel, errs
}

// Select says whether the selectors select a pod in a namespace (nil when
// not known: a namespaceSelector then does not select it).
func (s *Selectors) Select(pod *corev1.Pod, ns *corev1.Namespace) bool {
	return s.miss(pod, ns) == selected
}

// missKind is which selector did not select a pod.
type missKind int

const (
	selected missKind = iota
	missSchedulerName
	missPodSelector
	missNamespaceUnknown
	missNamespaceSelector
	missCondition
	failedCondition
	notCompiled
	// parameterized policies: no params object found under Allow (not
	// selected) or Deny (selected, rejects), or the params not readable.
	missParams
	paramsMissing
	paramsFailed
)

func (s *Selectors) miss(pod *corev1.Pod, ns *corev1.Namespace) missKind {
	switch {
	case s.SchedulerNames.Len() > 0 && !s.SchedulerNames.Has(pod.Spec.SchedulerName):
		return missSchedulerName
	case s.PodSelector != nil && !s.PodSelector.Matches(labels.Set(pod.Labels)):
		return missPodSelector
	case s.NamespaceSelector != nil && ns == nil:
		return missNamespaceUnknown
	case s.NamespaceSelector != nil && !s.NamespaceSelector.Matches(labels.Set(ns.Labels)):
		return missNamespaceSelector
	}
	return selected
}

// MatchResult is whether a policy applies to a pod, and the decision of
// matching: Error when the policy does not compile or a match condition
// failed under failurePolicy Fail (the policy then applies, and rejects the
// pod on every node); Pass otherwise, with the errors skipped under Ignore.
type MatchResult struct {
	Matches  bool
	Decision Decision

	why  missKind
	pod  string // the pod's scheduler name, for Reason
	rule string // the match condition that was false or failed
	// of is the snapshot's policy matched (Decision.Policy may be its
	// namespace view or a copy bound to params), set by Snapshot.Match.
	of *CompiledPolicy
}

// ByPolicy calls f with each policy of the snapshot and its results, in
// the results of Snapshot.Match (those of one policy are next to each
// other), until f returns false.
func ByPolicy(matches []MatchResult, f func(p *CompiledPolicy, results []MatchResult) bool) {
	for i := 0; i < len(matches); {
		j := i + 1
		for j < len(matches) && matches[j].of == matches[i].of {
			j++
		}
		if !f(matches[i].of, matches[i:j]) {
			return
		}
		i = j
	}
}

// Reason says why the policy applies or not, in words: "selectors match",
// "match condition requests-gpu is false", ... (built on demand: matching
// runs for every policy and pod).
func (m *MatchResult) Reason() string {
	p := m.Decision.Policy
	switch m.why {
	case missSchedulerName:
		return fmt.Sprintf("schedulerNames [%s] do not include %q", strings.Join(sets.List(p.SchedulerNames), ", "), m.pod)
	case missPodSelector:
		return fmt.Sprintf("podSelector %s does not match the pod's labels", p.PodSelector)
	case missNamespaceUnknown:
		return "namespaceSelector: the pod's namespace is not known"
	case missNamespaceSelector:
		return fmt.Sprintf("namespaceSelector %s does not match the namespace's labels", p.NamespaceSelector)
	case missCondition:
		return fmt.Sprintf("match condition %s is false", m.rule)
	case failedCondition:
		return fmt.Sprintf("match condition %s failed", m.rule)
	case notCompiled:
		return "selectors match, but the policy does not compile"
	case missParams:
		return "selectors match, but no params object is found (parameterNotFoundAction Allow)"
	case paramsMissing:
		return "selectors match; the params are missing"
	case paramsFailed:
		return "selectors match, but the params cannot be read"
	}
	if len(p.conditions) > 0 {
		return "selectors and match conditions match"
	}
	return "selectors match"
}

// Match decides whether the policy applies to a pod: its selectors, then
// its compile errors, then its match conditions. This is the one matcher:
// the scheduler, the queueing hints and the dry-run all call it.
//
// As in ValidatingAdmissionPolicy, a match condition that fails under
// failurePolicy Ignore makes the policy not apply (it is skipped, and the
// error is in Decision.Ignored); under Fail the policy applies with an
// Error decision. A policy that does not compile applies with an Error
// decision under Fail, and is skipped under Ignore.
func (p *CompiledPolicy) Match(ctx context.Context, in *PodInput) MatchResult {
	p = p.ForNamespace(in.Namespace)
	res := MatchResult{Decision: Decision{Policy: p, Point: PointMatch}, pod: in.schedulerName}
	if res.why = p.miss(in.Pod, in.Namespace); res.why != selected {
		return res
	}
	if err := p.Err(); err != nil {
		res.why = notCompiled
		res.Matches = res.Decision.fail("", err)
		return res
	}
	if len(p.conditions) == 0 {
		res.Matches = true
		return res
	}
	ev := &lazy{ctx: ctx, policy: p, pod: in}
	for _, c := range p.conditions {
		ok, err := ev.evalBool(nil, &c.expr)
		if err != nil {
			res.why, res.rule = failedCondition, c.name
			res.Matches = res.Decision.fail(c.name, p.evalError(c.name, &c.expr, err))
			return res
		}
		if !ok {
			res.why, res.rule = missCondition, c.name
			return res
		}
	}
	res.Matches = true
	return res
}

// PreEnqueue decides the preEnqueue rules for a pod the policy applies to:
// Hold at the first false rule, Error at the first error under Fail. Under
// Ignore a failing rule is skipped and the rules after it still apply.
func (p *CompiledPolicy) PreEnqueue(ctx context.Context, in *PodInput) Decision {
	d := Decision{Policy: p, Point: PointPreEnqueue}
	if err := p.Err(); err != nil {
		d.fail("", err)
		return d
	}
	p.firstFalse(&d, &lazy{ctx: ctx, policy: p, pod: in}, nil, p.preEnqueue, Hold)
	return d
}

// MatchAndPreEnqueue is what the preEnqueue point decides for a pod with
// this policy: whether the policy applies (Match) and, if it does, its
// preEnqueue rules. A match Error (a compile or match condition error under
// Fail) holds the pod, as a rule's error would.
//
// A parameterized policy is decided once per params object found (the
// first that does not pass decides); one that finds none under Deny holds
// the pod.
func (p *CompiledPolicy) MatchAndPreEnqueue(ctx context.Context, in *PodInput) (bool, Decision) {
	return p.PreEnqueueMatched(ctx, in, p.MatchAll(ctx, in))
}

// PreEnqueueMatched is MatchAndPreEnqueue on the policy's results of
// MatchAll made before (all of them, or those that apply: a Match's).
func (p *CompiledPolicy) PreEnqueueMatched(ctx context.Context, in *PodInput, matches []MatchResult) (bool, Decision) {
	matched := false
	last := Decision{Policy: p, Point: PointMatch}
	var ignored []error
	for i := range matches {
		m := &matches[i]
		if !m.Matches {
			last = m.Decision
			continue
		}
		matched = true
		d := m.Decision
		if d.Verdict == Pass {
			ignored = append(ignored, d.Ignored...)
			d = d.Policy.PreEnqueue(ctx, in)
		} else {
			d.Point = PointPreEnqueue
			if d.Verdict == Reject { // no params found, Deny
				d.Verdict = Hold
			}
		}
		ignored = append(ignored, d.Ignored...)
		d.Ignored = ignored
		if d.Verdict != Pass {
			return true, d
		}
		last = d
	}
	return matched, last
}

// MatchAll is Match for every way the policy applies to the pod: once for
// a policy without paramKind (or one bound to its params); for a
// parameterized one, the selectors first, then once per params object
// found, bound to it (its match conditions may read params). When no
// params object is found, the policy does not apply under
// parameterNotFoundAction Allow, and under Deny it applies with a Reject
// decision (rule ParamsRule) that holds or rejects the pod. When the params
// cannot be read, failurePolicy decides, as for a compile error.
func (p *CompiledPolicy) MatchAll(ctx context.Context, in *PodInput) []MatchResult {
	p = p.ForNamespace(in.Namespace)
	if p.paramSpec == nil || p.params != nil {
		return []MatchResult{p.Match(ctx, in)}
	}
	res := MatchResult{Decision: Decision{Policy: p, Point: PointMatch}, pod: in.schedulerName}
	if res.why = p.miss(in.Pod, in.Namespace); res.why != selected {
		return []MatchResult{res}
	}
	bindings := p.bindings(in)
	if len(bindings) == 0 {
		res.why = missParams
		return []MatchResult{res}
	}
	out := make([]MatchResult, 0, len(bindings))
	for _, b := range bindings {
		switch {
		case b.err != nil:
			r := res
			r.why = paramsFailed
			if errors.Is(b.err, ErrParamsNotReady) {
				r.Matches, r.Decision.Verdict, r.Decision.Err = true, Error, b.err
			} else {
				r.Matches = r.Decision.fail("", b.err)
			}
			out = append(out, r)
		case b.missing:
			r := res
			r.why, r.Matches = paramsMissing, true
			r.Decision.Verdict, r.Decision.Rule = Reject, ParamsRule
			r.Decision.Message = p.missingMessage(in)
			r.Decision.static = r.Decision.Message
			out = append(out, r)
		default:
			out = append(out, b.policy.Match(ctx, in))
		}
	}
	return out
}

// Filter decides the filters for a pod the policy applies to on a node:
// Reject at the first false filter, Error at the first error under Fail.
// Under Ignore a failing filter is skipped and the filters after it still
// apply.
func (p *CompiledPolicy) Filter(ctx context.Context, in *PodInput, node *NodeInput) Decision {
	d := Decision{Policy: p, Point: PointFilter}
	if err := p.Err(); err != nil {
		d.fail("", err)
		return d
	}
	p.firstFalse(&d, &lazy{ctx: ctx, policy: p, pod: in}, node, p.filters, Reject)
	return d
}

// Score evaluates the score rules for a pod the policy applies to on a
// node, writing their raw values into raw (len(ScoreRules()) long, in that
// order). A rule that fails under Ignore is skipped: its value is NaN, and
// NormalizeScores leaves the node out of that rule's normalization (it
// scores 0 for it). Under Fail the first error decides Error.
func (p *CompiledPolicy) Score(ctx context.Context, in *PodInput, node *NodeInput, raw []float64) Decision {
	d := Decision{Policy: p, Point: PointScore}
	if err := p.Err(); err != nil {
		d.fail("", err)
		return d
	}
	ev := &lazy{ctx: ctx, policy: p, pod: in}
	for i, s := range p.scores {
		v, err := ev.eval(node, &s.expr)
		if err == nil {
			raw[i], err = number(v)
		}
		if err != nil {
			raw[i] = math.NaN()
			if d.fail(s.name, p.evalError(s.name, &s.expr, err)) {
				return d
			}
		}
	}
	return d
}

// firstFalse evaluates rules in order until one is false (the decision
// becomes falseVerdict) or fails under Fail (Error); errors under Ignore
// are recorded and skipped.
func (p *CompiledPolicy) firstFalse(d *Decision, ev *lazy, node *NodeInput, rules []*boolRule, falseVerdict Verdict) {
	for _, r := range rules {
		ok, err := ev.evalBool(node, &r.expr)
		if err != nil {
			if d.fail(r.name, p.evalError(r.name, &r.expr, err)) {
				return
			}
			continue
		}
		if !ok {
			d.Verdict, d.Rule, d.static = falseVerdict, r.name, r.staticMessage()
			// The activation is built only for a messageExpression that
			// is not memoized.
			d.Message = ev.message(node, r)
			return
		}
	}
}

// evalError is the error of a rule (or match condition) whose expression
// failed. An error of a variable the rule read names the variable's field
// and the rule: a copy, since the variable's error is a value that other
// rules, pods and goroutines read from the memo too.
func (p *Program) evalError(rule string, e *expr, err error) error {
	var ee *EvalError
	if errors.As(err, &ee) {
		named := *ee
		named.Rule = rule
		return &named
	}
	return &EvalError{Policy: p.Name, Rule: rule, Field: e.path.String(), Err: err}
}

// evaluation is the CEL activation of one evaluation of a policy: for a
// pod, or for a pod and a node. It evaluates each variable at most once,
// and says what each expression it ran cost (costRecord); charging the
// policy's budget is lazy's, per rule.
type evaluation struct {
	ctx    context.Context
	policy *CompiledPolicy
	pod    *PodInput
	node   *NodeInput
	// variables is built on first use.
	variables *variablesValue
	// reads collects, while expressions run, the variables they read (with
	// what each cost): an expression's own reads are what run appended
	// after its start.
	reads []varCost
}

func (p *CompiledPolicy) newEvaluation(ctx context.Context, in *PodInput, node *NodeInput) *evaluation {
	var shared *NodeInput
	if node != nil {
		shared = node.forEvaluation()
	}
	return &evaluation{ctx: ctx, policy: p, pod: in, node: shared}
}

// ResolveName implements interpreter.Activation.
func (ev *evaluation) ResolveName(name string) (any, bool) {
	switch name {
	case PodVar:
		return ev.pod.podValue(ev.policy.podFields), true
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
	case ParamsVar:
		return ev.policy.paramsValue(), true
	case PodGroupVar:
		if ev.pod.Group == nil {
			return NoPodGroup.val, true
		}
		return ev.pod.Group.val, true
	case VariablesVar:
		if ev.variables == nil {
			n := len(ev.policy.variables)
			ev.variables = &variablesValue{ev: ev, values: make([]ref.Val, n), costs: make([]costRecord, n)}
		}
		return ev.variables, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (ev *evaluation) Parent() interpreter.Activation { return nil }

// eval evaluates an expression, or reads its result from the memo, and
// returns what computing it cost, either way.
func (ev *evaluation) eval(e *expr) (ref.Val, costRecord, error) {
	if ev.ctx.Err() != nil {
		return nil, costRecord{}, fmt.Errorf("%w: %w", ErrNotEvaluated, context.Cause(ev.ctx))
	}
	if e.paramsOnly && ev.policy.params != nil {
		return ev.evalParamsOnly(e)
	}
	if ev.node == nil {
		return ev.evalAlone(e)
	}
	id, ok := memoKey(ev.policy, ev.pod, ev.node, e)
	if !ok {
		return ev.run(e)
	}
	// A memoized expression: its result is a function of the node version,
	// of the compiled expression (a new policy version is a new expr) and
	// of memoKey's id, so it is computed once per such input, by whichever
	// pod comes first, and read by the others without evaluating.
	if r := ev.node.memo.load(e, id); r != nil {
		return r.val, r.cost, r.err
	}
	val, cost, err := ev.run(e)
	if err == nil || memoizable(err) {
		ev.node.memo.storeResult(&memoResult{e: e, id: id, val: val, err: err, cost: cost})
	}
	return val, cost, err
}

// memoKey returns what e's results on the node depend on besides the
// node's version, or false when they are not memoized.
func memoKey(p *CompiledPolicy, pod *PodInput, node *NodeInput, e *expr) (id memoID, ok bool) {
	if node == nil || node.memo == nil || e.memo == notMemoized {
		return memoID{}, false
	}
	if e.memo == memoNodeInfo || e.memo == memoPodAndNodeInfo {
		if id.gen = node.generation; id.gen == 0 {
			return memoID{}, false
		}
	}
	if e.memo == memoPodAndNode || e.memo == memoPodAndNodeInfo {
		if id.key, ok = pod.key(&p.signs); !ok {
			return memoID{}, false
		}
	}
	if e.readsParams && p.params != nil {
		// The copies of a parameterized policy bound to different params
		// objects share their expressions.
		id.params = p.params.id
	}
	return id, true
}

// evalAlone evaluates an expression without a node (a match condition, a
// preEnqueue rule or its message, a variable they read) once per pod key
// and params object, as eval does those on a node per node version
// (podmemo.go).
func (ev *evaluation) evalAlone(e *expr) (ref.Val, costRecord, error) {
	m := e.alone
	if m == nil {
		return ev.run(e)
	}
	id, ok := m.id(ev.policy, ev.pod, e)
	if !ok {
		return ev.run(e)
	}
	if r := m.places.load(e, id); r != nil {
		return r.val, r.cost, r.err
	}
	val, cost, err := ev.run(e)
	if err == nil || memoizable(err) {
		m.places.store(&m.order, &memoResult{e: e, id: id, val: val, err: err, cost: cost})
	}
	return val, cost, err
}

// evalParamsOnly evaluates an expression that reads only params once per
// params version (and compiled expression), as eval does node-only ones
// per node version.
func (ev *evaluation) evalParamsOnly(e *expr) (ref.Val, costRecord, error) {
	memo := &ev.policy.params.memo
	if m, ok := memo.Load(e); ok {
		r := m.(*memoResult)
		return r.val, r.cost, r.err
	}
	val, cost, err := ev.run(e)
	if err == nil || memoizable(err) {
		memo.Store(e, &memoResult{val: val, err: err, cost: cost})
	}
	return val, cost, err
}

// cached returns the result of a memoized expression on the node's
// version (or, without a node, for the pod's key: podmemo.go), if it was
// evaluated.
func cached(p *CompiledPolicy, pod *PodInput, node *NodeInput, e *expr) *memoResult {
	if node == nil {
		if e.paramsOnly && p.params != nil {
			return nil // kept with the params object (evalParamsOnly)
		}
		return e.alone.load(p, pod, e)
	}
	id, ok := memoKey(p, pod, node, e)
	if !ok {
		return nil
	}
	return node.memo.load(e, id)
}

// lazy evaluates a policy's rules for a pod (and a node), and charges
// what each rule cost to the policy's budget (account), the same whether
// the rule was computed or read from the memo. It builds the evaluation
// (the CEL activation, on the heap) only for an expression that is not in
// the node's memo: a policy whose rules are all memoized costs a few
// lookups per node, and allocates nothing. The node is passed apart from
// the rest, so that escape analysis (which does not tell a struct's
// fields apart) lets the caller keep its NodeInput on the stack.
type lazy struct {
	ctx     context.Context
	policy  *CompiledPolicy
	pod     *PodInput
	ev      *evaluation
	account account
}

func (l *lazy) evaluation(node *NodeInput) *evaluation {
	if l.ev == nil {
		l.ev = l.policy.newEvaluation(l.ctx, l.pod, node)
	}
	return l.ev
}

// eval evaluates one rule (a match condition, preEnqueue rule, filter,
// messageExpression or score) and charges its cost: once the policy's
// budget is spent, a rule that evaluated fails with ErrCostBudgetExceeded.
func (l *lazy) eval(node *NodeInput, e *expr) (ref.Val, error) {
	var (
		val  ref.Val
		cost costRecord
		err  error
	)
	if r := cached(l.policy, l.pod, node, e); r != nil {
		val, cost, err = r.val, r.cost, r.err
	} else {
		val, cost, err = l.evaluation(node).eval(e)
	}
	if spent := l.account.charge(&cost); err == nil && spent > l.policy.costBudget {
		err = fmt.Errorf("%w of %d", ErrCostBudgetExceeded, l.policy.costBudget)
	}
	if err != nil {
		return nil, err
	}
	return val, nil
}

// message is a false rule's message on the node.
func (l *lazy) message(node *NodeInput, r *boolRule) string {
	if r.messageExpression == nil {
		return r.staticMessage()
	}
	return r.messageOf(l.eval(node, r.messageExpression))
}

func (l *lazy) evalBool(node *NodeInput, e *expr) (bool, error) {
	return asBool(l.eval(node, e))
}

// memoizable says whether an error is the expression's own on the node,
// the same on every evaluation, rather than an accident of this one (a
// cancelled cycle).
func memoizable(err error) bool {
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, ErrTimeBudgetExceeded) && !errors.Is(err, ErrNotEvaluated) &&
		!errors.Is(err, ErrCostBudgetExceeded) && !strings.HasPrefix(err.Error(), "evaluation cancelled")
}

// run evaluates an expression, and returns its own cost and the variables
// it read, with theirs.
func (ev *evaluation) run(e *expr) (ref.Val, costRecord, error) {
	start := len(ev.reads)
	val, own, err := e.prg.Eval(ev.ctx, ev)
	cost := costRecord{own: own, vars: distinctReads(ev.reads[start:])}
	ev.reads = ev.reads[:start]
	if err == nil {
		err = errorOf(ev.ctx, val)
	}
	if err != nil {
		return nil, cost, err
	}
	return val, cost, nil
}

// errorOf is the error that an evaluation's result holds (cel-go returns a
// failed evaluation as an error value), nil for any other value.
func errorOf(ctx context.Context, val ref.Val) error {
	if !types.IsError(val) {
		return nil
	}
	if ctx.Err() != nil {
		// cel-go stops a comprehension with "operation interrupted".
		return fmt.Errorf("evaluation cancelled: %w", context.Cause(ctx))
	}
	if err, ok := val.Value().(error); ok {
		return err
	}
	return fmt.Errorf("%v", val)
}

func asBool(val ref.Val, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %s, want bool", val.Type().TypeName())
	}
	return bool(b), nil
}

// messageOf is a false rule's message given its messageExpression's result:
// the static one when the expression failed or gave "".
func (r *boolRule) messageOf(v ref.Val, err error) string {
	if s, ok := v.(types.String); ok && err == nil && s != "" {
		return string(s)
	}
	return r.staticMessage()
}

// staticMessage is a false rule's message without its messageExpression.
func (r *boolRule) staticMessage() string {
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
	// costs are what computing each value cost.
	costs []costRecord
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
		val, cost, err := v.ev.eval(&vr.expr)
		if err != nil {
			val = types.WrapErr(&EvalError{Policy: v.ev.policy.Name, Field: vr.path.String(), Err: err})
		}
		v.values[i], v.costs[i] = val, cost
	}
	// The expression running read the variable: it is charged for it
	// (once per policy evaluation, see account).
	v.ev.reads = append(v.ev.reads, varCost{index: int32(i), cost: v.costs[i].own})
	v.ev.reads = append(v.ev.reads, v.costs[i].vars...)
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
func (v *variablesValue) IsSet(name ref.Val) ref.Val { return v.Contains(name) }

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
