package celcost

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"
)

// Program evaluates one compiled expression.
type Program interface {
	// Eval evaluates the expression and returns its value and its cost:
	// the measured cost when tracked, the estimated worst case otherwise.
	Eval(ctx context.Context, vars interpreter.Activation) (ref.Val, uint64, error)
}

// interruptCheckFrequency is how many comprehension iterations pass between
// two checks of the context's cancellation.
const interruptCheckFrequency = 100

// Tracked is a program that tracks its cost at runtime and stops
// when it exceeds its limit (see cost.go for why this is not cel-go's cost
// tracker). It is planned as Bounded is, plus cel-go's EvalState
// observer, which reports every evaluation step to a costState.
type Tracked struct {
	interpretable *interpreter.ObservableInterpretable
	plan          *costPlan
	limit         uint64
	// loops says whether the expression has a comprehension: only those
	// check the context (see newFrame).
	loops bool
	// states are reused across evaluations: a state is a few slices the
	// size of the expression.
	states sync.Pool
}

func NewTracked(env *cel.Env, ast *cel.Ast, limit uint64) (*Tracked, error) {
	p := &Tracked{plan: newCostPlan(ast), limit: limit, loops: hasComprehension(ast)}
	interpretable, err := planProgram(env, ast, interpreter.EvalStateObserver(interpreter.EvalStateFactory(func() interpreter.EvalState {
		if s, ok := p.states.Get().(*costState); ok {
			return s
		}
		return newCostState(p.plan, p.limit)
	})))
	if err != nil {
		return nil, err
	}
	observable, ok := interpretable.(*interpreter.ObservableInterpretable)
	if !ok {
		return nil, fmt.Errorf("cel-go planned an unobserved program (%T)", interpretable)
	}
	p.interpretable = observable
	return p, nil
}

func (p *Tracked) Eval(ctx context.Context, vars interpreter.Activation) (val ref.Val, cost uint64, err error) {
	if err := context.Cause(ctx); err != nil {
		return nil, 0, fmt.Errorf("evaluation cancelled: %w", err)
	}
	var state *costState
	defer func() {
		if state != nil {
			cost = state.cost
			state.Reset()
			p.states.Put(state)
		}
		if r := recover(); r != nil {
			val = nil
			if c, ok := r.(interpreter.EvalCancelledError); ok && c.Cause == interpreter.CostLimitExceeded {
				// What ran is charged, not the call refused at the limit.
				cost = min(cost, p.limit)
				err = fmt.Errorf("%w: the expression's cost passed its limit of %d", ErrCostLimitExceeded, p.limit)
				return
			}
			err = recovered(ctx, r)
		}
	}()
	frame, err := newFrame(ctx, vars, p.loops)
	if err != nil {
		return nil, 0, err
	}
	defer frame.Close()
	val = p.interpretable.ObserveExec(frame, func(observed any) {
		if s, ok := observed.(*costState); ok {
			state = s
		}
	})
	if err := interrupted(ctx, val); err != nil {
		return nil, 0, err
	}
	return val, 0, nil
}

// Bounded is a program whose worst-case cost, estimated at compile
// time, is within PerExpressionCostLimit, so it cannot exceed the limit and
// runs without runtime cost tracking.
//
// The Kubernetes base environment attaches cost tracking to every program it
// builds (its program options cannot be removed), and tracking triples the
// cost of a typical filter (BenchmarkFilterLabelRuleTracked). So this plans
// the checked AST with cel-go's interpreter directly, the way cel-go's own
// newProgram does, with the same function bindings, type provider, adapter,
// constant folding and regex precompilation, and without the cost observer.
// Of the program options of the environment's libraries, the only ones that
// change results are the optional library's short-circuiting or/orValue,
// which optionalOrDecorator provides; the others configure cost tracking.
// TestBoundedAndTrackedAgree checks that both programs give the same
// results.
type Bounded struct {
	interpretable interpreter.Interpretable
	cost          uint64
	loops         bool // see Tracked
}

func NewBounded(env *cel.Env, ast *cel.Ast, estimatedMax uint64) (*Bounded, error) {
	interpretable, err := planProgram(env, ast)
	if err != nil {
		return nil, err
	}
	return &Bounded{interpretable: interpretable, cost: estimatedMax, loops: hasComprehension(ast)}, nil
}

