package verdict

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"

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
		return nil, notANode(bound, err)
	}
	return refusals(ctx, e.rt, e.budget, info.Node(), info.GetGeneration(), info, celplugins.NodeInfoFrom, bound)
}

// notANode is the error of a pod bound to a node that is not one of the
// cluster's.
func notANode(bound *corev1.Pod, err error) error {
	return fmt.Errorf("pod %s/%s is bound to %s, which is not a node of the cluster: %w", bound.Namespace, bound.Name, bound.Spec.NodeName, err)
}

// refusals evaluates the Refusals of bound on its node, with rt and
// budget: node, the generation of the scheduler's view of it, and the
// view (source), which info converts for the policies that read nodeInfo
// (Converter.NodeInput).
func refusals(ctx context.Context, rt *celplugins.Runtime, budget time.Duration, node *corev1.Node, generation int64, source any, info engine.NodeInfoSource, bound *corev1.Pod) ([]Refusal, error) {
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
	// PodsOnNode lists the pods bound to a node (IndexPodsByNode); nil:
	// Refuser lists every pod and keeps those on the node.
	PodsOnNode func(node string) ([]*corev1.Pod, error)
	// Synced says whether the informers behind the listers have synced;
	// nil: they have. Until then nothing is evaluated (an empty list is
	// not evidence).
	Synced func() bool
	// Simulator keeps the Evaluators of the scheduler's informers, built
	// once (NewSimulator over the factory behind the listers); nil: each
	// Session builds its own, over the objects of Objects.
	Simulator *Simulator
}

// HasSynced says whether the informers have synced.
func (l *Live) HasSynced() bool { return l.Synced == nil || l.Synced() }

// Policies is the scheduler's current snapshot of compiled policies.
func (l *Live) Policies() *engine.Snapshot { return l.Inputs.Policies.Snapshot() }

// Evaluator returns an Evaluator over the cluster as the informers hold
// it now (the pods on nodes that have not terminated), with the
// scheduler's current snapshot of policies: the Simulator's, pointed at
// them. Call release when done with it; until then no other caller of the
// Simulator evaluates.
func (l *Live) Evaluator(ctx context.Context) (e *Evaluator, release func(), err error) {
	if !l.HasSynced() {
		return nil, nil, fmt.Errorf("the scheduler's informers have not synced yet")
	}
	pods, err := l.Pods.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	cluster, err := l.cluster(pods)
	if err != nil {
		return nil, nil, err
	}
	ss := l.Simulator.session()
	policies := Policies{Snapshot: l.Policies(), Params: l.Inputs.Params, Converter: l.Inputs.Converter}
	if e, err = ss.Evaluator(ctx, Slot{Name: "now"}, cluster, policies, l.Config); err != nil {
		ss.Release()
		return nil, nil, err
	}
	return e, ss.Release, nil
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
	// A Simulator's built-in plugins read the scheduler's informers; an
	// Evaluator built for one Session reads a fake clientset of these.
	if l.Objects != nil && l.Simulator == nil {
		if objects, err = l.Objects(); err != nil {
			return nil, fmt.Errorf("listing the objects built-in plugins read: %w", err)
		}
	}
	groups, err := l.podGroups()
	if err != nil {
		return nil, err
	}
	return NewLiveCluster(namespaces, nodes, placed(pods), objects).WithPodGroups(groups), nil
}

// podGroups lists the PodGroups (none without Live.PodGroups).
func (l *Live) podGroups() ([]*schedulingv1beta1.PodGroup, error) {
	if l.PodGroups == nil {
		return nil, nil
	}
	groups, err := l.PodGroups()
	if err != nil {
		return nil, fmt.Errorf("listing PodGroups: %w", err)
	}
	return groups, nil
}

