package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

// Compiler compiles SchedulingPolicy objects. It is safe for concurrent use.
type Compiler struct {
	env *Environment
	// costBudget is the runtime cost budget of one policy evaluation given
	// to the policies compiled: celcost.PolicyEvaluationCostBudget; tests lower it
	// to reach it with cheap expressions.
	costBudget uint64
}

// NewCompiler returns a compiler over the given environment.
func NewCompiler(env *Environment) *Compiler {
	return &Compiler{env: env, costBudget: celcost.PolicyEvaluationCostBudget}
}

// CompileOptions say which CEL environment an expression compiles against.
type CompileOptions struct {
	// Stored compiles every expression against the stored-expressions
	// environment, as for policies already persisted in the API server.
	// Otherwise expressions compile against the stricter new-expressions
	// environment, except those that also appear in Previous.
	Stored bool
	// Previous is the stored version of the policy being updated, if any:
	// expressions unchanged from it compile against the stored-expressions
	// environment, so that an upgrade never makes an existing policy
	// un-updatable (upgrade ratcheting, as ValidatingAdmissionPolicy does).
	Previous *schedv1alpha1.SchedulingPolicy
	// MaxErrors, when positive, stops compiling once that many errors are
	// found, and ends the errors with one saying so (as cel-go stops
	// listing an expression's issues at a hundred), so that an admission
	// webhook's denial stays small and quick. Zero compiles every
	// expression.
	MaxErrors int
	// Explain keeps each expression's type-checked form (its AST and
	// environment, about 25 KB per policy), so that Why can explain its
	// rules: for dry runs, not for the scheduler.
	Explain bool
	// ParamTypes types params for the param kinds it knows (custom
	// resources); see Environment.paramsDeclType.
	ParamTypes ParamTypes
}

// Program is one generation of a SchedulingPolicy, compiled: its
// selectors, expressions, params spec and enforcement rules. It is
// immutable once compiled, and owns the results its expressions remember
// (their memo slots, memo.go): every CompiledPolicy made of it, whatever
// its enforcement or params, shares them. Only a new generation (a spec
// change) compiles a new Program; a status change (a rollout wave promoted,
// paused or aborted) and a params change bind the same Program again.
type Program struct {
	Name       string
	UID        types.UID
	Generation int64
	// FailurePolicy is spec.failurePolicy, defaulted.
	FailurePolicy schedv1alpha1.FailurePolicyType
	// Selectors select the pods the policy may apply to, before its match
	// conditions.
	Selectors

	// Errors are the compile errors, with field paths and CEL positions.
	Errors field.ErrorList
	// Warnings are non-fatal findings, e.g. expressions that may be cut off
	// at runtime.
	Warnings []schedv1alpha1.ExpressionWarning

	conditions    []*boolRule
	variables     []*variable
	variableIndex map[string]int
	preEnqueue    []*boolRule
	filters       []*boolRule
	scores        []*scoreRule
	// placementFilters and placementScores are spec.placement.filters
	// and spec.placement.scores (placement.go).
	placementFilters []*placementRule
	placementScores  []*placementRule
	// victimRules are spec.preemption.victims, importance
	// spec.preemption.importance (preemption.go).
	victimRules  []*placementRule
	importance   *expr
	usesNodeInfo bool
	// paramSpec is the policy's paramKind and paramRef, nil without.
	paramSpec *ParamSpec
	// signs is what the filters, scores, messageExpressions and variables
	// read of the pod: what the memo keys of their results hold
	// (PodInput.key). reads is what every expression of the policy reads,
	// match conditions and preEnqueue rules too: whether a pod it selects
	// can be signed (Snapshot.Signature).
	signs podKeySpec
	reads podReads
	// podFields is what every expression of the policy reads of the pod
	// (projection.go): what of the pod its evaluations convert.
	podFields podFields
	// texts are the generation's rejection messages, formatted once
	// (Decision.String).
	texts *rejectionTexts
	// overridden: the policy has enforcementOverrides or a rollout
	// (HasOverrides). rules are what its enforcement is decided from
	// apart from status (enforcement.go).
	overridden bool
	rules      *enforcementRules
	// numbers is the compiling Environment's memo numbering: the slots of
	// the expressions come from it, and so do those of the lists of
	// policies compiled over it (Snapshot.List).
	numbers *memoNumbers
	// costBudget is the runtime cost budget of one evaluation of the
	// policy (celcost.PolicyEvaluationCostBudget unless the Compiler says
	// otherwise).
	costBudget uint64
}

// CompiledPolicy is a Program as it acts: with the enforcement its spec,
// its status (the rollout waves enforced) and, in a view for a namespace,
// the namespace's override give it, and, in a copy bound to params, the
// params object its expressions read. Copies are small and share the
// Program. When Errors is not empty, the policy is not active: evaluating
// it returns its compile error, and the caller applies FailurePolicy.
//
// For one pod, MatchAll resolves all of it in one place: the view for the
// pod's namespace (ForNamespace), then one binding per params object the
// pod's policy reads (WithParams), each then decided with FailurePolicy
// applied (Decision).
type CompiledPolicy struct {
	*Program
	// ResourceVersion is the version of the object (spec and status) this
	// enforcement was resolved from.
	ResourceVersion string
	Enforcement     schedv1alpha1.EnforcementAction
	// EnforcedBy is the field Enforcement comes from: EnforcedBySpec, an
	// override (spec.enforcementOverrides[i]) in the copy that applies to
	// a namespace (ForNamespace), or EnforcedByUnknownNamespace.
	EnforcedBy string

	// params, in a copy bound by WithParams, is the params object its
	// evaluations read, and base the policy it was bound from.
	params *Params
	base   *CompiledPolicy
	// views are the copies of a policy with enforcementOverrides, one per
	// enforcement a namespace may get (ForNamespace); nil without
	// overrides and in the copies. origin is the policy a copy was made
	// from, and view its index (0 for the policy itself), which tells the
	// copies apart in the keys of policy lists.
	views  *enforcementViews
	origin *CompiledPolicy
	view   int
	// wave is, in a copy for a rollout wave, its index + 1 (Wave).
	wave int
	// enforcedWaves are the waves (by name) its status enforces, and
	// rolloutKey the same in spec order (see WithRollout).
	enforcedWaves map[string]bool
	rolloutKey    string
}

