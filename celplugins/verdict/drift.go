package verdict

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// Refusal is an enforced policy's verdict against a running pod's own
// node: the policy would not place the pod there today.
type Refusal struct {
	Policy string
	// Message is the decision's, as the pod's condition would read it.
	Message string
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
		return nil, fmt.Errorf("pod %s/%s is bound to %s, which is not a node of the cluster: %w", bound.Namespace, bound.Name, bound.Spec.NodeName, err)
	}
	pod := Default(bound)
	pod.Spec.NodeName, pod.Status = "", corev1.PodStatus{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the cycle's budget timer
	c, err := e.rt.Prepare(ctx, pod, e.budget)
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
	in, err := e.rt.Inputs.Converter.NodeInput(info.Node(), info.GetGeneration(), info, celplugins.NodeInfoFrom)
	if err != nil {
		return nil, err
	}
	for _, p := range c.Filters {
		if !p.Enforced() {
			continue
		}
		if d := p.Filter(c.Ctx, c.Pod, &in); d.Verdict != engine.Pass {
			out = append(out, Refusal{Policy: p.Name, Message: d.String()})
		}
	}
	return out, nil
}

// Replacement evaluates a bound pod's replacement (the pod as its
// controller would create it again: unbound, without status) with the
// pod itself evicted, as Reschedule does, and stops at the first feasible
// node: Result.Feasible holds it, or is empty when the replacement would
// find no node (the nodes' rejections say why).
func (e *Evaluator) Replacement(ctx context.Context, bound *corev1.Pod) (*Result, error) {
	again := bound.DeepCopy()
	again.Spec.NodeName, again.Status = "", corev1.PodStatus{}
	return e.run(ctx, again, bound, anyNode)
}

// Live builds Evaluators of the cluster as the scheduler's informers hold
// it, with the scheduler's own policies, converter and params: what
// drift detection and remediation evaluate running pods with, outside any
// scheduling cycle.
type Live struct {
	// Inputs are the scheduler's CEL plugins' inputs: its policies, its
	// converter (and the results remembered on its nodes), its params.
	Inputs     *celplugins.Inputs
	Pods       corelisters.PodLister
	Nodes      corelisters.NodeLister
	Namespaces corelisters.NamespaceLister
	// Objects lists the other objects built-in plugins read (volumes,
	// storage classes, CSI nodes); nil: none.
	Objects func() ([]runtime.Object, error)
	// PodGroups lists the PodGroups, which policies read as podGroup; nil:
	// none (GenericWorkload off, and the scheduler has no informer for
	// them), and a pod's group has its name alone.
	PodGroups func() ([]*schedulingv1beta1.PodGroup, error)
	// Config is the scheduler's configuration (defaulted).
	Config *schedulerconfig.KubeSchedulerConfiguration
	// Synced says whether the informers behind the listers have synced;
	// nil: they have. Until then nothing is evaluated (an empty list is
	// not evidence).
	Synced func() bool
}

// HasSynced says whether the informers have synced.
func (l *Live) HasSynced() bool { return l.Synced == nil || l.Synced() }

// Policies is the scheduler's current snapshot of compiled policies.
func (l *Live) Policies() *engine.Snapshot { return l.Inputs.Policies.Snapshot() }

// Evaluator builds an Evaluator over the cluster as the informers hold it
// now (the pods on nodes that have not terminated), with the scheduler's
// current snapshot of policies. Close it after use.
func (l *Live) Evaluator(ctx context.Context) (*Evaluator, error) {
	if !l.HasSynced() {
		return nil, fmt.Errorf("the scheduler's informers have not synced yet")
	}
	pods, err := l.Pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	cluster, err := l.cluster(pods)
	if err != nil {
		return nil, err
	}
	policies := Policies{Snapshot: l.Policies(), Params: l.Inputs.Params, Converter: l.Inputs.Converter}
	return New(ctx, cluster, policies, Options{Config: l.Config})
}

// cluster is the cluster the informers hold now, with the pods of pods
// that are on nodes and have not terminated.
func (l *Live) cluster(pods []*corev1.Pod) (*Cluster, error) {
	nodes, err := l.Nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	namespaces, err := l.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var objects []runtime.Object
	if l.Objects != nil {
		if objects, err = l.Objects(); err != nil {
			return nil, fmt.Errorf("listing the objects built-in plugins read: %w", err)
		}
	}
	var groups []*schedulingv1beta1.PodGroup
	if l.PodGroups != nil {
		if groups, err = l.PodGroups(); err != nil {
			return nil, fmt.Errorf("listing PodGroups: %w", err)
		}
	}
	bound := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	return NewLiveCluster(namespaces, nodes, bound, objects).WithPodGroups(groups), nil
}

// ReplacingControllers are the kinds of controllers whose pods
// remediation evicts: they create a replacement, which the scheduler
// places. A DaemonSet's replacement comes back on the same node.
var ReplacingControllers = []string{"ReplicaSet", "StatefulSet", "Job", "ReplicationController"}

// Replaced says whether the pod's controller replaces it once evicted
// (ReplacingControllers); a bare pod is not replaced.
func Replaced(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	return owner != nil && slices.Contains(ReplacingControllers, owner.Kind)
}
