package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
)

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
	// once (verdict.NewSimulator over the factory behind the listers);
	// nil: each Session builds its own, over the objects of Objects.
	Simulator *verdict.Simulator
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
func (l *Live) Evaluator(ctx context.Context) (e *verdict.Evaluator, release func(), err error) {
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
	ss := l.Simulator.Session()
	policies := verdict.Policies{Snapshot: l.Policies(), Params: l.Inputs.Params, Converter: l.Inputs.Converter}
	if e, err = ss.Evaluator(ctx, verdict.Slot{Name: "now"}, cluster, policies, l.Config); err != nil {
		ss.Release()
		return nil, nil, err
	}
	return e, ss.Release, nil
}

// cluster is the cluster the informers hold now, with the pods of pods
// that are on nodes and have not terminated.
func (l *Live) cluster(pods []*corev1.Pod) (*verdict.Cluster, error) {
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
	return verdict.NewLiveCluster(namespaces, nodes, verdict.Placed(pods), objects).WithPodGroups(groups), nil
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
		groups = engine.NewStaticPodGroups(podGroups, verdict.OnNodes(verdict.Placed(pods), nodes))
	}
	policies := verdict.Policies{Snapshot: snapshot, Params: l.Inputs.Params, Converter: l.Inputs.Converter}
	rt := verdict.DryRuntime(policies, groups)
	rt.Inputs.UseNamespaces(l.Namespaces)
	return &Refuser{live: l, rt: rt, nodes: map[string]*nodeView{}}, nil
}

// Refusals is Evaluator.Refusals, with the CEL plugins' default budget.
func (r *Refuser) Refusals(ctx context.Context, bound *corev1.Pod) ([]verdict.Refusal, error) {
	v, err := r.view(bound.Spec.NodeName)
	if err != nil {
		return nil, verdict.NotANode(bound, err)
	}
	out, err := verdict.NodeRefusals(ctx, r.rt, 0, v.node, v.generation, v, nodeViewInfo, bound)
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
	return slices.DeleteFunc(verdict.Placed(pods), func(p *corev1.Pod) bool { return p.Spec.NodeName != node }), nil
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
