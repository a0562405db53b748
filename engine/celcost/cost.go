package celcost

import (
	"errors"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"
)

// Runtime cost tracking.
//
// cel-go's cost tracker (interpreter.CostObserver) is not used: it keeps a
// stack of every value it observes and searches it linearly, which makes it
// quadratic in the length of a loop (a loop of 100,000 iterations, cost
// 600,000, takes 25 s tracked and 24 ms untracked; see
// BenchmarkTrackedLoop), and it prices a call after the call returned, so a
// single call that takes seconds (an indexOf of a long string in a long
// string) is never cut off. The tracker here observes the same evaluation
// steps through cel-go's EvalState observer, charges each step a fixed cost
// known from the checked AST in constant time, and prices every call whose
// work grows with its input from its arguments before the call runs: a call
// that would exceed the limit never starts.

// costPlan is the cost model of one checked expression, by expression ID.
// It is immutable and shared by the evaluations of the expression.
type costPlan struct {
	nodes []costNode
	calls []costCall
	slots int
}

// costNode is what observing the value of one expression costs.
type costNode struct {
	// static is charged every time the expression's value is observed.
	static uint64
	// call is the index+1 of the call this expression is, if any; its
	// result is priced after the call returns.
	call int32
	// slot is the index+1 where the value is kept while it is the argument
	// of a call.
	slot int32
	// lastArgOf is the index+1 of the call whose last argument this is: once
	// it is known, the call is priced, before it runs.
	lastArgOf int32
}

// costCall is a call of the expression, with the slots of its arguments.
type costCall struct {
	function string
	overload string
	slots    []int32
	// before prices the call from its arguments, before it runs; after,
	// from its arguments and result. Either may be nil.
	before beforePrice
	after  afterPrice
}

// beforePrice prices a call from its arguments; afterPrice from its
// function, overload, arguments and result.
type (
	beforePrice func(args []ref.Val) uint64
	afterPrice  func(fn, overload string, args []ref.Val, result ref.Val) uint64
)

// newCostPlan builds the cost model of a checked expression.
func newCostPlan(ast *cel.Ast) *costPlan {
	native := ast.NativeRep()
	p := &costPlan{}
	var maxID int64
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		maxID = max(maxID, e.ID())
	}))
	p.nodes = make([]costNode, maxID+1)
	for i := range p.nodes {
		// IDs the AST does not have (none today) cost what a step costs.
		p.nodes[i].static = 1
	}
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		n := &p.nodes[e.ID()]
		switch e.Kind() {
		case celast.LiteralKind, celast.ComprehensionKind:
			n.static = 0
		case celast.IdentKind:
			n.static = common.SelectAndIdentCost
		case celast.SelectKind:
			// Presence tests are free, as in the Kubernetes environment
			// (interpreter.PresenceTestHasCost(false)).
			if e.AsSelect().IsTestOnly() {
				n.static = 0
			} else {
				n.static = common.SelectAndIdentCost
			}
		case celast.ListKind:
			n.static = common.ListCreateBaseCost
		case celast.MapKind:
			n.static = common.MapCreateBaseCost
		case celast.StructKind:
			n.static = common.StructCreateBaseCost
		case celast.CallKind:
			p.addCall(native, e)
		}
	}))
	return p
}

func (p *costPlan) addCall(native *celast.AST, e celast.Expr) {
	call := e.AsCall()
	n := &p.nodes[e.ID()]
	n.static = 0
	fn := call.FunctionName()
	var args []celast.Expr
	if call.IsMemberFunction() {
		args = append(args, call.Target())
	}
	args = append(args, call.Args()...)
	c := costCall{function: fn}
	if r, ok := native.ReferenceMap()[e.ID()]; ok && len(r.OverloadIDs) == 1 {
		c.overload = r.OverloadIDs[0]
	}
	c.before, c.after = callPricing(fn)
	if c.before == nil && c.after == nil {
		// Logical operators and the conditional cost nothing themselves,
		// as in cel-go: their arguments are charged as they are evaluated.
		p.calls = append(p.calls, c)
		n.call = int32(len(p.calls))
		return
	}
	for range args {
		p.slots++
		c.slots = append(c.slots, int32(p.slots))
	}
	p.calls = append(p.calls, c)
	idx := int32(len(p.calls))
	n.call = idx
	for i, a := range args {
		an := &p.nodes[a.ID()]
		an.slot = c.slots[i]
		if i == len(args)-1 && c.before != nil {
			an.lastArgOf = idx
		}
	}
	if len(args) == 0 && c.before != nil {
		// Nothing to wait for: priced when it returns.
		before := c.before
		p.calls[idx-1].after = func(_, _ string, _ []ref.Val, _ ref.Val) uint64 { return before(nil) }
		p.calls[idx-1].before = nil
	}
}