// expr is one compiled expression.
type expr struct {
	path *field.Path // e.g. spec.filters[2].expression
	prg  celcost.Program
	// memo says whether the expression's results are kept per node
	// version (memo.go): when it reads nothing but node and constants,
	// directly or through variables, or only node and the pod fields its
	// policy's podReads name.
	memo memoKind
	// slot is the expression's index in the nodes' memo tables.
	slot int
	// readsParams: its memoized results are kept per params object.
	readsParams bool
	// checked is the type-checked expression, for dry-run explanations
	// (why.go): kept only under CompileOptions.Explain.
	checked *checked
	// paramsOnly: the expression reads params and nothing else but
	// constants, directly or through variables, so its result is a
	// function of the params object's version: evaluated once per params
	// version and kept with it (Params.memo), e.g. a variable splitting a
	// ConfigMap's list.
	paramsOnly bool
	// alone keeps the results of an expression that may be evaluated
	// without a node (a match condition, a preEnqueue rule or its
	// message, a variable that reads no node) per pod key (podmemo.go);
	// nil when they are not kept.
	alone *podMemo
}

type variable struct {
	name string
	expr
	// nodeScoped is true when the variable reads node or nodeInfo, directly
	// or through another variable.
	nodeScoped bool
	// reads is what the variable reads, directly or through others.
	reads inputs
}

// boolRule is a match condition, a preEnqueue rule or a filter.
type boolRule struct {
	name string
	expr
	message           string
	messageExpression *expr
}

type scoreRule struct {
	name string
	expr
	weight        int32
	normalization schedv1alpha1.ScoreNormalization
}

// CompileError is the error of a policy that did not compile.
type CompileError struct {
	Policy string
	Errors field.ErrorList
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("SchedulingPolicy %s does not compile: %v", e.Policy, e.Errors.ToAggregate())
}

// Err returns the policy's compile error, or nil.
func (p *Program) Err() error {
	if len(p.Errors) == 0 {
		return nil
	}
	return &CompileError{Policy: p.Name, Errors: p.Errors}
}

// Enforced says whether the scheduler acts on the policy's decisions:
// its enforcement is Enforce, not Audit.
func (p *CompiledPolicy) Enforced() bool { return p.Enforcement != schedv1alpha1.Audit }

// HasPreEnqueue says whether the policy has preEnqueue rules.
func (p *Program) HasPreEnqueue() bool { return len(p.preEnqueue) > 0 }

// HasFilters says whether the policy has filters.
func (p *Program) HasFilters() bool { return len(p.filters) > 0 }

// HasScores says whether the policy has score rules.
func (p *Program) HasScores() bool { return len(p.scores) > 0 }

// UsesNodeInfo says whether any expression of the policy reads nodeInfo, so
// that callers build the nodeInfo value only when it is needed.
func (p *Program) UsesNodeInfo() bool { return p.usesNodeInfo }

// ReadsPodGroup says whether an expression of the policy (a match
// condition, a variable, a preEnqueue rule, a filter or a score, or a
// message) reads podGroup.
func (p *Program) ReadsPodGroup() bool { return p.reads&podGroupRead != 0 }

// ReadsNamespaceObject says whether an expression of the policy reads
// namespaceObject (the pod's Namespace: its labels, among others).
func (p *Program) ReadsNamespaceObject() bool { return p.reads&podNamespaceRead != 0 }

// ReadsPodGroupMembers says whether an expression of the policy reads
// podGroup.assignedNodes (or podGroup whole), which changes whenever a
// member of the group is placed.
func (p *Program) ReadsPodGroupMembers() bool { return p.reads&podGroupMembersRead != 0 }

// PreEnqueueRuleNames returns the names of the preEnqueue rules, in order.
func (p *Program) PreEnqueueRuleNames() []string { return ruleNames(p.preEnqueue) }

// FilterRuleNames returns the names of the filters, in order.
func (p *Program) FilterRuleNames() []string { return ruleNames(p.filters) }

func ruleNames(rules []*boolRule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.name
	}
	return out
}

// NumScoreRules is len(ScoreRules()), without building them.
func (p *Program) NumScoreRules() int { return len(p.scores) }

// ScoreRules returns the names, weights and normalizations of the score
// rules, in order.
func (p *Program) ScoreRules() []ScoreRuleInfo {
	out := make([]ScoreRuleInfo, len(p.scores))
	for i, s := range p.scores {
		out[i] = ScoreRuleInfo{Name: s.name, Weight: s.weight, Normalization: s.normalization}
	}
	return out
}

// ScoreRuleInfo describes one score rule.
type ScoreRuleInfo struct {
	Name          string
	Weight        int32
	Normalization schedv1alpha1.ScoreNormalization
}

