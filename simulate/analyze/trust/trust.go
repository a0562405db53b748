// Package trust finds the rules of a SchedulingPolicy that let a pod's
// author widen where the pod may go: rules that decide by fields of the
// pod (its labels, annotations, spec), which whoever creates the pod
// writes, in a way that a pod setting them passes where a pod without them
// does not. celsched analyze reports them as tenant-writable-input.
//
// The analysis reads the type-checked CEL of the policy's filters,
// preEnqueue rules and match conditions (and of the variables they read),
// and its podSelector. It compares each pod with the baseline pod: the
// same pod without the fields the rule reads (no such label or annotation,
// no such optional field). A filter or preEnqueue rule widens when the
// author can make it true where it is not for the baseline pod (it then
// admits nodes, or releases a pod, that it refuses the baseline); a match
// condition or podSelector widens when the author can make it false where
// it is true for the baseline pod (the policy's filters and preEnqueue
// rules then no longer apply). A rule under which a pod that sets a field
// can only go where the baseline pod goes, or fewer places, restricts: it
// is not reported, however it reads the pod.
//
// Each boolean sub-expression gets its value for the baseline pod when
// that is known without the node, params or namespace (has() of a pod
// field is false, an optional pod field is empty, literals compare), and
// the pod fields by which the author can raise it (make it true where it
// is not for the baseline) and lower it. &&, ||, !, ?: and cel.bind
// combine them; any other expression that reads pod fields is taken as
// one the author can make true or false (a comparison of a pod label with
// a node label lets the author pick the nodes). Fields the author does not
// choose are not the author's: the namespace and what the API server, the
// scheduler or the kubelet set (uid, status, ...), and container resources
// (a pod that requests a GPU to use GPU nodes is charged for it by
// NodeResourcesFit and ResourceQuota).
package trust

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// RuleKind is where a rule sits in a policy.
type RuleKind string

// The kinds of rules that fence pods.
const (
	Filter      RuleKind = "filter"
	PreEnqueue  RuleKind = "preEnqueue rule"
	Condition   RuleKind = "match condition"
	PodSelector RuleKind = "podSelector"
)

// Widening is a rule of a policy whose pass the pod's author can widen.
type Widening struct {
	Kind RuleKind
	// Field is the rule's place in the policy: spec.filters[0],
	// spec.preEnqueue[1], spec.match.conditions[0], spec.match.podSelector.
	Field string
	// Name is the rule's or match condition's name; empty for the
	// podSelector.
	Name string
	// PodFields are the pod's fields by which its author widens the rule,
	// as CEL reads them (pod.metadata.labels['tier']), sorted.
	PodFields []string
}

// Widenings finds the rules of a policy whose pass a pod's author can
// widen: filters and preEnqueue rules, and, for a policy that has either,
// the match conditions and podSelector requirements that exempt pods by
// their fields; in the order podSelector, match conditions, preEnqueue
// rules, filters, each in spec order. A policy of score rules only fences
// nothing. checked is the policy's expressions (engine.Environment.Check);
// an expression missing from it (it did not check) is not analyzed.
func Widenings(policy *schedv1alpha1.SchedulingPolicy, checked *engine.CheckedPolicy) []Widening {
	spec := &policy.Spec
	if len(spec.Filters)+len(spec.PreEnqueue) == 0 {
		return nil
	}
	a := &analyzer{variables: map[string]engine.CheckedExpression{}, facts: map[string]*fact{}}
	for _, v := range checked.Variables {
		a.variables[v.Name] = v
	}
	var out []Widening
	if m := spec.Match; m != nil && m.PodSelector != nil {
		if fields := exemptingLabels(m.PodSelector); len(fields) > 0 {
			out = append(out, Widening{Kind: PodSelector, Field: "spec.match.podSelector", PodFields: fields})
		}
	}
	rules := []struct {
		kind  RuleKind
		exprs []engine.CheckedExpression
	}{{Condition, checked.Conditions}, {PreEnqueue, checked.PreEnqueue}, {Filter, checked.Filters}}
	ignore := spec.FailurePolicy == schedv1alpha1.Ignore
	for _, r := range rules {
		for _, e := range r.exprs {
			f := a.expression(e.AST)
			widens := f.raise
			switch {
			case r.kind == Condition:
				widens = f.lower // false exempts the pod from the policy
			case ignore && f.neverFalse():
				// The baseline pod passes the rule wherever it is not
				// true: an error skips the rule under Ignore. Nothing the
				// author sets lets it pass more.
				widens = nil
			case ignore:
				// An error skips the rule: making it fail passes it.
				widens = widens.Union(f.errFields())
			}
			if widens.Len() > 0 {
				out = append(out, Widening{Kind: r.kind, Field: strings.TrimSuffix(e.Field, ".expression"), Name: e.Name, PodFields: sets.List(widens)})
			}
		}
	}
	return out
}