// costState is the cost of one evaluation. It implements
// interpreter.EvalState so that cel-go's EvalStateObserver reports every
// evaluation step to it.
type costState struct {
	plan  *costPlan
	limit uint64
	cost  uint64
	vals  []ref.Val
	// priced says, per call, that the current invocation was priced before
	// it ran (an argument may be observed twice: as a qualifier and as an
	// attribute).
	priced []bool
	args   []ref.Val
}

func newCostState(plan *costPlan, limit uint64) *costState {
	return &costState{
		plan:   plan,
		limit:  limit,
		vals:   make([]ref.Val, plan.slots+1),
		priced: make([]bool, len(plan.calls)+1),
	}
}

// ErrCostLimitExceeded is wrapped by the error of an evaluation that
// exceeded its expression's runtime cost limit.
var ErrCostLimitExceeded = errors.New("operation cancelled: actual cost limit exceeded")

// errCostLimit is the panic that stops an evaluation over its limit; the
// interpreter unwinds with it as with a cancelled context.
var errCostLimit = interpreter.EvalCancelledError{
	Cause:   interpreter.CostLimitExceeded,
	Message: "operation cancelled: actual cost limit exceeded",
}

func (s *costState) charge(c uint64) {
	s.cost = addSat(s.cost, c)
	if s.cost > s.limit {
		panic(errCostLimit)
	}
}

// SetValue implements interpreter.EvalState: it is called with the value of
// every evaluation step.
func (s *costState) SetValue(id int64, val ref.Val) {
	if id < 0 || id >= int64(len(s.plan.nodes)) {
		s.charge(1)
		return
	}
	n := &s.plan.nodes[id]
	cost := n.static
	if n.call != 0 {
		c := &s.plan.calls[n.call-1]
		if c.before != nil && !s.priced[n.call] && !types.IsUnknownOrError(val) {
			// It ran but its last argument was not observed (no argument
			// is known to be hidden from the observer): priced late
			// rather than never. (With an error, it may not have run: an
			// argument before the last failed.)
			cost = addSat(cost, max(c.before(s.argValues(c)), 1))
		}
		s.priced[n.call] = false
		if c.after != nil {
			if types.IsUnknownOrError(val) {
				cost = addSat(cost, 1)
			} else {
				cost = addSat(cost, c.after(c.function, c.overload, s.argValues(c), val))
			}
		}
	}
	if n.slot != 0 {
		s.vals[n.slot] = val
	}
	s.charge(cost)
	if n.lastArgOf != 0 && !s.priced[n.lastArgOf] {
		s.priced[n.lastArgOf] = true
		c := &s.plan.calls[n.lastArgOf-1]
		s.charge(max(c.before(s.argValues(c)), 1))
	}
}

// argValues returns the argument values of a call, nil for those not
// evaluated (a folded constant, an argument after an error).
func (s *costState) argValues(c *costCall) []ref.Val {
	s.args = s.args[:0]
	for _, slot := range c.slots {
		s.args = append(s.args, s.vals[slot])
	}
	return s.args
}

// IDs and Value complete interpreter.EvalState; the cost state keeps no
// values to report.
func (s *costState) IDs() []int64                { return nil }
func (s *costState) Value(int64) (ref.Val, bool) { return nil, false }

// Reset implements interpreter.EvalState: it readies the state for another
// evaluation. An evaluation stopped at its limit leaves a call marked as
// priced, which the next must price again; and values are dropped, not
// kept alive.
func (s *costState) Reset() {
	s.cost = 0
	clear(s.vals)
	clear(s.priced)
	clear(s.args[:cap(s.args)])
	s.args = s.args[:0]
}

