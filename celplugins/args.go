package celplugins

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// DefaultEvaluationBudget is the default CEL time budget of one pod's
// scheduling cycle (Args.EvaluationBudget).
const DefaultEvaluationBudget = 100 * time.Millisecond

// Args are the plugin args of CELFilter, the plugin whose PreFilter starts
// the policies' part of a scheduling cycle, in the profile's pluginConfig:
//
//	pluginConfig:
//	- name: CELFilter
//	  args:
//	    evaluationBudget: 100ms
type Args struct {
	// EvaluationBudget bounds the wall time of the CEL work of one pod's
	// scheduling cycle, from PreFilter (matching) through Filter on every
	// node to Score: an evaluation still running when it is spent is cut off
	// with an error naming the policy and rule, which follows the policy's
	// failurePolicy, and every evaluation after it fails at once. So a slow
	// policy delays the scheduling queue (and every profile, as cycles are
	// serial) by at most this much per pod. Default 100ms; 0 means the
	// default.
	EvaluationBudget metav1.Duration `json:"evaluationBudget,omitempty"`
	// ExplainRejections, when true, records on a pod that a policy's
	// filter rejects an event (reason RejectionDetail, at most one per
	// scheduling cycle) with the values of the false rule's
	// sub-expressions on one of the nodes it rejected, as `celsched explain
	// --why` shows them: e.g. node.metadata.labels[...] = "c". Those values
	// come from nodes, namespaces and params, and whoever can read the
	// pod's events reads them: turn it on where pods' owners may see them.
	// The policies then keep their checked expressions (about 25 KB more
	// each). Default false.
	ExplainRejections bool `json:"explainRejections,omitempty"`
}

// DecodeArgs decodes and defaults a plugin's args.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
		return args, fmt.Errorf("decoding the plugin args: %w", err)
	}
	switch {
	case args.EvaluationBudget.Duration < 0:
		return args, fmt.Errorf("evaluationBudget: %s must not be negative", args.EvaluationBudget.Duration)
	case args.EvaluationBudget.Duration == 0:
		args.EvaluationBudget.Duration = DefaultEvaluationBudget
	}
	return args, nil
}