// exemptingLabels are the labels of a podSelector's requirements that a
// pod without the label meets and a pod with it may not (NotIn,
// DoesNotExist, !=): setting the label takes the pod out of the policy.
// The others (In, Exists, =) select only pods that set the label, which
// can only narrow where they go.
func exemptingLabels(s *metav1.LabelSelector) []string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil // the policy does not compile
	}
	requirements, _ := sel.Requirements()
	out := sets.New[string]()
	for _, r := range requirements {
		switch r.Operator() {
		case selection.NotIn, selection.DoesNotExist, selection.NotEquals:
			out.Insert(fieldName([]string{"metadata", "labels", mapKey(r.Key())}))
		}
	}
	return sets.List(out)
}

// mapKey is the segment of a map key: ['tier'].
func mapKey(k string) string { return "['" + k + "']" }

// fact is what the analysis knows of an expression.
type fact struct {
	// value is the expression's value for the baseline pod when it is
	// known without the other inputs (known): a literal's Go value
	// (string, int64, uint64, float64, bool, []any), emptyMap, or none
	// (an empty optional).
	value any
	known bool
	// fields are the author's pod fields the expression reads.
	fields sets.Set[string]
	// raise and lower are, for a bool, the author's fields by which the
	// author can make it true where it is not true for the baseline pod,
	// and false where it is not false.
	raise, lower sets.Set[string]
	// pod is set when the expression is the pod or a field of it, path
	// its segments after "pod" (metadata, labels, ['tier']; [] for the
	// elements of a list a comprehension iterates).
	pod  bool
	path []string
	// variables marks the variables root.
	variables bool
	// err says the expression is an error for the baseline pod (it reads
	// a label the baseline does not have with [] rather than [?]); nf and
	// nt that, as a bool, it is never false (true or an error) and never
	// true (false or an error) for the baseline, whatever the other
	// inputs. errs are the author's fields by which the author can make
	// it an error (a conversion of a field's value: int(), quantity(),
	// ...). What an error does is the policy's failurePolicy: Fail
	// refuses, Ignore skips the rule (Widenings).
	err, nf, nt bool
	errs        sets.Set[string]
}

// neverFalse says the expression is never false for the baseline pod:
// true, or an error; neverTrue that it is never true.
func (f *fact) neverFalse() bool { return f.err || f.truth() == isTrue || f.nf }
func (f *fact) neverTrue() bool  { return f.err || f.truth() == isFalse || f.nt }

// errFields are the fields by which the author makes it an error.
func (f *fact) errFields() sets.Set[string] {
	if f.errs == nil {
		return sets.New[string]()
	}
	return f.errs
}

// none is an empty optional; emptyMap a map without entries (a pod's
// labels or annotations, for the baseline pod: it has not the key a rule
// reads).
type (
	noneValue  struct{}
	emptyValue struct{}
)

var (
	none     = noneValue{}
	emptyMap = emptyValue{}
)

// unknown is the fact of an expression whose value for the baseline pod
// is not known, reading the fields given; known of one whose value is v.
func unknown(fields ...sets.Set[string]) *fact {
	return reads(fields).atom()
}

