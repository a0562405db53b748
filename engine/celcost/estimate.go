package celcost

// The compile-time cost estimation of expressions: the sizes of what the
// variables reach (sizeEstimator) and the Kubernetes cost estimator with
// bounds for the calls that grow values (Estimator). The runtime cost
// of an evaluation is in cost.go.

import (
	"math"
	"slices"

	"github.com/google/cel-go/checker"
	celcommon "github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/library"
)

// sizeEstimator gives the checker the maximum sizes of lists, maps and
// strings reachable from the root variables, from their declared types (the
// OpenAPI maxItems and maxLength, or what fits in a maximal request).
type sizeEstimator struct {
	roots map[string]*apiservercel.DeclType
	vars  Vars
	// typical caps lists and maps at TypicalMaxItems elements.
	typical bool
}

func (s *sizeEstimator) EstimateSize(element checker.AstNode) *checker.SizeEstimate {
	path := element.Path()
	if len(path) > 0 && path[0] == s.vars.Params && s.typical {
		// Params are written by admins, for the scheduler: typically
		// their strings, lists and maps are at most TypicalMaxItems long
		// (a ConfigMap's comma-separated list of zones), not a stored
		// object's worst case. Expressions reading params are tracked at
		// runtime whatever their estimate (references.unboundedVariable).
		return &checker.SizeEstimate{Min: 0, Max: TypicalMaxItems}
	}
	current := s.declAt(path)
	if current == nil {
		if len(path) > 0 && path[0] == s.vars.Params {
			// Untyped (dyn) params: a stored object, at most
			// MaxObjectSizeBytes.
			return &checker.SizeEstimate{Min: 0, Max: MaxObjectSizeBytes}
		}
		return nil
	}
	if size, ok := s.validatedSize(path); ok {
		return &checker.SizeEstimate{Min: 0, Max: size}
	}
	maxSize := uint64(current.MaxElements)
	if s.typical && (current.IsList() || current.IsMap()) {
		return &checker.SizeEstimate{Min: 0, Max: min(maxSize, TypicalMaxItems)}
	}
	if path[0] == s.vars.Params || slices.Contains(s.vars.Objects, path[0]) {
		if path[len(path)-1] == "@keys" && maxSize == 0 {
			// Map keys have no declared length: at most the object.
			return &checker.SizeEstimate{Min: 0, Max: MaxObjectSizeBytes}
		}
		// apiserver derives undeclared sizes from the request size limit;
		// stored objects are at most half that large.
		maxSize = maxSize * MaxObjectSizeBytes / uint64(celconfig.MaxRequestSizeBytes)
	}
	return &checker.SizeEstimate{Min: 0, Max: maxSize}
}

// declAt is the declared type at a path from a root variable, nil when
// unknown.
func (s *sizeEstimator) declAt(path []string) *apiservercel.DeclType {
	if len(path) == 0 {
		return nil
	}
	current, ok := s.roots[path[0]]
	if !ok {
		return nil
	}
	for _, name := range path[1:] {
		switch name {
		case "@items", "@values":
			current = current.ElemType
		case "@keys":
			current = current.KeyType
		default:
			field, ok := current.Fields[name]
			if !ok {
				// Fields named by CEL keywords (namespace) are declared
				// escaped (__namespace__).
				if escaped, can := apiservercel.Escape(name); can {
					field, ok = current.Fields[escaped]
				}
			}
			if !ok {
				return nil
			}
			current = field.Type
		}
		if current == nil {
			return nil
		}
	}
	return current
}