// Compile compiles a policy. It never fails: compile errors are in the
// result's Errors, and the result is inactive when there are any.
func (c *Compiler) Compile(policy *schedv1alpha1.SchedulingPolicy, opts CompileOptions) *CompiledPolicy {
	return c.CompileContext(context.Background(), policy, opts)
}

// CompileContext is Compile that stops when ctx is done: the expressions
// not compiled yet are not, and the result ends with an error saying why.
func (c *Compiler) CompileContext(ctx context.Context, policy *schedv1alpha1.SchedulingPolicy, opts CompileOptions) *CompiledPolicy {
	spec := &policy.Spec
	out := &CompiledPolicy{
		Program: &Program{
			Name:          policy.Name,
			UID:           policy.UID,
			Generation:    policy.Generation,
			FailurePolicy: spec.FailurePolicy,
			variableIndex: map[string]int{},
			texts:         &rejectionTexts{},
			numbers:       c.env.memo,
			costBudget:    c.costBudget,
		},
		ResourceVersion: policy.ResourceVersion,
		Enforcement:     spec.Enforcement,
		EnforcedBy:      EnforcedBySpec,
	}
	out.Selectors, out.Errors = NewSelectors(spec)
	var paramErrs field.ErrorList
	out.paramSpec, paramErrs = newParamSpec(spec)
	out.Errors = append(out.Errors, paramErrs...)
	overrides, overrideErrs, overrideWarnings := compileOverrides(spec)
	out.Errors = append(out.Errors, overrideErrs...)
	out.Warnings = append(out.Warnings, overrideWarnings...)
	// Objects that skipped the apiserver's defaulting (files in dry-run).
	if out.Enforcement == "" {
		out.Enforcement = schedv1alpha1.Enforce
	}
	waves, waveErrs := compileWaves(spec)
	out.Errors = append(out.Errors, waveErrs...)
	defer out.finishViews(policy, overrides, waves)
	if out.FailurePolicy == "" {
		out.FailurePolicy = schedv1alpha1.Fail
	}

	paramsType, warning := c.env.paramsDeclType(out.paramSpec, opts.ParamTypes)
	if warning != "" && len(paramErrs) == 0 {
		out.Warnings = append(out.Warnings, schedv1alpha1.ExpressionWarning{FieldRef: "spec.paramKind", Warning: warning})
	}
	pe, err := c.env.newParamsPolicyEnv(paramsType)
	if err != nil {
		out.Errors = append(out.Errors, field.InternalError(field.NewPath("spec"), err))
		return out
	}
	cc := &policyCompiler{ctx: ctx, env: pe, out: out, stored: storedExpressions(opts), scalarVariables: map[string]bool{}, maxErrors: opts.MaxErrors,
		explain: opts.Explain}
	cc.compile(spec)
	cc.compilePlacement(spec, c.env.placement)
	cc.compilePreemption(spec, c.env.preemption)
	switch {
	case cc.cancelled != nil:
		out.Errors = append(out.Errors, field.InternalError(field.NewPath("spec"),
			fmt.Errorf("compilation stopped before every expression was checked: %w", cc.cancelled)))
	case cc.truncated:
		out.Errors = append(out.Errors, field.Forbidden(field.NewPath("spec"),
			fmt.Sprintf("too many errors: the first %d are listed, the other expressions were not checked", opts.MaxErrors)))
	}
	if out.Err() == nil {
		out.memoizeFor()
		out.numbers.slots.assignSlots(out.Program)
	}
	return out
}

// memoizeFor keeps per-pod-field memoization for the expressions of a
// policy whose podReads key their results, and do not include the pod's
// name.
func (p *Program) memoizeFor() {
	// A pod's name is its own: results keyed by it would serve no other
	// pod, and only fill the memo.
	if p.signs.reads&(podReadsUnkeyable|podNameRead) == 0 {
		return
	}
	for _, e := range p.exprs() {
		if e.memo == memoPodAndNode || e.memo == memoPodAndNodeInfo {
			e.memo = notMemoized
		}
	}
}

// storedExpressions returns a predicate saying which expression texts compile
// against the stored-expressions environment.
func storedExpressions(opts CompileOptions) func(string) bool {
	if opts.Stored {
		return func(string) bool { return true }
	}
	if opts.Previous == nil {
		return func(string) bool { return false }
	}
	previous := sets.New[string]()
	s := &opts.Previous.Spec
	if s.Match != nil {
		for _, c := range s.Match.Conditions {
			previous.Insert(c.Expression)
		}
	}
	for _, v := range s.Variables {
		previous.Insert(v.Expression)
	}
	for _, rules := range [][]schedv1alpha1.Rule{s.PreEnqueue, s.Filters} {
		for _, r := range rules {
			previous.Insert(r.Expression, r.MessageExpression)
		}
	}
	for _, r := range s.Scores {
		previous.Insert(r.Expression)
	}
	if s.Placement != nil {
		for _, r := range s.Placement.Filters {
			previous.Insert(r.Expression)
		}
		for _, r := range s.Placement.Scores {
			previous.Insert(r.Expression)
		}
	}
	return previous.Has
}

type policyCompiler struct {
	ctx    context.Context
	env    *policyEnv
	out    *CompiledPolicy
	stored func(string) bool
	// scalarVariables says, per variable name, whether its values have a
	// declared size bound.
	scalarVariables map[string]bool
	// boundedTotal is the sum of the estimates of the bounded programs.
	boundedTotal uint64
	// maxErrors is CompileOptions.MaxErrors; truncated says that it was
	// reached, cancelled that ctx was done, and with what cause; either
	// skips every expression after.
	maxErrors int
	// explain is CompileOptions.Explain.
	explain   bool
	truncated bool
	cancelled error
	// podVariables is what the variables compiled so far that read no
	// node read of the pod.
	podVariables podKeySpec
}