func known(v any, fields ...sets.Set[string]) *fact {
	f := reads(fields)
	f.value, f.known = v, true
	return f.atom()
}

func reads(fields []sets.Set[string]) *fact {
	f := &fact{fields: sets.New[string]()}
	for _, s := range fields {
		f.fields = f.fields.Union(s)
	}
	return f
}

// atom sets raise and lower of an expression that the analysis does not
// look into: the author can move it whichever way its fields allow (not
// above true, nor below false, for the baseline pod).
func (f *fact) atom() *fact {
	f.raise, f.lower = f.fields.Clone(), f.fields.Clone()
	f.trim()
	return f
}

// trim clears what the value for the baseline pod rules out: nothing
// raises what is true, nothing lowers what is false.
func (f *fact) trim() {
	switch f.truth() {
	case isTrue:
		f.raise = sets.New[string]()
	case isFalse:
		f.lower = sets.New[string]()
	}
}

type truth int

const (
	unknownTruth truth = iota
	isTrue
	isFalse
)

func (f *fact) truth() truth {
	if b, ok := f.value.(bool); ok && f.known {
		if b {
			return isTrue
		}
		return isFalse
	}
	return unknownTruth
}

func boolFact(t truth, fields sets.Set[string]) *fact {
	f := &fact{fields: fields, raise: sets.New[string](), lower: sets.New[string]()}
	if t != unknownTruth {
		f.value, f.known = t == isTrue, true
	}
	return f
}

// canTrue says whether the expression may be true for some pod; canFalse
// whether it may be false.
func (f *fact) canTrue() bool  { return f.truth() != isFalse || f.raise.Len() > 0 }
func (f *fact) canFalse() bool { return f.truth() != isTrue || f.lower.Len() > 0 }

// analyzer walks one policy's expressions; it remembers the facts of the
// variables it read (by name).
type analyzer struct {
	variables map[string]engine.CheckedExpression
	facts     map[string]*fact
}

// scope binds comprehension variables (and cel.bind's) to facts.
type scope map[string]*fact

func (s scope) with(bindings map[string]*fact) scope {
	out := make(scope, len(s)+len(bindings))
	for k, v := range s {
		out[k] = v
	}
	for k, v := range bindings {
		if k != "" {
			out[k] = v
		}
	}
	return out
}

func (a *analyzer) expression(ast *cel.Ast) *fact {
	native := ast.NativeRep()
	return (&walker{a: a, ast: native}).eval(native.Expr(), nil)
}

// variable is the fact of variables.<name>: unknown when it did not
// check, or while it is being read (a cycle does not check either).
func (a *analyzer) variable(name string) *fact {
	if f, ok := a.facts[name]; ok {
		return f
	}
	v, ok := a.variables[name]
	if !ok {
		return unknown()
	}
	a.facts[name] = unknown()
	f := a.expression(v.AST)
	a.facts[name] = f
	return f
}

// conversions are the functions that fail on a value that does not
// parse: the author of the value makes them an error.
var conversions = sets.New("int", "uint", "double", "bool", "duration", "timestamp", "quantity", "ip", "cidr", "semver", "url",
	"parseInt", "parseFloat")

// walker evaluates the facts of one expression's AST.
type walker struct {
	a   *analyzer
	ast *celast.AST
}

