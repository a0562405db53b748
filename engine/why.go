package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/parser"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/celsched/celsched/engine/celcost"
)

// This file says why a rule is false (or failed): the values of its
// sub-expressions, from cel-go's evaluation state. It is for dry-run only:
// the rule is evaluated again by a program of its own, built with state
// tracking (cel.OptTrackState), so the scheduler's programs are unchanged;
// and what it returns never goes into a message a pod shows.

// Limits of an explanation.
const (
	// MaxWhySteps bounds the sub-expressions of one explanation.
	MaxWhySteps = 12
	// MaxWhyLength bounds the text of a sub-expression and of a value.
	MaxWhyLength = 120
)

// Step is one sub-expression of a rule and its value, as text.
type Step struct {
	Expr  string `json:"expr"`
	Value string `json:"value"`
}

func (s Step) String() string { return s.Expr + " = " + s.Value }

// Why explains the rules of policies compiled with CompileOptions.Explain
// (others get no explanation). It keeps the state-tracking program of each
// rule it explained, and is safe for concurrent use.
type Why struct {
	programs sync.Map // *expr -> cel.Program or error
}

// PreEnqueue explains a preEnqueue rule of the policy for a pod; nil when
// the policy has no such rule or does not compile.
func (w *Why) PreEnqueue(ctx context.Context, p *CompiledPolicy, in *PodInput, rule string) ([]Step, error) {
	return w.explain(p.newEvaluation(ctx, in, nil), ruleNamed(p.preEnqueue, rule))
}

// Filter explains a filter of the policy for a pod on a node.
func (w *Why) Filter(ctx context.Context, p *CompiledPolicy, in *PodInput, node *NodeInput, rule string) ([]Step, error) {
	return w.explain(p.newEvaluation(ctx, in, node), ruleNamed(p.filters, rule))
}

func ruleNamed(rules []*boolRule, name string) *boolRule {
	for _, r := range rules {
		if r.name == name {
			return r
		}
	}
	return nil
}

func (w *Why) explain(ev *evaluation, r *boolRule) ([]Step, error) {
	if r == nil || r.checked == nil {
		return nil, nil
	}
	prg, err := w.program(&r.expr)
	if err != nil {
		return nil, err
	}
	_, details, err := prg.ContextEval(ev.ctx, ev)
	if details == nil || details.State() == nil {
		if err != nil {
			return nil, fmt.Errorf("explaining rule %s: %w", r.name, err)
		}
		return nil, nil
	}
	state := details.State()
	ast := r.checked.ast.NativeRep()
	var steps []Step
	var walk func(e celast.Expr, chained bool)
	add := func(e celast.Expr) {
		val, ok := state.Value(e.ID())
		if !ok || len(steps) >= MaxWhySteps || types.IsUnknown(val) {
			return
		}
		text, err := parser.Unparse(e, ast.SourceInfo(), parser.WrapOnColumn(math.MaxInt32))
		switch {
		case err != nil && e.ID() == ast.Expr().ID():
			text = strings.TrimSpace(strings.ReplaceAll(r.checked.ast.Source().Content(), "\n", " "))
		case err != nil: // a macro (all, exists, map, ...) inside
			loc := ast.SourceInfo().GetStartLocation(e.ID())
			text = fmt.Sprintf("(the macro at line %d, column %d)", loc.Line(), loc.Column()+1)
		}
		steps = append(steps, Step{Expr: Truncate(text, MaxWhyLength), Value: Truncate(format(val), MaxWhyLength)})
	}
	walk = func(e celast.Expr, chained bool) {
		switch e.Kind() {
		case celast.LiteralKind:
			return
		case celast.IdentKind:
			if !chained {
				add(e)
			}
		case celast.SelectKind:
			if !chained {
				add(e)
			}
			walk(e.AsSelect().Operand(), true)
		case celast.CallKind:
			call := e.AsCall()
			index := call.FunctionName() == operators.Index || call.FunctionName() == operators.OptIndex ||
				call.FunctionName() == operators.OptSelect
			if !chained || !index {
				add(e)
			}
			if call.IsMemberFunction() {
				walk(call.Target(), false)
			}
			for i, arg := range call.Args() {
				walk(arg, index && i == 0)
			}
		case celast.ListKind:
			for _, elem := range e.AsList().Elements() {
				walk(elem, false)
			}
		case celast.ComprehensionKind:
			// The loop's own variables hold their last value only: show
			// the result and what it iterated over.
			add(e)
			walk(e.AsComprehension().IterRange(), false)
		default:
			add(e)
		}
	}
	walk(ast.Expr(), false)
	return steps, nil
}

// program returns the state-tracking program of an expression, built once.
func (w *Why) program(e *expr) (cel.Program, error) {
	if v, ok := w.programs.Load(e); ok {
		if err, failed := v.(error); failed {
			return nil, err
		}
		return v.(cel.Program), nil
	}
	prg, err := e.checked.env.Program(e.checked.ast, cel.EvalOptions(cel.OptTrackState), cel.CostLimit(celcost.PerExpressionCostLimit))
	if err != nil {
		err = fmt.Errorf("building the explanation of %s: %w", e.path, err)
		w.programs.Store(e, err)
		return nil, err
	}
	w.programs.Store(e, prg)
	return prg, nil
}

// format is a value as text: strings quoted, lists and maps as JSON where
// they convert.
func format(v ref.Val) string {
	switch v := v.(type) {
	case types.String:
		return strconv.Quote(string(v))
	case *types.Err:
		return "error: " + v.String()
	case *types.Optional:
		if !v.HasValue() {
			return "optional.none()"
		}
		return "optional.of(" + format(v.GetValue()) + ")"
	case types.Bool, types.Int, types.Uint, types.Double, types.Null:
		return fmt.Sprint(v.Value())
	}
	if native, err := v.ConvertToNative(jsonValueType); err == nil {
		if pv, ok := native.(*structpb.Value); ok {
			if data, err := json.Marshal(pv.AsInterface()); err == nil {
				return string(data)
			}
		}
	}
	return fmt.Sprint(v)
}

var jsonValueType = reflect.TypeFor[*structpb.Value]()