// aloneMemo returns the memo of an expression that may be evaluated
// without a node, or nil (newPodMemo).
func (pc *policyCompiler) aloneMemo(refs *references) *podMemo {
	return newPodMemo(pc.out.numbers, refs, &pc.podVariables)
}

// stopped says whether the remaining expressions are skipped.
func (pc *policyCompiler) stopped() bool {
	if pc.cancelled != nil || pc.truncated {
		return true
	}
	if pc.ctx != nil {
		if err := context.Cause(pc.ctx); err != nil {
			pc.cancelled = err
			return true
		}
	}
	if pc.maxErrors > 0 && len(pc.out.Errors) >= pc.maxErrors {
		pc.truncated = true
		return true
	}
	return false
}

// outputKind is what an expression must evaluate to.
type outputKind int

const (
	outputAny outputKind = iota
	outputBool
	outputNumber
	outputString
)

func (k outputKind) String() string {
	switch k {
	case outputBool:
		return "bool"
	case outputNumber:
		return "int, uint or double"
	case outputString:
		return "string"
	default:
		return "any type"
	}
}

// scope says which variables an expression may read.
type scope int

const (
	// podScope: match conditions and preEnqueue rules, evaluated before any
	// node is considered.
	podScope scope = iota
	// nodeScope: variables, filters and scores.
	nodeScope
)

func (pc *policyCompiler) compile(spec *schedv1alpha1.SchedulingPolicySpec) {
	specPath := field.NewPath("spec")
	out := pc.out

	for i, v := range spec.Variables {
		path := specPath.Child("variables").Index(i).Child("expression")
		c := pc.check(path, v.Expression, outputAny, nodeScope, "")
		// Declare the variable even when it failed, as dyn, so that later
		// expressions report their own errors and not "undefined field".
		var outType *cel.Type
		if c != nil {
			outType = c.ast.OutputType()
		}
		pc.env.addVariable(v.Name, outType)
		pc.scalarVariables[v.Name] = outType != nil && isScalar(outType)
		if c == nil {
			continue
		}
		prg := pc.program(path, v.Expression, c)
		if prg == nil {
			continue
		}
		out.variableIndex[v.Name] = len(out.variables)
		out.variables = append(out.variables, &variable{name: v.Name, expr: expr{path: path, prg: prg, memo: c.refs.memo(), readsParams: c.refs.reads&readsParams != 0, paramsOnly: c.refs.paramsOnly(),
			alone: pc.aloneMemo(c.refs)},
			nodeScoped: c.refs.nodeScoped(), reads: c.refs.reads})
		if !c.refs.nodeScoped() {
			// What match conditions and preEnqueue rules may read through
			// variables (a variable that reads node is not available to
			// them).
			pc.podVariables.add(c.refs)
		}
	}

	// Conditions may read variables, so they compile after them.
	if m := spec.Match; m != nil {
		for i, c := range m.Conditions {
			path := specPath.Child("match", "conditions").Index(i).Child("expression")
			if e := pc.expression(path, c.Expression, outputBool, podScope, "match.conditions"); e != nil {
				out.conditions = append(out.conditions, &boolRule{name: c.Name, expr: *e})
			}
		}
	}
	out.preEnqueue = pc.rules(specPath.Child("preEnqueue"), spec.PreEnqueue, podScope, "preEnqueue")
	out.filters = pc.rules(specPath.Child("filters"), spec.Filters, nodeScope, "")
	for i, s := range spec.Scores {
		path := specPath.Child("scores").Index(i)
		e := pc.expression(path.Child("expression"), s.Expression, outputNumber, nodeScope, "")
		if e == nil {
			continue
		}
		weight, normalization := pc.scoring(path, s.Weight, s.Normalization)
		out.scores = append(out.scores, &scoreRule{name: s.Name, expr: *e, weight: weight, normalization: normalization})
	}
}

// normalizations are the values of a score rule's normalization.
var normalizations = []string{string(schedv1alpha1.MinMax), string(schedv1alpha1.MinMaxReverse), string(schedv1alpha1.None)}

// scoring returns the weight and normalization of the score rule (or
// placement score) at path with their defaults, 1 and MinMax, which an
// apiserver sets but files in dry-run may leave out. A normalization that
// is not one of the values is an error at path.normalization (the CRD's
// enum rejects it on the apiserver, nothing does for files), and the rule
// takes MinMax so that compiling goes on.
func (pc *policyCompiler) scoring(path *field.Path, weight int32, normalization schedv1alpha1.ScoreNormalization) (int32, schedv1alpha1.ScoreNormalization) {
	if weight == 0 {
		weight = 1
	}
	switch {
	case normalization == "":
		normalization = schedv1alpha1.MinMax
	case !slices.Contains(normalizations, string(normalization)):
		pc.out.Errors = append(pc.out.Errors, field.NotSupported(path.Child("normalization"), normalization, normalizations))
		normalization = schedv1alpha1.MinMax
	}
	return weight, normalization
}

func (pc *policyCompiler) rules(listPath *field.Path, rules []schedv1alpha1.Rule, sc scope, scopeName string) []*boolRule {
	var out []*boolRule
	for i, r := range rules {
		path := listPath.Index(i)
		e := pc.expression(path.Child("expression"), r.Expression, outputBool, sc, scopeName)
		var msg *expr
		if r.MessageExpression != "" {
			msg = pc.expression(path.Child("messageExpression"), r.MessageExpression, outputString, sc, scopeName)
		}
		if e == nil || (r.MessageExpression != "" && msg == nil) {
			continue
		}
		out = append(out, &boolRule{name: r.Name, expr: *e, message: r.Message, messageExpression: msg})
	}
	return out
}