func (w *walker) eval(e celast.Expr, sc scope) *fact {
	switch e.Kind() {
	case celast.LiteralKind:
		return known(e.AsLiteral().Value())
	case celast.IdentKind:
		return w.ident(e.AsIdent(), sc)
	case celast.SelectKind:
		return w.selection(e, sc)
	case celast.CallKind:
		return w.call(e, sc)
	case celast.ComprehensionKind:
		return w.comprehension(e, sc)
	case celast.ListKind:
		elements := e.AsList().Elements()
		values := make([]any, 0, len(elements))
		f := unknown()
		allKnown := true
		for _, el := range elements {
			ef := w.eval(el, sc)
			f.fields = f.fields.Union(ef.fields)
			allKnown = allKnown && ef.known
			values = append(values, ef.value)
		}
		if allKnown {
			return known(values, f.fields)
		}
		return f.atom()
	case celast.MapKind:
		f := unknown()
		for _, entry := range e.AsMap().Entries() {
			me := entry.AsMapEntry()
			f.fields = f.fields.Union(w.eval(me.Key(), sc).fields).Union(w.eval(me.Value(), sc).fields)
		}
		return f.atom()
	case celast.StructKind:
		f := unknown()
		for _, field := range e.AsStruct().Fields() {
			f.fields = f.fields.Union(w.eval(field.AsStructField().Value(), sc).fields)
		}
		return f.atom()
	}
	return unknown()
}

func (w *walker) ident(name string, sc scope) *fact {
	if f, ok := sc[name]; ok {
		return f
	}
	switch name {
	case engine.PodVar:
		return podField(nil, nil)
	case engine.VariablesVar:
		return &fact{variables: true, fields: sets.New[string](), raise: sets.New[string](), lower: sets.New[string]()}
	}
	return unknown() // node, nodeInfo, namespaceObject, params: not the pod's author's
}

// podField is the fact of a field of the pod (path after "pod"), with the
// value it has for the baseline pod when known (nil: unknown).
func podField(path []string, baseline any) *fact {
	f := &fact{pod: true, path: path, fields: sets.New[string]()}
	if name := fieldName(path); authored(name) {
		f.fields.Insert(name)
	}
	if baseline != nil {
		f.value, f.known = baseline, true
	}
	return f.atom()
}

// extend is a field of a pod field: its labels and annotations are maps
// without the key a rule reads, for the baseline pod; an optional field
// (?. or [?]) of it is empty; what else it holds is not known.
func extend(parent *fact, segment string, optional bool) *fact {
	if isLabels(parent.path) && !strings.HasPrefix(segment, "[") {
		segment = mapKey(segment) // pod.metadata.labels.tier is labels['tier']
	}
	path := append(slices.Clone(parent.path), segment)
	var baseline any
	switch {
	case optional && authored(fieldName(path)):
		baseline = none
	case isLabels(path):
		baseline = emptyMap
	}
	return podField(path, baseline)
}

// isLabels says whether a path is the pod's labels or annotations.
func isLabels(path []string) bool {
	return len(path) == 2 && path[0] == "metadata" && (path[1] == "labels" || path[1] == "annotations")
}

func (w *walker) selection(e celast.Expr, sc scope) *fact {
	sel := e.AsSelect()
	op := w.eval(sel.Operand(), sc)
	switch {
	case op.variables:
		return w.a.variable(sel.FieldName())
	case op.pod:
		field := extend(op, sel.FieldName(), false)
		if isLabels(op.path) && !sel.IsTestOnly() {
			field.err = true // labels.tier: the baseline has no such key
		}
		if sel.IsTestOnly() {
			// has(pod.<field>): false for the baseline pod.
			if field.fields.Len() > 0 {
				return known(false, field.fields)
			}
			return unknown()
		}
		return field
	}
	return unknown(op.fields)
}