// validatedSize is the length the API server allows for strings its
// validation bounds but the OpenAPI schemas do not declare: names, label
// keys and values, annotations, resource names. Pods, nodes and
// namespaces always pass that validation before the scheduler sees them;
// objects that skipped it (files given to the CLI) may be larger, and
// estimates for them are not bounds.
func (s *sizeEstimator) validatedSize(path []string) (uint64, bool) {
	suffix := func(s ...string) bool {
		return len(path) >= len(s) && slices.Equal(path[len(path)-len(s):], s)
	}
	switch {
	case suffix("labels", "@values"), suffix("nodeSelector", "@values"):
		return LabelValueMaxBytes, true
	case suffix("labels", "@keys"), suffix("annotations", "@keys"), suffix("nodeSelector", "@keys"):
		return QualifiedNameMaxBytes, true
	case suffix("metadata", "annotations", "@values"):
		return TotalAnnotationMaxBytes, true
	case suffix("metadata", "name"), suffix(s.vars.NodeInfo, "pods", "@items", "name"),
		// podGroup.assignedNodes: node names.
		suffix("assignedNodes", "@items"):
		return NameMaxBytes, true
	case suffix("metadata", "namespace"), suffix(s.vars.NodeInfo, "pods", "@items", "namespace"):
		return NamespaceMaxBytes, true
	}
	// Resource names (requests, limits, allocatable, capacity, overhead,
	// nodeInfo's) are qualified names.
	if len(path) >= 2 && path[len(path)-1] == "@keys" {
		switch path[len(path)-2] {
		case "requests", "limits", "allocatable", "capacity", "overhead", "allocatedResources", "requested":
			return QualifiedNameMaxBytes, true
		}
	}
	return 0, false
}

func (s *sizeEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Estimator is the Kubernetes cost estimator (library.CostEstimator)
// taught the sizes of optional values: without it, the idiomatic
// labels[?'k'].orValue(”) has an unknown size, and any string built from it
// an astronomical estimated cost.
type Estimator struct {
	*library.CostEstimator
	sizes *sizeEstimator
}

// Vars name the variables of an environment whose sizes an Estimator
// knows beyond their declared types.
type Vars struct {
	// Objects are bound to Kubernetes objects (the pod, the node, the
	// namespace), which passed the API server's validation and are at
	// most MaxObjectSizeBytes.
	Objects []string
	// Params is bound to a policy's params object: written by admins,
	// typically small (see EstimateSize).
	Params string
	// NodeInfo is bound to the node's scheduling state, whose pods' names
	// and namespaces are validated object names.
	NodeInfo string
}

// NewEstimator returns the cost estimator of the environment whose
// variables have the declared types roots, named as vars says. typical
// estimates lists and maps at TypicalMaxItems elements at most, for
// warnings; otherwise estimates are bounds.
func NewEstimator(roots map[string]*apiservercel.DeclType, vars Vars, typical bool) *Estimator {
	sizes := &sizeEstimator{roots: roots, vars: vars, typical: typical}
	return &Estimator{CostEstimator: &library.CostEstimator{SizeEstimator: sizes}, sizes: sizes}
}

func (c *Estimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	switch function {
	case "_[?_]":
		// m[?k] and l[?i]: one lookup; the result is optional(element).
		if len(args) == 2 {
			if size := c.elementSize(args[0]); size != nil {
				return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: size}
			}
		}
	case "_?._":
		// obj.?field: one select; the result is optional(field).
		if len(args) == 2 {
			if path := exprPath(args[0].Expr()); path != nil {
				if field, ok := args[1].Expr().AsLiteral().(types.String); ok {
					if size := c.sizes.EstimateSize(pathNode(append(path, string(field)))); size != nil {
						return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: size}
					}
				}
			}
		}
	case "orValue", "or":
		// o.orValue(v), o.or(p): the result is o's value or the argument.
		if target != nil && len(args) == 1 {
			a, b := c.nodeSize(*target), c.nodeSize(args[0])
			if a != nil && b != nil {
				size := checker.SizeEstimate{Min: min(a.Min, b.Min), Max: max(a.Max, b.Max)}
				return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: &size}
			}
		}
	}
	if est := c.estimateGrowingCall(function, target, args); est != nil {
		return est
	}
	return c.CostEstimator.EstimateCallCost(function, overloadID, target, args)
}

