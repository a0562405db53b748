package verdict

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// Refusal is an enforced policy's verdict against a running pod's own
// node: the policy would not place the pod there today.
type Refusal struct {
	Policy string
	// Message is the decision's, as the pod's condition would read it.
	Message string
	// PlacedBy says who placed the pod, when the caller knows (drift):
	// empty for one of the profiles.
	PlacedBy schedv1alpha1.PodPlacement
}

// Refusals are the enforced policies whose filters refuse a bound pod on
// the node it runs on: the CEL filter plugin's decisions for the pod,
// unbound and as created (no status), on its node as the cluster holds
// it (the pod on it). A policy that rejects the pod on every node (it
// does not compile, or its match condition failed under failurePolicy
// Fail) refuses its node too. `celsched analyze` reports the same pods
// as running-in-violation. The pod's node must be a node of the cluster.
// The evaluation has the Evaluator's time budget (Options.Budget), or
// the CEL plugins' default.
func (e *Evaluator) Refusals(ctx context.Context, bound *corev1.Pod) ([]Refusal, error) {
	info, err := e.cluster.NodeInfo(bound.Spec.NodeName)
	if err != nil {
		return nil, NotANode(bound, err)
	}
	return NodeRefusals(ctx, e.rt, e.budget, info.Node(), info.GetGeneration(), info, celplugins.NodeInfoFrom, bound)
}

// NotANode is the error of a pod bound to a node that is not one of the
// cluster's.
func NotANode(bound *corev1.Pod, err error) error {
	return fmt.Errorf("pod %s/%s is bound to %s, which is not a node of the cluster: %w", bound.Namespace, bound.Name, bound.Spec.NodeName, err)
}

// NodeRefusals evaluates the Refusals of bound on its node, with rt and
// budget: node, the generation of the scheduler's view of it, and the
// view (source), which info converts for the policies that read nodeInfo
// (Converter.NodeInput).
func NodeRefusals(ctx context.Context, rt *celplugins.Runtime, budget time.Duration, node *corev1.Node, generation int64, source any, info engine.NodeInfoSource, bound *corev1.Pod) ([]Refusal, error) {
	pod := Default(bound)
	pod.Spec.NodeName, pod.Status = "", corev1.PodStatus{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the cycle's budget timer
	c, err := rt.Prepare(ctx, pod, budget)
	if err != nil {
		return nil, err
	}
	var out []Refusal
	if c.Rejection != nil && c.Rejection.Enforced() && c.Rejection.Policy != nil {
		out = append(out, Refusal{Policy: c.Rejection.Policy.Name, Message: c.Rejection.String()})
	}
	if len(c.Filters) == 0 {
		return out, nil
	}
	in, err := rt.Inputs.Converter.NodeInput(node, generation, source, info)
	if err != nil {
		return nil, err
	}
	// CELFilter's own evaluation of a node (it records with it in a dry
	// run): what refuses the pod here is what the plugin would act on.
	outcomes := c.FilterNode(ctx, &in)
	for i := range outcomes {
		if o := &outcomes[i]; o.Refuses() {
			out = append(out, Refusal{Policy: o.Decision.Policy.Name, Message: o.Decision.String()})
		}
	}
	return out, nil
}

// Placed returns the pods of pods that are bound and have not
// terminated, in a new slice.
func Placed(pods []*corev1.Pod) []*corev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return p.Spec.NodeName == "" || terminated(p) })
}

// Replaced says whether the pod's controller replaces it once evicted: a
// ReplicaSet, StatefulSet, Job or ReplicationController creates a
// replacement, which the scheduler places. A bare pod is not replaced,
// and a DaemonSet's replacement comes back on the same node.
func Replaced(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return false
	}
	switch owner.Kind {
	case "ReplicaSet", "StatefulSet", "Job", "ReplicationController":
		return true
	}
	return false
}

// terminated says whether a pod has terminated: the cluster leaves it
// out, as the scheduler's cache does once it is deleted.
func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