func (w *walker) call(e celast.Expr, sc scope) *fact {
	call := e.AsCall()
	args := call.Args()
	fn := call.FunctionName()
	switch fn {
	case operators.LogicalAnd, operators.LogicalOr:
		f := w.eval(args[0], sc)
		for _, arg := range args[1:] {
			if fn == operators.LogicalAnd {
				f = and(f, w.eval(arg, sc))
			} else {
				f = or(f, w.eval(arg, sc))
			}
		}
		return f
	case operators.LogicalNot:
		return not(w.eval(args[0], sc))
	case operators.NotStrictlyFalse:
		return w.eval(args[0], sc)
	case operators.Conditional:
		return conditional(w.eval(args[0], sc), w.eval(args[1], sc), w.eval(args[2], sc))
	case operators.Index, operators.OptIndex, operators.OptSelect:
		return w.index(fn, args, sc)
	}
	var target *fact
	if call.IsMemberFunction() {
		target = w.eval(call.Target(), sc)
	}
	facts := make([]*fact, len(args))
	for i, arg := range args {
		facts[i] = w.eval(arg, sc)
	}
	fields := sets.New[string]()
	anyErr, errs := false, sets.New[string]()
	for _, f := range append(facts, target) {
		if f != nil {
			fields = fields.Union(f.fields)
			anyErr = anyErr || f.err
			errs = errs.Union(f.errFields())
		}
	}
	if anyErr {
		// An error of an operand is the call's.
		f := unknown(fields)
		f.err, f.errs = true, errs
		return f
	}
	if conversions.Has(fn) {
		// Converting what the author writes fails on a value the
		// author chooses.
		f := unknown(fields)
		f.errs = errs.Union(fields)
		return f
	}
	switch fn {
	case "orValue":
		if target == nil || len(facts) != 1 {
			break
		}
		var f *fact
		if target.pod {
			// The pod field, or the default: a field still, for what reads
			// into it (its elements, in a loop).
			f = podField(target.path, nil)
		} else {
			f = unknown()
		}
		f.fields = f.fields.Union(fields)
		if target.known && target.value == none && facts[0].known {
			f.value, f.known = facts[0].value, true
		}
		return f.atom()
	case "hasValue":
		if target != nil && target.known && target.value == none {
			return known(false, fields)
		}
	case operators.Equals, operators.NotEquals:
		if len(facts) == 2 && facts[0].known && facts[1].known {
			if eq, ok := equal(facts[0].value, facts[1].value); ok {
				return known(eq == (fn == operators.Equals), fields)
			}
		}
	case operators.In:
		if len(facts) != 2 {
			break
		}
		if k, ok := facts[0].value.(string); ok && facts[0].known && facts[1].pod && isLabels(facts[1].path) {
			// 'tier' in pod.metadata.labels reads labels['tier'].
			fields = facts[0].fields.Union(extend(facts[1], mapKey(k), false).fields)
		}
		if facts[0].known && facts[1].known {
			if in, ok := contains(facts[1].value, facts[0].value); ok {
				return known(in, fields)
			}
		}
	case overloads.Size:
		f := target
		if f == nil && len(facts) == 1 {
			f = facts[0]
		}
		if f != nil && f.known {
			if n, ok := size(f.value); ok {
				return known(n, fields)
			}
		}
	}
	return unknown(fields)
}

// index handles pod[...] and optional selections of pod fields: a field
// of the pod read by a constant key; anything else reads what its
// operands read.
func (w *walker) index(fn string, args []celast.Expr, sc scope) *fact {
	op, key := w.eval(args[0], sc), w.eval(args[1], sc)
	optional := fn != operators.Index
	if !op.pod {
		if optional && op.known && op.value == emptyMap && key.known {
			return known(none, op.fields, key.fields)
		}
		return unknown(op.fields, key.fields)
	}
	var segment string
	switch k := key.value; {
	case fn == operators.OptSelect && key.known:
		s, ok := k.(string)
		if !ok {
			return unknown(op.fields, key.fields)
		}
		segment = s
	case key.known:
		switch k := k.(type) {
		case string:
			segment = mapKey(k)
		case int64, uint64:
			segment = fmt.Sprintf("[%d]", k)
		default:
			segment = "[*]"
		}
	default:
		segment = "[*]"
	}
	f := extend(op, segment, optional)
	f.fields = f.fields.Union(key.fields)
	f = f.atom()
	// labels['tier']: the baseline has no such key.
	f.err = fn == operators.Index && isLabels(op.path) && key.known
	return f
}