// expression compiles one expression into a program, or records its errors
// and returns nil.
func (pc *policyCompiler) expression(path *field.Path, text string, want outputKind, sc scope, scopeName string) *expr {
	c := pc.check(path, text, want, sc, scopeName)
	if c == nil {
		return nil
	}
	prg := pc.program(path, text, c)
	if prg == nil {
		return nil
	}
	e := &expr{path: path, prg: prg, memo: c.refs.memo(), readsParams: c.refs.reads&readsParams != 0, paramsOnly: c.refs.paramsOnly()}
	if sc == podScope {
		e.alone = pc.aloneMemo(c.refs)
	}
	if pc.explain {
		e.checked = c
	}
	return e
}

// checked is a type-checked expression.
type checked struct {
	ast      *cel.Ast
	env      *cel.Env
	refs     *references
	estimate uint64 // worst-case cost
}

// typeChecked parses and type-checks an expression in an environment
// (stored or new, as the expression is), and checks its output type. It
// records the errors and returns a nil Ast on failure.
func (pc *policyCompiler) typeChecked(envSet *environment.EnvSet, path *field.Path, text string, want outputKind) (*cel.Env, *cel.Ast) {
	envType := environment.NewExpressions
	if pc.stored(text) {
		envType = environment.StoredExpressions
	}
	env, err := envSet.Env(envType)
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(path, err))
		return nil, nil
	}
	ast, issues := env.CompileSource(textSource{common.NewTextSource(text)})
	if len(issues.Errors()) > 0 {
		pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text), "compilation failed: "+issuesText(issues, text)))
		return nil, nil
	}
	if !outputMatches(ast.OutputType(), want) {
		pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text),
			fmt.Sprintf("must evaluate to %s, but evaluates to %s", want, ast.OutputType())))
		return nil, nil
	}
	return env, ast
}

// check parses and type-checks an expression, and checks its output type,
// scope and estimated cost. It records the errors and returns nil on failure.
func (pc *policyCompiler) check(path *field.Path, text string, want outputKind, sc scope, scopeName string) *checked {
	if pc.stopped() {
		return nil
	}
	env, ast := pc.typeChecked(pc.env.envSet, path, text, want)
	if ast == nil {
		return nil
	}

	refs := pc.references(ast)
	pc.out.podFields = pc.out.podFields.union(podTable().fieldsOf(&refs.pod))
	if refs.nodeInfo != nil {
		pc.out.usesNodeInfo = true
	}
	if sc == nodeScope {
		pc.out.signs.add(refs)
	}
	pc.out.reads.add(refs)
	if sc == podScope {
		if r := refs.firstNodeScoped(); r != nil {
			pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text), fmt.Sprintf(
				"%s at %s is not available in %s, which are evaluated before any node is considered: use pod, namespaceObject and variables that read only those",
				r.what, position(ast, r.id), scopeName)))
			return nil
		}
	}

	worst, err := env.EstimateCost(ast, pc.env.worst)
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(path, fmt.Errorf("estimating cost: %w", err)))
		return nil
	}
	typical, err := env.EstimateCost(ast, pc.env.typical)
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(path, fmt.Errorf("estimating cost: %w", err)))
		return nil
	}
	if !pc.withinCost(path, ast, typical.Max, fmt.Sprintf("lists of up to %d items", celcost.TypicalMaxItems), "objects with long lists") {
		return nil
	}
	estimate := worst
	return &checked{ast: ast, env: env, refs: refs, estimate: estimate.Max}
}

// program builds the program of a checked expression: bounded (untracked)
// when its worst case is provably within celcost.PerExpressionCostLimit, tracked
// otherwise.
func (pc *policyCompiler) program(path *field.Path, text string, c *checked) celcost.Program {
	var prg celcost.Program
	var err error
	// nodeInfo.pods is bounded by declaration only (celcost.MaxPodsPerNodeInfo), not
	// by what the scheduler may see, so expressions reading it stay tracked;
	// so is podGroup.assignedNodes (celcost.MaxPlacementNodes).
	//
	// Bounded programs are charged their estimate against the policy's
	// budget; so that this never rejects an evaluation that is cheap in
	// fact, at most half the budget goes to bounded programs, and the rest
	// are tracked and charged what they actually cost.
	if c.estimate <= celcost.PerExpressionCostLimit && !c.refs.nodeInfoPods && !c.refs.podGroupMembers && !c.refs.unboundedVariable && !c.refs.unboundedCall &&
		pc.boundedTotal+c.estimate <= celcost.PolicyEvaluationCostBudget/2 {
		pc.boundedTotal += c.estimate
		prg, err = celcost.NewBounded(c.env, c.ast, c.estimate)
	} else {
		prg, err = celcost.NewTracked(c.env, c.ast, celcost.PerExpressionCostLimit)
	}
	if err != nil {
		pc.out.Errors = append(pc.out.Errors, field.Invalid(path, quoted(text), "program construction failed: "+err.Error()))
		return nil
	}
	return prg
}

// loopHint points at the first loop (comprehension) of an expression, the
// usual cause of a high cost.
func loopHint(ast *cel.Ast) string {
	var loop celast.Expr
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if loop == nil && e.Kind() == celast.ComprehensionKind {
			loop = e
		}
	}))
	if loop == nil {
		return ""
	}
	return "; the loop at " + position(ast, loop.ID()) + " is the place to start"
}

