package engine

import (
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Cost limits, in CEL cost units (roughly one unit per elementary operation;
// the Kubernetes limits are calibrated so that celconfig.PerCallLimit is about
// 0.1 s of CPU).
const (
	// MaxEstimatedCost is the largest worst-case cost, estimated at compile
	// time, that one expression may have; a larger estimate (typically a
	// loop nested in a loop over a pod's lists) is a compile error that
	// states the estimate. Estimates assume objects as large as Kubernetes
	// stores (MaxObjectSizeBytes), so a single loop over a pod's containers
	// estimates a few million.
	MaxEstimatedCost uint64 = 100 * celconfig.PerCallLimit

	// WarnEstimatedCost is the estimate above which an expression gets an
	// expression warning: it is likely to be cut off at runtime on large
	// objects.
	WarnEstimatedCost uint64 = 10 * celconfig.PerCallLimit

	// PerExpressionCostLimit is the runtime cost limit of one evaluation of
	// one expression. Expressions whose estimated worst case is within it
	// cannot exceed it and run without runtime cost tracking; the others are
	// tracked and cut off with an error when they exceed it.
	PerExpressionCostLimit uint64 = celconfig.PerCallLimit

	// PolicyEvaluationCostBudget is the runtime cost budget of evaluating one
	// policy for one pod (match conditions, preEnqueue) or for one pod and
	// one node (variables, filters, scores). Untracked expressions are
	// charged their estimated worst case.
	PolicyEvaluationCostBudget uint64 = celconfig.RuntimeCELCostBudget

	// MaxPodsPerNodeInfo is the number of pods that nodeInfo.pods is declared
	// to hold at most, for cost estimates. Expressions that read
	// nodeInfo.pods are always tracked at runtime, so a node with more pods is
	// still bounded by PerExpressionCostLimit.
	MaxPodsPerNodeInfo = 1024

	// MaxObjectSizeBytes is the largest object Kubernetes stores (etcd's
	// default request size limit). Cost estimates of pod, node and namespace
	// assume objects this large, not as large as an API request
	// (celconfig.MaxRequestSizeBytes, which apiserver's schema types assume).
	MaxObjectSizeBytes = 3 * 1024 * 1024 / 2
)