// estimateGrowingCall prices the functions whose work grows with their
// input but that the Kubernetes estimator prices as constant or below
// their work (measured in BenchmarkFunctionCost), as the runtime tracker
// prices them (cost.go): by the length of their strings, the size of their
// results and the depth of their comparisons.
func (c *Estimator) estimateGrowingCall(function string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	// receiver is the string a function applies to: its target, or its
	// first argument for global overloads (size(s), int(s)).
	receiver := target
	rest := args
	if receiver == nil && len(args) > 0 {
		receiver, rest = &args[0], args[1:]
	}
	if receiver == nil {
		return nil
	}
	isString := (*receiver).Type().Kind() == types.StringKind
	traversal := func(n checker.AstNode) checker.CostEstimate {
		return c.sizeOf(n).MultiplyByCostFactor(celcommon.StringTraversalCostFactor)
	}
	switch function {
	case "charAt":
		// Converts the whole string to runes.
		if isString {
			return &checker.CallEstimate{CostEstimate: traversal(*receiver), ResultSize: &checker.SizeEstimate{Min: 0, Max: 1}}
		}
	case "indexOf", "lastIndexOf":
		// Converts both strings to runes and compares them at every
		// position, as contains is priced.
		if isString && len(rest) >= 1 {
			needle := traversal(rest[0])
			needle = checker.CostEstimate{Min: max(needle.Min, 1), Max: max(needle.Max, 1)}
			return &checker.CallEstimate{CostEstimate: traversal(*receiver).Multiply(needle)}
		}
	case "size", "isURL", "int", "uint", "double", "bool", "duration", "timestamp":
		// Counting characters and parsing traverse the string.
		if isString {
			cost := traversal(*receiver)
			return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: max(cost.Min, 1), Max: max(cost.Max, 1)}}
		}
	case "replace", "find", "findAll", "join":
		// The result is built too: its size is the Kubernetes estimate's.
		est := c.CostEstimator.EstimateCallCost(function, "", target, args)
		if est == nil || est.ResultSize == nil {
			return nil
		}
		cost := est.CostEstimate
		switch function {
		case "replace":
			cost = cost.Add(est.ResultSize.MultiplyByCostFactor(celcommon.StringTraversalCostFactor))
		case "find":
			cost = cost.MultiplyByCostFactor(findRegexFactor)
		case "findAll":
			cost = cost.MultiplyByCostFactor(findRegexFactor).Add(est.ResultSize.MultiplyByCostFactor(2))
		case "join":
			// One unit per element, and the result traversed twice, as
			// the runtime prices it.
			cost = cost.Add(checker.CostEstimate(c.sizeOf(*receiver))).
				Add(est.ResultSize.MultiplyByCostFactor(celcommon.StringTraversalCostFactor))
		}
		return &checker.CallEstimate{CostEstimate: cost, ResultSize: est.ResultSize}
	case "format":
		// The format string and everything formatted.
		if target != nil && len(args) == 1 {
			cost := traversal(*target).Add(checker.CostEstimate{Min: 1, Max: c.deepBound(args[0])})
			return &checker.CallEstimate{CostEstimate: cost}
		}
	case "_==_", "_!=_":
		// Lists, maps and objects compare deeply, up to the smaller one.
		if len(args) == 2 && mayBeAggregate(args[0].Type()) && mayBeAggregate(args[1].Type()) {
			bound := max(min(c.deepBound(args[0]), c.deepBound(args[1])), 1)
			return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: bound}}
		}
	case "@in":
		// A list or map compared deeply with every element of the list.
		if len(args) == 2 && mayBeAggregate(args[0].Type()) && args[1].Type().Kind() == types.ListKind {
			cost := checker.CostEstimate(c.sizeOf(args[1])).Add(checker.CostEstimate{Min: 1, Max: c.deepBound(args[1])})
			return &checker.CallEstimate{CostEstimate: cost}
		}
	}
	return nil
}