// position is an expression's line and column, counted from 1, as CEL
// error messages give them.
func position(ast *cel.Ast, id int64) string {
	loc := ast.NativeRep().SourceInfo().GetStartLocation(id)
	return fmt.Sprintf("line %d, column %d", loc.Line(), loc.Column()+1)
}

func outputMatches(t *cel.Type, want outputKind) bool {
	if t.IsExactType(cel.DynType) || t.IsExactType(cel.AnyType) {
		return true // checked at runtime
	}
	switch want {
	case outputBool:
		return t.IsExactType(cel.BoolType)
	case outputNumber:
		return t.IsExactType(cel.IntType) || t.IsExactType(cel.UintType) || t.IsExactType(cel.DoubleType)
	case outputString:
		return t.IsExactType(cel.StringType)
	default:
		return true
	}
}

// inputs are the activation's variables an expression reads.
type inputs uint8

const (
	readsPod inputs = 1 << iota
	readsNamespace
	readsNode
	readsNodeInfo
	// readsParams: the expression reads params, so its result depends on
	// the params object (CompiledPolicy.Params) the policy is bound to: it
	// is never node-only, and a cache of its results must key on
	// Params.Key().
	readsParams
	// readsPodGroup: the expression reads the pod's group (podGroup), part
	// of the pod's memo key like the namespace object.
	readsPodGroup
	readsAll = readsPod | readsNamespace | readsNode | readsNodeInfo | readsParams | readsPodGroup
)

// references are what an expression reads that matters for scoping,
// tracking and caching.
type references struct {
	// reads is what the expression reads, directly or through variables.
	reads inputs
	// podFields are the fields of pod it reads: "spec", "metadata.labels",
	// ...; podWhole is set when it reads pod or pod.metadata as a whole
	// (or something this cannot follow).
	podFields map[string]bool
	podWhole  bool
	// pod is what it reads of the pod, to convert it (projection.go).
	pod podProjection
	// labelKeys are the keys of the pod's labels it reads through a
	// constant key (pod.metadata.labels['k'], [?'k'], .k, .?k, has(...)
	// and 'k' in ...); labelsWhole is set when it also uses the labels
	// otherwise (iterates them, passes the map on, tests has() of the map),
	// so that it may read any of them.
	labelKeys      map[string]bool
	labelsWhole    bool
	node, nodeInfo *reference
	// nodeVariable is the first variables.<name> read whose variable reads
	// node or nodeInfo.
	nodeVariable *reference
	// podGroupMembers: reads podGroup.assignedNodes (or podGroup as a
	// whole), which changes whenever a member of the group is placed.
	podGroupMembers bool
	// nodeInfoPods: reads nodeInfo.pods; unboundedVariable: reads a variable
	// holding a list, map or dyn. The sizes of both are assumed, not
	// declared, so such expressions are tracked at runtime.
	nodeInfoPods      bool
	unboundedVariable bool
	// unboundedCall: calls a function whose result the compile-time
	// estimate cannot bound (flatten: its lists may be the same long list
	// many times over), so the expression is tracked, and the call priced
	// by its actual result before it runs.
	unboundedCall bool
	// readsVariables: reads variables.<name> or variables as a whole.
	readsVariables bool
}

type reference struct {
	id   int64
	what string
}

// memo says how the expression's results can be memoized (memo.go): per
// node version, plus the generation of the scheduler's NodeInfo when it
// reads nodeInfo, plus the values of the pod fields its policy reads when
// it reads the pod or its namespace. A policy whose podReads cannot key
// its results (podReadsUnkeyable) memoizes only the expressions that do
// not read the pod (memoizeFor). What reads params is memoized per params
// object too (expr.readsParams).
func (r *references) memo() memoKind {
	switch reads := r.reads &^ readsParams; {
	case reads&^readsNode == 0:
		return memoNode
	case reads&^(readsNode|readsNodeInfo) == 0:
		return memoNodeInfo
	case reads&^(readsPod|readsNamespace|readsPodGroup|readsNode) == 0:
		return memoPodAndNode
	case reads&^readsAll == 0:
		return memoPodAndNodeInfo
	}
	return notMemoized
}

// paramsOnly says whether the expression reads params and nothing else.
func (r *references) paramsOnly() bool { return r.reads == readsParams }

func (r *references) nodeScoped() bool {
	return r.node != nil || r.nodeInfo != nil || r.nodeVariable != nil
}

func (r *references) firstNodeScoped() *reference {
	var first *reference
	for _, c := range []*reference{r.node, r.nodeInfo, r.nodeVariable} {
		if c != nil && (first == nil || c.id < first.id) {
			first = c
		}
	}
	return first
}

// references finds what an expression reads: its root variables, the
// pod's fields, the variables it uses, and whether it reads the whole pod
// (a bare pod or pod.metadata) or nodeInfo.pods.
func (pc *policyCompiler) references(ast *cel.Ast) *references {
	v := &referenceVisitor{pc: pc, refs: &references{podFields: map[string]bool{}, labelKeys: map[string]bool{}}}
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		v.projection(e)
		switch e.Kind() {
		case celast.CallKind:
			v.call(e.AsCall())
		case celast.IdentKind:
			v.ident(e)
		case celast.SelectKind:
			v.selection(e)
		}
	}))
	refs := v.refs
	// A bare `variables` (not variables.<name>) may read any variable;
	// likewise a bare `pod` or `pod.metadata`.
	if v.variablesIdents > v.variablesSelects {
		for _, variable := range pc.out.variables {
			refs.reads |= variable.reads
		}
	}
	refs.podWhole = v.podIdents > v.podSelects || v.metadataSelects > v.metadataFieldSelects
	refs.pod = v.podProjection()
	refs.labelsWhole = v.labelsUses > v.labelsKeyed
	if v.podGroupIdents > v.podGroupSelects {
		refs.podGroupMembers = true // a bare podGroup may be read whole
	}
	return refs
}