// callPricing returns how a function is priced: before it runs from its
// arguments when its work grows with them, else after it returns, as the
// Kubernetes cost estimator prices it.
func callPricing(fn string) (before beforePrice, after afterPrice) {
	switch fn {
	case "_&&_", "_||_", "_?_:_":
		return nil, nil
	case "_[_]", "_[?_]", "_?._", "@not_strictly_false", "!_", "-_":
		return nil, constantCost
	case "findAll":
		// The scan is priced before; the list of matches after.
		return priceBefore("find"), func(_, _ string, _ []ref.Val, result ref.Val) uint64 {
			return 2 * listSize(result)
		}
	}
	if _, ok := pricedBefore[fn]; ok {
		return priceBefore(fn), nil
	}
	return nil, kubernetesCallCost
}

func constantCost(_, _ string, _ []ref.Val, _ ref.Val) uint64 { return 1 }

var kubernetesEstimator = &library.CostEstimator{}

// kubernetesCallCost prices a call as the Kubernetes environment does
// (library.CostEstimator), one unit when it has no price.
func kubernetesCallCost(fn, overload string, args []ref.Val, result ref.Val) uint64 {
	for _, a := range args {
		if a == nil {
			return 1
		}
	}
	if c := kubernetesEstimator.CallCost(fn, overload, args, result); c != nil {
		return *c
	}
	return 1
}

func priceBefore(fn string) beforePrice {
	price := pricedBefore[fn]
	return func(args []ref.Val) uint64 {
		for _, a := range args {
			if a == nil {
				return 1
			}
		}
		return price(args)
	}
}

// pricedBefore are the functions whose work grows with their arguments,
// priced from them before they run. Strings count in bytes (at least their
// length in characters, and free to measure); one unit per
// common.StringTraversalCostFactor bytes is what the Kubernetes estimator
// charges for a traversal.
var pricedBefore map[string]beforePrice

func init() {
	traversal := func(args []ref.Val) uint64 { return traversalUnits(strLen(args[0])) }
	pricedBefore = map[string]beforePrice{
		// charAt converts the whole string to runes.
		"charAt": traversal,
		// indexOf and lastIndexOf of a string convert both strings to runes
		// and compare them at every position, as contains is priced.
		"indexOf":     indexOfCost,
		"lastIndexOf": indexOfCost,
		"substring":   traversal,
		"lowerAscii":  traversal,
		"upperAscii":  traversal,
		"trim":        traversal,
		"replace":     replaceCost,
		"split": func(args []ref.Val) uint64 {
			return 2 * traversalUnits(strLen(args[0]))
		},
		"join": joinCost,
		// size of a string counts its characters.
		"size": func(args []ref.Val) uint64 {
			if _, ok := args[0].(types.String); ok {
				return traversalUnits(strLen(args[0]))
			}
			return 1
		},
		"contains": func(args []ref.Val) uint64 {
			return mulSat(traversalUnits(strLen(args[0])), traversalUnits(strLen(args[1])))
		},
		"startsWith": func(args []ref.Val) uint64 { return traversalUnits(strLen(args[1])) },
		"endsWith":   func(args []ref.Val) uint64 { return traversalUnits(strLen(args[1])) },
		"matches":    regexCost,
		"find": func(args []ref.Val) uint64 {
			return mulSat(findRegexFactor, regexCost(args))
		},
		"format": func(args []ref.Val) uint64 {
			return addSat(traversalUnits(strLen(args[0])), deepCost(args[1], math.MaxUint64))
		},
		"strings.quote": traversal,
		"url":           traversal,
		"isURL":         traversal,
		"ip":            conversionCost,
		"isIP":          traversal,
		"cidr":          traversal,
		"isCIDR":        traversal,
		"quantity":      traversal,
		"isQuantity":    traversal,
		"semver":        traversal,
		"isSemver":      traversal,
		"validate": func(args []ref.Val) uint64 {
			if c := kubernetesEstimator.CallCost("validate", "", args, nil); c != nil {
				return *c
			}
			return 1
		},
		"int":       conversionCost,
		"uint":      conversionCost,
		"double":    conversionCost,
		"bool":      conversionCost,
		"duration":  conversionCost,
		"timestamp": conversionCost,
		"bytes":     conversionCost,
		"string":    conversionCost,
		"_==_":      equalityCost,
		"_!=_":      equalityCost,
		"_<_":       comparisonCost,
		"_<=_":      comparisonCost,
		"_>_":       comparisonCost,
		"_>=_":      comparisonCost,
		"_+_": func(args []ref.Val) uint64 {
			if isStringLike(args[0]) {
				return traversalUnits(addSat(strLen(args[0]), strLen(args[1])))
			}
			return 1 // lists concatenate lazily
		},
		"@in": inCost,
		// Lists, as cel-go's extension prices them, from the arguments.
		"lists.range": func(args []ref.Val) uint64 {
			n, _ := args[0].(types.Int)
			return allocatingListCost(uint64(max(n, 0)))
		},
		"slice": func(args []ref.Val) uint64 {
			start, _ := args[1].(types.Int)
			end, _ := args[2].(types.Int)
			return allocatingListCost(uint64(max(end-start, 0)))
		},
		"flatten": func(args []ref.Val) uint64 {
			depth := types.Int(1)
			if len(args) > 1 {
				depth, _ = args[1].(types.Int)
			}
			return allocatingListCost(flattenedSize(args[0], int(depth), math.MaxUint64))
		},
		"reverse":               func(args []ref.Val) uint64 { return allocatingListCost(listSize(args[0])) },
		"distinct":              func(args []ref.Val) uint64 { return selfCompareCost(args[0]) },
		"sort":                  func(args []ref.Val) uint64 { return selfCompareCost(args[0]) },
		"@sortByAssociatedKeys": func(args []ref.Val) uint64 { return selfCompareCost(args[1]) },
		"isSorted":              listTraversal,
		"sum":                   listTraversal,
		"min":                   listTraversal,
		"max":                   listTraversal,
		"sets.contains": func(args []ref.Val) uint64 {
			return addSat(1, mulSat(listSize(args[0]), listSize(args[1])))
		},
		"sets.intersects": func(args []ref.Val) uint64 {
			return addSat(1, mulSat(listSize(args[0]), listSize(args[1])))
		},
		"sets.equivalent": func(args []ref.Val) uint64 {
			return addSat(1, mulSat(2, mulSat(listSize(args[0]), listSize(args[1]))))
		},
	}
}