// mayBeAggregate says whether values of a type may be lists, maps or objects.
func mayBeAggregate(t *types.Type) bool {
	switch t.Kind() {
	case types.ListKind, types.MapKind, types.StructKind, types.DynKind, types.AnyKind:
		return true
	}
	return false
}

// deepBound bounds the cost of visiting a value deeply (one unit per
// element and the traversal of its strings, as cost.go's deepCost): from
// its declared type and sizes when it is read from a root variable, at
// most maxObjectDeepCost; from its parts for a literal (exprBound); else as
// large as the largest object.
func (c *Estimator) deepBound(node checker.AstNode) uint64 {
	if path := pathOf(node); len(path) > 0 {
		if decl := c.sizes.declAt(path); decl != nil {
			return min(c.declBound(decl, slices.Clone(path), 0), maxObjectDeepCost)
		}
	}
	// A computed list of numbers, booleans, durations or timestamps.
	if t := node.Type(); t.Kind() == types.ListKind && len(t.Parameters()) == 1 && !mayBeAggregate(t.Parameters()[0]) {
		switch t.Parameters()[0].Kind() {
		case types.StringKind, types.BytesKind:
		default:
			if size := node.ComputedSize(); size != nil {
				return addSat(size.Max, 1)
			}
		}
	}
	if e := node.Expr(); e != nil {
		return c.exprBound(e)
	}
	return maxObjectDeepCost
}

// exprBound bounds deepCost of the value of an expression made of literals,
// list and map literals, reads from root variables and orValue: what
// format's arguments usually are. Anything else is as large as the largest
// object.
func (c *Estimator) exprBound(e celast.Expr) uint64 {
	switch e.Kind() {
	case celast.LiteralKind:
		switch v := e.AsLiteral().(type) {
		case types.String:
			return max(traversalUnits(uint64(len(v))), 1)
		case types.Bytes:
			return max(traversalUnits(uint64(len(v))), 1)
		}
		return 1
	case celast.ListKind:
		total := uint64(1)
		for _, el := range e.AsList().Elements() {
			total = addSat(total, c.exprBound(el))
		}
		return min(total, maxObjectDeepCost)
	case celast.MapKind:
		total := uint64(1)
		for _, entry := range e.AsMap().Entries() {
			me := entry.AsMapEntry()
			total = addSat(total, addSat(c.exprBound(me.Key()), c.exprBound(me.Value()))+mapEntryCost)
		}
		return min(total, maxObjectDeepCost)
	case celast.CallKind:
		if call := e.AsCall(); call.FunctionName() == "orValue" && call.IsMemberFunction() && len(call.Args()) == 1 {
			return max(c.exprBound(call.Target()), c.exprBound(call.Args()[0]))
		}
	}
	if path := exprPath(e); len(path) > 0 {
		if decl := c.sizes.declAt(path); decl != nil {
			return min(c.declBound(decl, slices.Clone(path), 0), maxObjectDeepCost)
		}
	}
	return maxObjectDeepCost
}

// maxObjectDeepCost bounds deepCost of any part of a stored object: every
// element takes at least two bytes of its serialization, JSON or protobuf
// (one unit), a map entry or object field at least six (four units), and
// strings are traversed at StringTraversalCostFactor.
const maxObjectDeepCost = MaxObjectSizeBytes*2/3 + (MaxObjectSizeBytes+9)/10