// referenceVisitor collects an expression's references, node by node.
type referenceVisitor struct {
	pc   *policyCompiler
	refs *references
	// How often `variables`, `pod` and `pod.metadata` appear, and how
	// often as the operand of a field selection: more of the first means
	// a bare use, which may read anything of it.
	variablesIdents, variablesSelects                            int
	podIdents, podSelects, metadataSelects, metadataFieldSelects int
	// labelsUses counts pod.metadata.labels (and pod.metadata.?labels),
	// labelsKeyed those that are the operand of a constant key's access.
	labelsUses, labelsKeyed int
	// podGroupIdents counts podGroup, podGroupSelects the field
	// selections whose operand it is.
	podGroupIdents, podGroupSelects int
	// For podProjection: podFieldExprs counts the expressions pod.<f>
	// (pod.?<f>, has(pod.<f>)), podFieldUses the same per field,
	// podFieldSelects per field those that are the operand of a selection
	// of one of its own fields, whose names are podSubFields.
	podFieldExprs                 int
	podFieldUses, podFieldSelects map[string]int
	podSubFields                  map[string]map[string]bool
}

// projection counts the selections of the pod's fields and of their
// fields (podProjection).
func (v *referenceVisitor) projection(e celast.Expr) {
	if v.podFieldUses == nil {
		v.podFieldUses, v.podFieldSelects, v.podSubFields = map[string]int{}, map[string]int{}, map[string]map[string]bool{}
	}
	if name, ok := podFieldOf(e); ok {
		v.podFieldExprs++
		v.podFieldUses[name]++
	}
	if op, sub, ok := fieldSelection(e); ok {
		if name, ok := podFieldOf(op); ok {
			v.podFieldSelects[name]++
			if v.podSubFields[name] == nil {
				v.podSubFields[name] = map[string]bool{}
			}
			v.podSubFields[name][sub] = true
		}
	}
}

// podProjection is what the expression reads of the pod: the whole pod
// when it uses pod otherwise than to select a field; each field whole when
// it uses it otherwise than to select one of its fields (has(pod.spec)
// too), else the fields it selects of it (has(pod.spec.nodeName) tests
// one). Conservative: a comprehension variable named pod counts as the
// pod, and an unknown field as the whole pod (podFieldTable.fieldsOf).
func (v *referenceVisitor) podProjection() podProjection {
	if v.podIdents > v.podFieldExprs {
		return podProjection{whole: true}
	}
	p := podProjection{fields: map[string]map[string]bool{}}
	for name, uses := range v.podFieldUses {
		if uses > v.podFieldSelects[name] {
			p.fields[name] = nil
			continue
		}
		p.fields[name] = v.podSubFields[name]
	}
	return p
}

// fieldSelection returns the operand and the field of e when e is a field
// selection: x.f, has(x.f) or x.?f.
func fieldSelection(e celast.Expr) (celast.Expr, string, bool) {
	switch e.Kind() {
	case celast.SelectKind:
		sel := e.AsSelect()
		return sel.Operand(), sel.FieldName(), true
	case celast.CallKind:
		call := e.AsCall()
		if call.FunctionName() != operators.OptSelect {
			return nil, "", false
		}
		if name, ok := stringLiteral(call.Args(), 1); ok {
			return call.Args()[0], name, true
		}
	}
	return nil, "", false
}

// podFieldOf returns f when e is pod.f, has(pod.f) or pod.?f.
func podFieldOf(e celast.Expr) (string, bool) {
	op, name, ok := fieldSelection(e)
	if !ok || op.Kind() != celast.IdentKind || op.AsIdent() != PodVar {
		return "", false
	}
	return name, true
}

// call handles flatten (unbounded) and optional selections: pod.?field and
// pod.metadata.?field read one field, as plain selections do.
func (v *referenceVisitor) call(call celast.CallExpr) {
	args := call.Args()
	switch call.FunctionName() {
	case "flatten":
		v.refs.unboundedCall = true
	case operators.OptSelect:
		name, ok := stringLiteral(args, 1)
		if !ok {
			return
		}
		op := args[0]
		switch {
		case op.Kind() == celast.IdentKind && op.AsIdent() == PodVar && name != "metadata":
			v.podSelects++
			v.refs.podFields[name] = true
		case isPodMetadata(op):
			v.metadataFieldSelects++
			v.refs.podFields["metadata."+name] = true
			if name == "labels" {
				v.labelsUses++
			}
		case isPodLabels(op):
			v.labelKey(name)
		case op.Kind() == celast.IdentKind && op.AsIdent() == PodGroupVar:
			v.podGroupField(name)
		}
	case operators.Index, operators.OptIndex:
		if key, ok := stringLiteral(args, 1); ok && isPodLabels(args[0]) {
			v.labelKey(key)
		}
	case operators.In:
		if key, ok := stringLiteral(args, 0); ok && len(args) == 2 && isPodLabels(args[1]) {
			v.labelKey(key)
		}
	}
}

// labelKey records a read of the pod's label key through a constant.
func (v *referenceVisitor) labelKey(key string) {
	v.labelsKeyed++
	v.refs.labelKeys[key] = true
}