// findRegexFactor is how much more find and findAll cost than matches,
// for the same string and regular expression: finding the leftmost match
// takes 3.5 times as long as matching (BenchmarkFunctionCost).
const findRegexFactor = 3

// traversalUnits is the cost of traversing n bytes.
func traversalUnits(n uint64) uint64 {
	return uint64(math.Ceil(float64(n) * common.StringTraversalCostFactor))
}

// strLen is the length in bytes of a string or bytes value, 0 otherwise.
func strLen(v ref.Val) uint64 {
	switch s := v.(type) {
	case types.String:
		return uint64(len(s))
	case types.Bytes:
		return uint64(len(s))
	}
	return 0
}

func isStringLike(v ref.Val) bool {
	switch v.(type) {
	case types.String, types.Bytes:
		return true
	}
	return false
}

func listSize(v ref.Val) uint64 {
	if l, ok := v.(traits.Lister); ok {
		if n, ok := l.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

func indexOfCost(args []ref.Val) uint64 {
	if _, ok := args[0].(types.String); ok {
		return mulSat(traversalUnits(strLen(args[0])), max(traversalUnits(strLen(args[1])), 1))
	}
	return listTraversal(args)
}

func listTraversal(args []ref.Val) uint64 {
	return deepCost(args[0], math.MaxUint64)
}

// replaceCost is the traversal of the string plus the size of the result,
// computed before the result is built: replacing "" with a long string
// inserts it between every two characters.
func replaceCost(args []ref.Val) uint64 {
	str, _ := args[0].(types.String)
	old, _ := args[1].(types.String)
	repl, _ := args[2].(types.String)
	var count uint64
	if old == "" {
		count = uint64(utf8.RuneCountInString(string(str))) + 1
	} else {
		count = uint64(strings.Count(string(str), string(old)))
	}
	if len(args) > 3 {
		if n, ok := args[3].(types.Int); ok && n >= 0 {
			count = min(count, uint64(n))
		}
	}
	result := uint64(len(str))
	if len(repl) > len(old) {
		result = addSat(result, mulSat(count, uint64(len(repl)-len(old))))
	}
	return addSat(2*traversalUnits(uint64(len(str))), traversalUnits(result))
}

// joinCost is one unit per element and the traversal of the result, twice.
func joinCost(args []ref.Val) uint64 {
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 1
	}
	var sep uint64
	if len(args) > 1 {
		sep = strLen(args[1])
	}
	n := listSize(l)
	size := mulSat(sep, n)
	for it := l.Iterator(); it.HasNext() == types.True; {
		size = addSat(size, strLen(it.Next()))
	}
	return addSat(n, 2*traversalUnits(size))
}

func regexCost(args []ref.Val) uint64 {
	str := uint64(math.Ceil((1 + float64(strLen(args[0]))) * common.StringTraversalCostFactor))
	re := uint64(math.Ceil(float64(strLen(args[1])) * common.RegexStringLengthCostFactor))
	return mulSat(str, re)
}

// conversionCost prices a conversion: parsing a string traverses it.
func conversionCost(args []ref.Val) uint64 {
	if isStringLike(args[0]) {
		return max(traversalUnits(strLen(args[0])), 1)
	}
	return 1
}

func comparisonCost(args []ref.Val) uint64 {
	if isStringLike(args[0]) && isStringLike(args[1]) {
		return traversalUnits(min(strLen(args[0]), strLen(args[1])))
	}
	return 1
}

// equalityCost: strings compare up to the shorter one; lists, maps and
// objects compare element by element, deeply, up to the smaller one.
func equalityCost(args []ref.Val) uint64 {
	if isAggregate(args[0]) && isAggregate(args[1]) {
		a := deepCost(args[0], math.MaxUint64)
		return deepCost(args[1], a)
	}
	return comparisonCost(args)
}

// inCost: a list is searched element by element, each compared deeply with
// the value; a map is one lookup.
func inCost(args []ref.Val) uint64 {
	if _, ok := args[1].(traits.Lister); !ok {
		return 1
	}
	n := listSize(args[1])
	if isAggregate(args[0]) {
		// At most the whole list is compared.
		return addSat(n, deepCost(args[1], math.MaxUint64))
	}
	return max(n, 1)
}

func isAggregate(v ref.Val) bool {
	switch v.(type) {
	case traits.Lister, traits.Mapper:
		return true
	}
	return false
}

// mapEntryCost is what deepCost adds for each entry of a map (or field of
// an object): comparing two maps looks every key of one up in the other.
const mapEntryCost = 2

// deepCost is the cost of visiting a value: one unit per element, two more
// per map entry, and the traversal of its strings, counted up to limit.
func deepCost(v ref.Val, limit uint64) uint64 {
	var cost uint64
	var visit func(v ref.Val)
	visit = func(v ref.Val) {
		if cost >= limit {
			return
		}
		switch x := v.(type) {
		case types.String, types.Bytes:
			cost = addSat(cost, max(traversalUnits(strLen(x)), 1))
		case traits.Lister:
			cost++
			for it := x.Iterator(); it.HasNext() == types.True && cost < limit; {
				visit(it.Next())
			}
		case traits.Mapper:
			cost++
			for it := x.Iterator(); it.HasNext() == types.True && cost < limit; {
				// Comparing an entry looks its key up in the other map.
				cost = addSat(cost, mapEntryCost)
				k := it.Next()
				visit(k)
				visit(x.Get(k))
			}
		default:
			cost++
		}
	}
	visit(v)
	return min(cost, limit)
}

// flattenedSize is the number of elements flatten(depth) produces, counted
// up to limit.
func flattenedSize(v ref.Val, depth int, limit uint64) uint64 {
	l, ok := v.(traits.Lister)
	if !ok {
		return 1
	}
	var n uint64
	for it := l.Iterator(); it.HasNext() == types.True && n < limit; {
		e := it.Next()
		if _, isList := e.(traits.Lister); isList && depth > 0 {
			n = addSat(n, flattenedSize(e, depth-1, limit-n))
		} else {
			n++
		}
	}
	return n
}

// allocatingListCost is what cel-go's list extension charges for a call
// that builds a list of n elements.
func allocatingListCost(n uint64) uint64 {
	return addSat(n, 1+common.ListCreateBaseCost)
}

// selfCompareCost is what cel-go's list extension charges for sort and
// distinct: n² comparisons, of strings a little more.
func selfCompareCost(v ref.Val) uint64 {
	n := listSize(v)
	factor := 2.0
	if l, ok := v.(traits.Lister); ok && n > 0 {
		if isStringLike(l.Get(types.IntZero)) {
			factor += common.StringTraversalCostFactor
		}
	}
	sq := mulSat(n, n)
	if sq == math.MaxUint64 {
		return sq
	}
	return allocatingListCost(uint64(math.Min(float64(sq)*factor, math.MaxUint64/2)))
}

func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}