// comprehension: cel.bind binds its variable to its value's fact, and is
// what its body is; a loop (all, exists, map, filter, ...) over a pod
// field binds its variables to the field's elements, and reads what its
// body reads of them.
func (w *walker) comprehension(e celast.Expr, sc scope) *fact {
	c := e.AsComprehension()
	if r := c.IterRange(); r.Kind() == celast.ListKind && len(r.AsList().Elements()) == 0 {
		return w.eval(c.Result(), sc.with(map[string]*fact{c.AccuVar(): w.eval(c.AccuInit(), sc)}))
	}
	rng := w.eval(c.IterRange(), sc)
	element := unknown(rng.fields)
	if rng.pod {
		element = extend(rng, "[]", false)
		if t := w.ast.GetType(c.IterRange().ID()); t != nil && t.Kind() == types.MapKind {
			element = podField(rng.path, nil) // its keys: the map's
		}
	}
	inner := sc.with(map[string]*fact{c.IterVar(): element, c.IterVar2(): element, c.AccuVar(): unknown(w.eval(c.AccuInit(), sc).fields)})
	fields := sets.New[string]()
	if !rng.pod {
		fields = fields.Union(rng.fields)
	}
	for _, part := range []celast.Expr{c.LoopCondition(), c.LoopStep(), c.Result()} {
		fields = fields.Union(w.eval(part, inner).fields)
	}
	return unknown(fields)
}

func and(a, b *fact) *fact {
	t := unknownTruth
	switch {
	case a.truth() == isFalse || b.truth() == isFalse:
		t = isFalse
	case a.truth() == isTrue && b.truth() == isTrue:
		t = isTrue
	}
	f := boolFact(t, a.fields.Union(b.fields))
	// CEL's && is commutative over errors: false wins over an error, an
	// error over true.
	f.err = t != isFalse && ((a.err && b.err) || (a.err && b.truth() == isTrue) || (b.err && a.truth() == isTrue))
	f.nf = a.neverFalse() && b.neverFalse()
	f.nt = a.neverTrue() || b.neverTrue()
	f.errs = a.errFields().Union(b.errFields())
	// Raising one side makes the whole true only where the other may be.
	if b.canTrue() {
		f.raise, f.lower = f.raise.Union(a.raise), f.lower.Union(a.lower)
	}
	if a.canTrue() {
		f.raise, f.lower = f.raise.Union(b.raise), f.lower.Union(b.lower)
	}
	f.trim()
	return f
}

func or(a, b *fact) *fact {
	return not(and(not(a), not(b)))
}

func not(a *fact) *fact {
	t := unknownTruth
	switch a.truth() {
	case isTrue:
		t = isFalse
	case isFalse:
		t = isTrue
	}
	f := boolFact(t, a.fields)
	f.raise, f.lower = a.lower.Clone(), a.raise.Clone()
	f.err, f.nf, f.nt, f.errs = a.err, a.neverTrue(), a.neverFalse(), a.errs
	return f
}

// conditional is c ? x : y. The author moves it through a branch, or by
// moving c to the other branch: that raises it when the other branch may
// be true where the baseline's branch is not always true.
func conditional(c, x, y *fact) *fact {
	fields := c.fields.Union(x.fields).Union(y.fields)
	var f *fact
	switch {
	case c.truth() == isTrue:
		f = &fact{value: x.value, known: x.known}
	case c.truth() == isFalse:
		f = &fact{value: y.value, known: y.known}
	case x.known && y.known && reflect.DeepEqual(x.value, y.value):
		f = &fact{value: x.value, known: true}
	default:
		f = &fact{}
	}
	f.fields, f.raise, f.lower = fields, sets.New[string](), sets.New[string]()
	f.err = c.err
	switch {
	case c.truth() == isTrue:
		f.err, f.nf, f.nt = x.err, x.neverFalse(), x.neverTrue()
	case c.truth() == isFalse:
		f.err, f.nf, f.nt = y.err, y.neverFalse(), y.neverTrue()
	default:
		f.nf = c.err || (x.neverFalse() && y.neverFalse())
		f.nt = c.err || (x.neverTrue() && y.neverTrue())
	}
	f.errs = c.errFields().Union(x.errFields()).Union(y.errFields())
	if c.canTrue() {
		f.raise, f.lower = f.raise.Union(x.raise), f.lower.Union(x.lower)
	}
	if c.canFalse() {
		f.raise, f.lower = f.raise.Union(y.raise), f.lower.Union(y.lower)
	}
	// To x (c raised) from y, and to y (c lowered) from x.
	if c.raise.Len() > 0 {
		if x.canTrue() && y.truth() != isTrue {
			f.raise = f.raise.Union(c.raise)
		}
		if x.canFalse() && y.truth() != isFalse {
			f.lower = f.lower.Union(c.raise)
		}
	}
	if c.lower.Len() > 0 {
		if y.canTrue() && x.truth() != isTrue {
			f.raise = f.raise.Union(c.lower)
		}
		if y.canFalse() && x.truth() != isFalse {
			f.lower = f.lower.Union(c.lower)
		}
	}
	f.trim()
	return f
}