// stringLiteral returns args[i] when it is a string literal.
func stringLiteral(args []celast.Expr, i int) (string, bool) {
	if len(args) != 2 || args[i].Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := args[i].AsLiteral().Value().(string)
	return s, ok
}

// ident handles the root variables. A comprehension variable of the same
// name counts as the input: conservative, it only makes less cacheable.
func (v *referenceVisitor) ident(e celast.Expr) {
	refs := v.refs
	switch e.AsIdent() {
	case PodVar:
		refs.reads |= readsPod
		v.podIdents++
	case NamespaceVar:
		refs.reads |= readsNamespace
	case VariablesVar:
		v.variablesIdents++
		refs.readsVariables = true
	case PodGroupVar:
		refs.reads |= readsPodGroup
		v.podGroupIdents++
	case ParamsVar:
		refs.reads |= readsParams
		// Params have no declared size bound: tracked.
		refs.unboundedVariable = true
	case NodeVar:
		refs.reads |= readsNode
		if refs.node == nil {
			refs.node = &reference{id: e.ID(), what: "node"}
		}
	case NodeInfoVar:
		refs.reads |= readsNodeInfo
		if refs.nodeInfo == nil {
			refs.nodeInfo = &reference{id: e.ID(), what: "nodeInfo"}
		}
	}
}

// selection handles field selections of the pod, its metadata, variables
// and nodeInfo.
func (v *referenceVisitor) selection(e celast.Expr) {
	refs := v.refs
	sel := e.AsSelect()
	op := sel.Operand()
	if isPodMetadata(op) {
		v.metadataFieldSelects++
		refs.podFields["metadata."+sel.FieldName()] = true
		if sel.FieldName() == "labels" {
			v.labelsUses++
		}
	}
	if isPodLabels(op) {
		// pod.metadata.labels.k, or has(pod.metadata.labels.k).
		v.labelKey(sel.FieldName())
	}
	if op.Kind() != celast.IdentKind {
		return
	}
	switch op.AsIdent() {
	case PodVar:
		v.podSelects++
		if sel.FieldName() == "metadata" {
			v.metadataSelects++
		} else {
			refs.podFields[sel.FieldName()] = true
		}
	case VariablesVar:
		v.variable(e.ID(), sel.FieldName())
	case PodGroupVar:
		v.podGroupField(sel.FieldName())
	case NodeInfoVar:
		if sel.FieldName() == "pods" {
			refs.nodeInfoPods = true
		}
	}
}

// podGroupField handles podGroup.<field> (and podGroup.?<field>): only
// assignedNodes reads the members.
func (v *referenceVisitor) podGroupField(name string) {
	v.podGroupSelects++
	if name == podGroupAssignedNodes {
		v.refs.podGroupMembers = true
	}
}

// variable handles variables.<name>: the expression reads what the
// variable reads.
func (v *referenceVisitor) variable(id int64, name string) {
	refs, out := v.refs, v.pc.out
	v.variablesSelects++
	i, ok := out.variableIndex[name]
	if ok {
		refs.reads |= out.variables[i].reads
	} else {
		refs.reads |= readsAll // a variable that did not compile
	}
	if !v.pc.scalarVariables[name] {
		refs.unboundedVariable = true
	}
	if refs.nodeVariable == nil && ok && out.variables[i].nodeScoped {
		refs.nodeVariable = &reference{id: id, what: "variables." + name + " (it reads node or nodeInfo)"}
	}
}

// withinCost checks an expression's typical estimated cost: over
// MaxEstimatedCost is an error (false), over WarnEstimatedCost a warning.
// assumed says what the estimate assumed, cutOff where it will be cut off.
func (pc *policyCompiler) withinCost(path *field.Path, ast *cel.Ast, estimate uint64, assumed, cutOff string) bool {
	if estimate > celcost.MaxEstimatedCost {
		pc.out.Errors = append(pc.out.Errors, field.Forbidden(path, fmt.Sprintf(
			"estimated cost %d exceeds the limit of %d for one expression (estimated with %s)%s",
			estimate, celcost.MaxEstimatedCost, assumed, loopHint(ast))))
		return false
	}
	if estimate > celcost.WarnEstimatedCost {
		pc.out.Warnings = append(pc.out.Warnings, schedv1alpha1.ExpressionWarning{
			FieldRef: path.String(),
			Warning: fmt.Sprintf("estimated cost %d (with %s) exceeds the runtime limit of %d per evaluation: it will be cut off on %s%s",
				estimate, assumed, celcost.PerExpressionCostLimit, cutOff, loopHint(ast)),
		})
	}
	return true
}

// isPodLabels says whether e is pod.metadata.labels or
// pod.metadata.?labels, the value of the pod's labels (not has() of them).
func isPodLabels(e celast.Expr) bool {
	switch e.Kind() {
	case celast.SelectKind:
		sel := e.AsSelect()
		return !sel.IsTestOnly() && sel.FieldName() == "labels" && isPodMetadata(sel.Operand())
	case celast.CallKind:
		call := e.AsCall()
		name, ok := stringLiteral(call.Args(), 1)
		return ok && call.FunctionName() == operators.OptSelect && name == "labels" && isPodMetadata(call.Args()[0])
	}
	return false
}

// isPodMetadata says whether e is pod.metadata.
func isPodMetadata(e celast.Expr) bool {
	return e.Kind() == celast.SelectKind && e.AsSelect().FieldName() == "metadata" &&
		e.AsSelect().Operand().Kind() == celast.IdentKind && e.AsSelect().Operand().AsIdent() == PodVar
}