// planProgram plans a checked AST with cel-go's interpreter, the way cel-go's
// own newProgram does, with the same function bindings, type provider,
// adapter, constant folding and regex precompilation, the optional
// library's short-circuiting or/orValue, and the given extra options.
func planProgram(env *cel.Env, ast *cel.Ast, extra ...interpreter.PlannerOption) (interpreter.Interpretable, error) {
	dispatcher := interpreter.NewDispatcher()
	for _, fn := range env.Functions() {
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, err
		}
		if err := dispatcher.Add(bindings...); err != nil {
			return nil, err
		}
	}
	attrs := interpreter.NewAttributeFactory(env.Container, env.CELTypeAdapter(), env.CELTypeProvider())
	interp := interpreter.NewInterpreter(dispatcher, env.Container, env.CELTypeProvider(), env.CELTypeAdapter(), attrs)
	opts := append([]interpreter.PlannerOption{
		interpreter.CustomDecorator(optionalOrDecorator),
		interpreter.InterruptableEval(),
		interpreter.Optimize(),
		interpreter.CompileRegexConstants(
			interpreter.MatchesRegexOptimization,
			library.FindRegexOptimization,
			library.FindAllRegexOptimization,
		),
	}, extra...)
	return interp.NewInterpretable(ast.NativeRep(), opts...)
}

func (p *Bounded) Eval(ctx context.Context, vars interpreter.Activation) (val ref.Val, cost uint64, err error) {
	if err := context.Cause(ctx); err != nil {
		return nil, 0, fmt.Errorf("evaluation cancelled: %w", err)
	}
	// cel-go's interpreter panics to unwind a cancelled comprehension, and
	// library functions may panic on bad input; neither may crash the caller.
	defer func() {
		if r := recover(); r != nil {
			val = nil
			err = recovered(ctx, r)
		}
	}()
	frame, err := newFrame(ctx, vars, p.loops)
	if err != nil {
		return nil, 0, err
	}
	defer frame.Close()
	val = p.interpretable.Eval(frame)
	if err := interrupted(ctx, val); err != nil {
		return nil, p.cost, err
	}
	return val, p.cost, nil
}

// newFrame returns the execution frame of an evaluation of vars under ctx.
// With loops, the interpreter's comprehensions check ctx every
// interruptCheckFrequency iterations and stop with an InterruptError once it
// is done. Only comprehensions check, and a context costs an allocation and
// two locks of the cycle's context per evaluation (cel-go derives a
// cancellable context from it), so an expression without one gets none.
// Close the frame after the evaluation.
func newFrame(ctx context.Context, vars interpreter.Activation, loops bool) (*interpreter.ExecutionFrame, error) {
	frame, err := interpreter.NewExecutionFrame(vars)
	if err != nil {
		return nil, fmt.Errorf("internal error: %w", err)
	}
	if !loops {
		return frame, nil
	}
	if err := frame.SetContext(ctx, interruptCheckFrequency); err != nil {
		frame.Close()
		return nil, fmt.Errorf("internal error: %w", err)
	}
	return frame, nil
}

// hasComprehension says whether the checked expression has a
// comprehension (a macro such as all, exists, map or filter).
func hasComprehension(ast *cel.Ast) bool {
	return len(celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.ComprehensionKind))) > 0
}

// interrupted is the error of an evaluation that the interpreter stopped
// because ctx was done, or nil.
func interrupted(ctx context.Context, val ref.Val) error {
	if e, ok := val.(*types.Err); ok && errors.Is(e, interpreter.InterruptError{}) {
		return fmt.Errorf("evaluation cancelled: %w", context.Cause(ctx))
	}
	return nil
}

// recovered is the error of an evaluation that panicked: cancelled, or a
// library function that panicked on bad input.
func recovered(ctx context.Context, r any) error {
	if _, ok := r.(interpreter.EvalCancelledError); ok {
		return fmt.Errorf("evaluation cancelled: %w", context.Cause(ctx))
	}
	return fmt.Errorf("internal error: %v", r)
}

// optionalOrDecorator plans o.or(p) and o.orValue(v) as cel-go's optional
// library does (its decorator is unexported): the right-hand side is
// evaluated only when the optional has no value.
func optionalOrDecorator(i interpreter.Interpretable) (interpreter.Interpretable, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok || len(call.Args()) != 2 {
		return i, nil
	}
	args := call.Args()
	switch {
	case call.Function() == "or" && (call.OverloadID() == "" || call.OverloadID() == "optional_or_optional"):
		return &optionalOr{id: call.ID(), lhs: args[0], rhs: args[1]}, nil
	case call.Function() == "orValue" && (call.OverloadID() == "" || call.OverloadID() == "optional_orValue_value"):
		return &optionalOr{id: call.ID(), lhs: args[0], rhs: args[1], unwrap: true}, nil
	default:
		return i, nil
	}
}

type optionalOr struct {
	id       int64
	lhs, rhs interpreter.Interpretable
	// unwrap returns the optional's value (orValue) rather than the
	// optional (or).
	unwrap bool
}

func (o *optionalOr) ID() int64 { return o.id }

func (o *optionalOr) Eval(vars interpreter.Activation) ref.Val {
	lhs := o.lhs.Eval(vars)
	opt, ok := lhs.(*types.Optional)
	if !ok {
		return lhs
	}
	if !opt.HasValue() {
		return o.rhs.Eval(vars)
	}
	if o.unwrap {
		return opt.GetValue()
	}
	return opt
}