// equal compares two known values of the same type.
func equal(a, b any) (bool, bool) {
	switch a.(type) {
	case string, bool, int64, uint64, float64:
		if reflect.TypeOf(a) != reflect.TypeOf(b) {
			return false, false
		}
		return a == b, true
	case noneValue:
		_, isNone := b.(noneValue)
		return isNone, true
	}
	return false, false
}

// contains says whether a known list holds a value, or a known map a key.
func contains(container, v any) (bool, bool) {
	switch c := container.(type) {
	case emptyValue:
		return false, true
	case []any:
		for _, el := range c {
			eq, ok := equal(v, el)
			if !ok {
				return false, false
			}
			if eq {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

func size(v any) (int64, bool) {
	switch v := v.(type) {
	case string:
		return int64(len([]rune(v))), true
	case []any:
		return int64(len(v)), true
	case emptyValue:
		return 0, true
	}
	return 0, false
}

// fieldName is a pod field as CEL reads it: pod.metadata.labels['tier'],
// pod.spec.containers[].image ([] for any element a loop reads, [*] for
// an index not known before the pod is).
func fieldName(path []string) string {
	var b strings.Builder
	b.WriteString(engine.PodVar)
	for _, s := range path {
		if !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// notAuthored are the pod fields (and what they hold) that its author
// does not choose, or whose claim the cluster accounts for.
var notAuthored = []string{
	// Set by the API server: the namespace is where the author may
	// create pods, not what it claims.
	"pod.metadata.namespace", "pod.metadata.uid", "pod.metadata.resourceVersion", "pod.metadata.generation",
	"pod.metadata.creationTimestamp", "pod.metadata.deletionTimestamp", "pod.metadata.deletionGracePeriodSeconds",
	"pod.metadata.managedFields",
	// Set by the scheduler and the kubelet.
	"pod.status",
	// Charged for: NodeResourcesFit places requests, ResourceQuota
	// bounds them, a device plugin allocates what is requested; set by
	// RuntimeClass admission (overhead).
	"pod.spec.containers[].resources", "pod.spec.initContainers[].resources", "pod.spec.resources", "pod.spec.overhead",
}

// authored says whether the pod field (as fieldName names it) is its
// author's to set. A field that holds one the author sets (pod.spec, the
// whole pod) is.
func authored(name string) bool {
	generic := elementIndexes(name)
	for _, n := range notAuthored {
		if generic == n || strings.HasPrefix(generic, n+".") || strings.HasPrefix(generic, n+"[") {
			return false
		}
	}
	return true
}

// elementIndexes writes every list index of a field name as [] (any
// element): pod.spec.containers[0].resources is pod.spec.containers[].resources.
func elementIndexes(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] == '[' && i+1 < len(name) && (name[i+1] == '*' || name[i+1] >= '0' && name[i+1] <= '9') {
			end := strings.IndexByte(name[i:], ']')
			if end > 0 {
				b.WriteString("[]")
				i += end
				continue
			}
		}
		b.WriteByte(name[i])
	}
	return b.String()
}