// declBound bounds deepCost of a value of a declared type at a path.
func (c *Estimator) declBound(decl *apiservercel.DeclType, path []string, depth int) uint64 {
	if depth > 32 {
		return maxObjectDeepCost
	}
	switch {
	case decl.IsList():
		return addSat(1, mulSat(c.countAt(path), c.declBound(decl.ElemType, append(path, "@items"), depth+1)))
	case decl.IsMap():
		entry := addSat(c.declBound(decl.KeyType, append(path, "@keys"), depth+1), c.declBound(decl.ElemType, append(path, "@values"), depth+1))
		return addSat(1, mulSat(c.countAt(path), addSat(entry, mapEntryCost)))
	case decl.IsObject():
		total := uint64(1)
		for name, f := range decl.Fields {
			total = addSat(total, max(traversalUnits(uint64(len(name))), 1)+mapEntryCost)
			total = addSat(total, c.declBound(f.Type, append(path, name), depth+1))
		}
		return total
	case decl.CelType().Kind() == types.StringKind, decl.CelType().Kind() == types.BytesKind:
		if s := c.sizes.EstimateSize(pathNode(path)); s != nil {
			return max(traversalUnits(s.Max), 1)
		}
		return maxObjectDeepCost
	case decl.CelType().Kind() == types.DynKind:
		return maxObjectDeepCost
	}
	return 1
}

// countAt is the estimated number of elements of the list or map at path.
func (c *Estimator) countAt(path []string) uint64 {
	if s := c.sizes.EstimateSize(pathNode(path)); s != nil {
		return s.Max
	}
	return MaxObjectSizeBytes
}

// sizeOf is the estimated size of a node, unbounded when unknown.
func (c *Estimator) sizeOf(node checker.AstNode) checker.SizeEstimate {
	if size := c.nodeSize(node); size != nil {
		return *size
	}
	return checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
}

// elementSize is the size of an element of the map or list at node.
func (c *Estimator) elementSize(node checker.AstNode) *checker.SizeEstimate {
	path := pathOf(node)
	if len(path) == 0 {
		return nil
	}
	for _, child := range []string{"@values", "@items"} {
		if size := c.sizes.EstimateSize(pathNode(append(slices.Clone(path), child))); size != nil {
			return size
		}
	}
	return nil
}

func (c *Estimator) nodeSize(node checker.AstNode) *checker.SizeEstimate {
	if size := node.ComputedSize(); size != nil {
		return size
	}
	if size := c.sizes.EstimateSize(node); size != nil {
		return size
	}
	if len(node.Path()) == 0 {
		if path := pathOf(node); len(path) > 0 {
			return c.sizes.EstimateSize(pathNode(path))
		}
	}
	return nil
}

// pathOf is a node's path from a root variable: the checker's, or for an
// optional field or element read (obj.?field, map[?'key'], which the
// checker gives no path), the path of what it reads.
func pathOf(node checker.AstNode) []string {
	if path := node.Path(); len(path) > 0 {
		return path
	}
	if e := node.Expr(); e != nil {
		return exprPath(e)
	}
	return nil
}

// exprPath is the path of an expression that reads from a root variable
// through fields and constant keys, optional or not; nil for anything else.
func exprPath(e celast.Expr) []string {
	switch e.Kind() {
	case celast.IdentKind:
		return []string{e.AsIdent()}
	case celast.SelectKind:
		if operand := exprPath(e.AsSelect().Operand()); operand != nil {
			return append(operand, e.AsSelect().FieldName())
		}
	case celast.CallKind:
		call := e.AsCall()
		args := call.Args()
		if call.IsMemberFunction() || len(args) != 2 || args[1].Kind() != celast.LiteralKind {
			return nil
		}
		operand := exprPath(args[0])
		if operand == nil {
			return nil
		}
		switch call.FunctionName() {
		case "_?._":
			if field, ok := args[1].AsLiteral().(types.String); ok {
				return append(operand, string(field))
			}
		case "_[_]", "_[?_]":
			switch args[1].AsLiteral().(type) {
			case types.String:
				return append(operand, "@values")
			case types.Int, types.Uint:
				return append(operand, "@items")
			}
		}
	}
	return nil
}

// pathNode is a checker.AstNode that only has a path, to look up a declared
// size.
type pathNode []string

func (p pathNode) Path() []string                      { return p }
func (p pathNode) Type() *types.Type                   { return types.DynType }
func (p pathNode) Expr() celast.Expr                   { return nil }
func (p pathNode) ComputedSize() *checker.SizeEstimate { return nil }
