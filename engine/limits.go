package engine

import (
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Cost limits, in CEL cost units (roughly one unit per elementary operation;
// the Kubernetes limits are calibrated so that celconfig.PerCallLimit is about
// 0.1 s of CPU).
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
	// charged their worst-case estimate.
	PolicyEvaluationCostBudget uint64 = celconfig.RuntimeCELCostBudget

	// MaxPodsPerNodeInfo is the number of pods that nodeInfo.pods is declared
	// to hold at most, for cost estimates. Expressions that read
	// nodeInfo.pods are always tracked at runtime, so a node with more pods is
	// still bounded by PerExpressionCostLimit.
	MaxPodsPerNodeInfo = TypicalMaxItems

	// MaxObjectSizeBytes is the largest object Kubernetes stores (etcd's
	// default request size limit). Worst-case estimates assume pods, nodes
	// and namespaces this large, not as large as an API request
	// (celconfig.MaxRequestSizeBytes, which apiserver's schema types assume).
	MaxObjectSizeBytes = 3 * 1024 * 1024 / 2
)