// placed returns the pods of pods that are bound and have not
// terminated, in a new slice.
func placed(pods []*corev1.Pod) []*corev1.Pod {
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

// Refuser answers Refusals as an Evaluator over the cluster as the
// scheduler's informers hold it would, without building that cluster: a
// pod is evaluated on a view of its own node, made when a pod on the node
// is first asked about and kept, whose pods (those bound to the node that
// have not terminated, as the Evaluator's cluster holds them) are read
// only when a policy reads nodeInfo. Drift detection asks about the pods
// a write interval's events touched: what that costs follows those pods
// (and, for nodeInfo, the pods beside them), not the cluster's size (an
// Evaluator's cluster is a snapshot of every pod). Use it from one
// goroutine; take a new one to see later changes.
type Refuser struct {
	live *Live
	rt   *celplugins.Runtime
	// nodes are the views made. Key: node name; nil: not a node of the
	// cluster. Bound: the nodes of the pods asked about.
	nodes map[string]*nodeView
}

// Refuser returns a Refuser over the cluster as the informers hold it,
// with the scheduler's current snapshot of policies. When a policy reads
// podGroup, it lists the running pods once, for the groups' placed
// members.
func (l *Live) Refuser() (*Refuser, error) {
	if !l.HasSynced() {
		return nil, fmt.Errorf("the scheduler's informers have not synced yet")
	}
	snapshot := l.Policies()
	var groups engine.PodGroupResolver // nil: a pod's group has its name alone
	if snapshot.ReadsPodGroup() {
		// The Evaluator's groups: its cluster's PodGroups, and its pods
		// as their members placed.
		pods, err := l.Pods.List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		nodes, err := l.Nodes.List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		podGroups, err := l.podGroups()
		if err != nil {
			return nil, err
		}
		groups = engine.NewStaticPodGroups(podGroups, onNodes(placed(pods), nodes))
	}
	policies := Policies{Snapshot: snapshot, Params: l.Inputs.Params, Converter: l.Inputs.Converter}
	rt := dryRuntime(policies, groups)
	rt.Inputs.UseNamespaces(l.Namespaces)
	return &Refuser{live: l, rt: rt, nodes: map[string]*nodeView{}}, nil
}

// Refusals is Evaluator.Refusals, with the CEL plugins' default budget.
func (r *Refuser) Refusals(ctx context.Context, bound *corev1.Pod) ([]Refusal, error) {
	v, err := r.view(bound.Spec.NodeName)
	if err != nil {
		return nil, notANode(bound, err)
	}
	out, err := refusals(ctx, r.rt, 0, v.node, v.generation, v, nodeViewInfo, bound)
	if err == nil && v.err != nil {
		// nodeInfo could not be read: the policies that read it did not
		// decide, and their error is not a refusal.
		return nil, v.err
	}
	return out, err
}

// view returns the view of a node, made on first use.
func (r *Refuser) view(name string) (*nodeView, error) {
	v, made := r.nodes[name]
	if !made {
		node, err := r.live.Nodes.Get(name)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading node %s: %w", name, err)
		}
		if err == nil {
			// A NodeInfo's generation, unique in the process as the
			// scheduler's are: the converter keeps a node's nodeInfo
			// value by generation, beside the scheduler's.
			v = &nodeView{live: r.live, node: node, generation: framework.NewNodeInfo().Generation}
		}
		r.nodes[name] = v
	}
	if v == nil {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return v, nil
}

// nodeView is a Refuser's view of a node: the node, and nodeInfo's input
// (the scheduler's view of the node with its pods), built on first use.
type nodeView struct {
	live       *Live
	node       *corev1.Node
	generation int64
	// info is nodeInfo's input, nil until made; err is why listing the
	// pods failed (the Refusals of the node's pods fail with it).
	info *engine.NodeInfo
	err  error
}

// nodeViewInfo is a nodeView's nodeInfo input (an engine.NodeInfoSource,
// called only when a policy reads nodeInfo): the node with the pods bound
// to it that have not terminated, listed on first use.
func nodeViewInfo(source any) *engine.NodeInfo {
	v, ok := source.(*nodeView)
	if !ok {
		return nil
	}
	if v.info == nil && v.err == nil {
		pods, err := v.live.PodsOn(v.node.Name)
		if err != nil {
			v.err = err
			return nil
		}
		ni := framework.NewNodeInfo(pods...)
		ni.SetNode(v.node)
		v.info = celplugins.NodeInfo(ni)
	}
	return v.info
}

// PodsOn lists the pods bound to a node that have not terminated: from
// the informer's index (PodsOnNode), or from every pod without it.
func (l *Live) PodsOn(node string) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	var err error
	if l.PodsOnNode != nil {
		pods, err = l.PodsOnNode(node)
	} else {
		pods, err = l.Pods.List(labels.Everything())
	}
	if err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node, err)
	}
	return slices.DeleteFunc(placed(pods), func(p *corev1.Pod) bool { return p.Spec.NodeName != node }), nil
}

// terminated says whether a pod has terminated: the cluster leaves it
// out, as the scheduler's cache does once it is deleted.
func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podsByNode names the pod informer's index by spec.nodeName
// (IndexPodsByNode).
const podsByNode = "celsched.dev/spec.nodeName"

// IndexPodsByNode adds an index of pods by the node they are bound to to
// a pod informer (once; the informer may have started), and returns what
// reads it, for Live.PodsOnNode.
func IndexPodsByNode(informer cache.SharedIndexInformer) (func(node string) ([]*corev1.Pod, error), error) {
	if _, ok := informer.GetIndexer().GetIndexers()[podsByNode]; !ok {
		if err := informer.AddIndexers(cache.Indexers{podsByNode: podNodeName}); err != nil {
			return nil, fmt.Errorf("indexing pods by node: %w", err)
		}
	}
	return podsOnNode(informer.GetIndexer()), nil
}

// podNodeName is the index function of podsByNode.
func podNodeName(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
		return []string{pod.Spec.NodeName}, nil
	}
	return nil, nil
}

// podsOnNode reads the podsByNode index of an indexer.
func podsOnNode(indexer cache.Indexer) func(node string) ([]*corev1.Pod, error) {
	return func(node string) ([]*corev1.Pod, error) {
		objs, err := indexer.ByIndex(podsByNode, node)
		if err != nil {
			return nil, err
		}
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			if pod, ok := o.(*corev1.Pod); ok {
				pods = append(pods, pod)
			}
		}
		return pods, nil
	}
}
