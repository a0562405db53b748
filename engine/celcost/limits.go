package celcost

import (
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Cost limits, in CEL cost units (roughly one unit per elementary operation;
// the Kubernetes limits are calibrated so that celconfig.PerCallLimit is about
// 0.1 s of CPU).
//
// Cost bounds each expression and each policy evaluation; what bounds a
// whole scheduling cycle in wall time (every policy on every node) is the
// cycle's time budget, celplugins.Args.EvaluationBudget (default 100 ms):
// the evaluation running when it is spent is cut off (ErrTimeBudgetExceeded)
// and the cycle's later ones are not evaluated (ErrNotEvaluated), each
// following its policy's failurePolicy.
//
// How an expression's cost is bounded, and why:
//
//   - Every function whose work grows with its input is priced by that
//     input, at compile time (Estimator in env.go) and at runtime
//     (cost.go), alike: strings at one unit per ten bytes (the Kubernetes
//     StringTraversalCostFactor), the product of both lengths where every
//     position is compared (indexOf, lastIndexOf, as contains), the size
//     of what is built (replace, findAll, join, format, lists), one unit per
//     element and per map entry compared (==, != and in on lists, maps and
//     objects). The Kubernetes estimator prices charAt, size, isURL, the
//     conversions from strings and format as constant, indexOf and
//     lastIndexOf of a string as one traversal, and deep comparisons by
//     their number of elements; measured on 160 KiB strings and 20000
//     labels they took 1,100 to 840,000 ns per unit (charAt: 1.3 ms for a
//     cost of 5; indexOf of an 80 KiB string in a 160 KiB one: 2.8 s for
//     16,392; comparing a node with 20000 labels to itself: 2.5 ms for 3).
//     Priced by their input, every one measures 1 to 150 ns per unit on
//     the same inputs, most 20 to 90 (BenchmarkFunctionCost). What remains
//     priced below its work: a map lookup hashes its key, 3 to 25 us for a
//     160 KiB key, charged 1 (keys that long can only come from
//     annotations, at most 256 KiB in all).
//   - Sizes come from the declared types, and, where the OpenAPI schemas
//     declare none, from what the API server validates: label values 63
//     bytes, qualified names 317, all annotations 256 KiB, names 253,
//     namespaces 63 (validatedSize). Anything else is bounded by the
//     largest object, MaxObjectSizeBytes.
//   - An expression whose worst-case estimate is within
//     PerExpressionCostLimit runs untracked (Bounded): its estimate
//     bounds it. Any other is tracked (Tracked) and stops as soon as
//     it passes the limit; a call that would pass it is refused before it
//     runs, so that one call cannot run for seconds first. Expressions
//     whose estimate cannot be trusted (reading nodeInfo.pods, a variable
//     holding a list or map, or calling flatten) are always tracked.
//   - Tracking is celsched's, not cel-go's: cel-go's tracker is quadratic
//     in the length of a loop (BenchmarkTrackedLoop, lists.range(n).all(i,
//     i >= 0): n=10000 takes 111 ms tracked by cel-go, 3.2 ms by celsched
//     and 1.7 ms untracked; n=100000, cost 600,012, 25 s against 33 ms and
//     20 ms), so with it an expression needs over a second to reach the
//     limit. celsched's tracker costs 45 to 65 ns per unit in loops.
//
// So the wall time of one evaluation of one expression at the limit is
// about 50 ms of one CPU for loops and at most about 0.15 s for the slowest
// priced operations (measured on a shared 2-core machine). A lower
// limit for filters and scores was considered and not taken: the worst
// case of any string function on a field without a declared length (a
// resource quantity) is above 100,000, so an ordinary quantity() score
// would be tracked (about twice as slow: BenchmarkFilterLabelRuleTracked,
// 465 ns against 235) and warned about; the bound of a
// whole scheduling cycle is a deadline, not a smaller cost limit.
const (
	// PerExpressionCostLimit is the runtime cost limit of one evaluation of
	// one expression; an evaluation that exceeds it stops with an error.
	// Expressions whose worst-case cost, estimated at compile time for the
	// largest objects Kubernetes stores, is within it cannot exceed it and
	// run without runtime cost tracking.
	PerExpressionCostLimit uint64 = celconfig.PerCallLimit

	// MaxEstimatedCost is the largest typical cost, estimated at compile
	// time with lists and maps of TypicalMaxItems elements, that one
	// expression may have; a larger estimate (a loop nested in a loop nested
	// in a loop) is a compile error that states the estimate. It equals the
	// per-expression limit of CRD validation rules.
	MaxEstimatedCost uint64 = 10 * celconfig.PerCallLimit

	// WarnEstimatedCost is the typical estimate above which an expression
	// gets an expression warning: on objects with long lists it will be cut
	// off at runtime.
	WarnEstimatedCost uint64 = PerExpressionCostLimit

	// TypicalMaxItems is the number of elements that lists and maps are
	// assumed to have at most for the typical estimate. Kubernetes sets no
	// such bound on pods and nodes: the worst-case estimate, which assumes
	// lists as long as fit in the largest object, decides runtime tracking.
	TypicalMaxItems = 1024

	// PolicyEvaluationCostBudget is the runtime cost budget of evaluating one
	// policy for one pod (match conditions, preEnqueue) or for one pod and
	// one node (variables, filters, scores). Untracked expressions are
	// charged their worst-case estimate. At the speeds above, a policy
	// whose expressions spend it all runs for about 0.5 s per node.
	PolicyEvaluationCostBudget uint64 = celconfig.RuntimeCELCostBudget

	// MaxPodsPerNodeInfo is the number of pods that nodeInfo.pods is declared
	// to hold at most, for cost estimates. Expressions that read
	// nodeInfo.pods are always tracked at runtime, so a node with more pods is
	// still bounded by PerExpressionCostLimit.
	MaxPodsPerNodeInfo = TypicalMaxItems

	// MaxPlacementNodes is the number of nodes that placement.nodes (a
	// candidate placement of a pod group) is declared to hold at most, for
	// cost estimates. Placement rules are always tracked at runtime, so a
	// placement with more nodes is still bounded by PerExpressionCostLimit.
	MaxPlacementNodes = TypicalMaxItems

	// MaxObjectSizeBytes is the largest object Kubernetes stores (etcd's
	// default request size limit). Worst-case estimates assume pods, nodes
	// and namespaces this large, not as large as an API request
	// (celconfig.MaxRequestSizeBytes, which apiserver's schema types assume).
	MaxObjectSizeBytes = 3 * 1024 * 1024 / 2

	// Lengths the API server's validation allows, for the strings whose
	// OpenAPI schemas declare none (see validatedSize): label values,
	// qualified names (label and annotation keys, resource names), all the
	// annotations of an object together, object names and namespaces.
	LabelValueMaxBytes      = 63
	QualifiedNameMaxBytes   = 253 + 1 + 63
	TotalAnnotationMaxBytes = 256 * 1024
	NameMaxBytes            = 253
	NamespaceMaxBytes       = 63
)
