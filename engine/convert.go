package engine

import (
	"fmt"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/lru"
)

// DefaultMaxCachedNodes bounds the node and namespace caches of a Converter.
const DefaultMaxCachedNodes = 15000

// Converter turns pods, nodes and namespaces into CEL values. Node and
// namespace values are cached per object version (name, UID and
// resourceVersion) and reused across pods and scheduling cycles; the caches
// are bounded, and ForgetNode drops a node that is gone. It is safe for
// concurrent use.
type Converter struct {
	env        *Environment
	nodes      *lru.Cache
	namespaces *lru.Cache
}

// NewConverter returns a converter whose caches hold up to maxCached nodes
// and as many namespaces.
func NewConverter(env *Environment, maxCached int) *Converter {
	if maxCached <= 0 {
		maxCached = DefaultMaxCachedNodes
	}
	return &Converter{env: env, nodes: lru.New(maxCached), namespaces: lru.New(maxCached)}
}

// cachedValue is an object's CEL value for one version of the object.
type cachedValue struct {
	uid             ktypes.UID
	resourceVersion string
	val             ref.Val
}

// PodInput is a pod and its namespace, converted once per scheduling cycle
// and read by every evaluation of the cycle. It is immutable.
type PodInput struct {
	Pod       *corev1.Pod
	Namespace *corev1.Namespace

	pod, namespace        ref.Val
	podLabels, nsLabels   labels.Set
	schedulerName         string
}

// NodeInput is a node (and, lazily, the scheduler's view of it) for the
// evaluations of one scheduling cycle. Not safe for concurrent use: build
// one per node and goroutine.
type NodeInput struct {
	Node *corev1.Node

	node ref.Val
	// info builds nodeInfo on first use; nil when the caller has none.
	info     func() *NodeInfo
	nodeInfo ref.Val
}

// Pod converts a pod and its namespace. The namespace may be nil when it is
// unknown; expressions reading it then fail with an error.
func (c *Converter) Pod(pod *corev1.Pod, ns *corev1.Namespace) (*PodInput, error) {
	podVal, err := c.env.toVal(pod, c.env.podSchema)
	if err != nil {
		return nil, fmt.Errorf("converting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	in := &PodInput{
		Pod:           pod,
		Namespace:     ns,
		pod:           podVal,
		podLabels:     labels.Set(pod.Labels),
		schedulerName: pod.Spec.SchedulerName,
	}
	if ns != nil {
		in.nsLabels = labels.Set(ns.Labels)
		in.namespace, err = c.cached(c.namespaces, ns.Name, ns.UID, ns.ResourceVersion, ns, c.env.namespaceSchema)
		if err != nil {
			return nil, fmt.Errorf("converting namespace %s: %w", ns.Name, err)
		}
	}
	return in, nil
}

// Node returns the input of a node for one cycle. info, when not nil, builds
// the scheduler's view of the node; it is called at most once, and only when
// a policy reads nodeInfo.
func (c *Converter) Node(node *corev1.Node, info func() *NodeInfo) (*NodeInput, error) {
	val, err := c.NodeValue(node)
	if err != nil {
		return nil, err
	}
	return &NodeInput{Node: node, node: val, info: info}, nil
}

// NodeValue returns the CEL value of a node, converting it only when this
// version of the node is not cached.
func (c *Converter) NodeValue(node *corev1.Node) (ref.Val, error) {
	val, err := c.cached(c.nodes, node.Name, node.UID, node.ResourceVersion, node, c.env.nodeSchema)
	if err != nil {
		return nil, fmt.Errorf("converting node %s: %w", node.Name, err)
	}
	return val, nil
}

// ForgetNode drops a node's cached value, e.g. when the node is deleted.
func (c *Converter) ForgetNode(name string) { c.nodes.Remove(name) }

// ForgetNamespace drops a namespace's cached value.
func (c *Converter) ForgetNamespace(name string) { c.namespaces.Remove(name) }

func (c *Converter) cached(cache *lru.Cache, name string, uid ktypes.UID, rv string, obj runtime.Object, s *spec.Schema) (ref.Val, error) {
	if v, ok := cache.Get(name); ok {
		cv := v.(*cachedValue)
		// An object without a resourceVersion (not from an apiserver) is
		// never taken from the cache: it could be anything.
		if rv != "" && cv.uid == uid && cv.resourceVersion == rv {
			return cv.val, nil
		}
	}
	val, err := c.env.toVal(obj, s)
	if err != nil {
		return nil, err
	}
	if rv != "" {
		cache.Add(name, &cachedValue{uid: uid, resourceVersion: rv, val: val})
	}
	return val, nil
}

// toVal converts a typed object to a CEL value with the object's OpenAPI
// schema (so that, for example, timestamps are CEL timestamps), through
// apiserver's UnstructuredToVal, and then materializes the result: every map
// and list is built once, so that reading a field during evaluation is a map
// lookup that allocates nothing.
func (e *Environment) toVal(obj runtime.Object, s *spec.Schema) (ref.Val, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return materialize(openapi.UnstructuredToVal(u, s)), nil
}

// materialize replaces apiserver's lazy map and list wrappers, which convert
// a field on every access, by maps and lists of already converted values.
// (Lists with x-kubernetes-list-type map or set become plain lists: their
// order-insensitive equality is lost, which no scheduling rule relies on.)
func materialize(v ref.Val) ref.Val {
	switch t := v.(type) {
	case traits.Mapper:
		out := make(map[ref.Val]ref.Val, sizeOf(t))
		for it := t.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			out[k] = materialize(t.Get(k))
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, out)
	case traits.Lister:
		n := sizeOf(t)
		out := make([]ref.Val, 0, n)
		for i := 0; i < n; i++ {
			out = append(out, materialize(t.Get(types.Int(i))))
		}
		return types.NewRefValList(types.DefaultTypeAdapter, out)
	default:
		return v
	}
}

func sizeOf(s traits.Sizer) int {
	if n, ok := s.Size().(types.Int); ok {
		return int(n)
	}
	return 0
}

// NodeInfo is the scheduler's view of a node, read by expressions as
// nodeInfo. Resource quantities are integers: cpu in millicores, everything
// else (memory, ephemeral-storage, pods, extended resources) in its base unit.
type NodeInfo struct {
	Allocatable map[string]int64
	Requested   map[string]int64
	Pods        []PodRef
}

// PodRef is a pod on a node, as nodeInfo.pods shows it.
type PodRef struct {
	Namespace string
	Name      string
	Labels    map[string]string
}

// ResourceInts converts a resource list to nodeInfo's integer units.
func ResourceInts(list corev1.ResourceList) map[string]int64 {
	out := make(map[string]int64, len(list))
	for name, q := range list {
		out[string(name)] = quantityInt(name, q)
	}
	return out
}

func quantityInt(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// value builds the CEL value of nodeInfo.
func (n *NodeInfo) value() ref.Val {
	pods := make([]ref.Val, len(n.Pods))
	for i, p := range n.Pods {
		podLabels := p.Labels
		if podLabels == nil {
			podLabels = map[string]string{}
		}
		pods[i] = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{
			"namespace": p.Namespace,
			"name":      p.Name,
			"labels":    types.NewStringStringMap(types.DefaultTypeAdapter, podLabels),
		})
	}
	return types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{
		"allocatable": resourceMap(n.Allocatable),
		"requested":   resourceMap(n.Requested),
		"podCount":    types.Int(len(n.Pods)),
		"pods":        types.NewRefValList(types.DefaultTypeAdapter, pods),
	})
}

func resourceMap(m map[string]int64) ref.Val {
	out := make(map[ref.Val]ref.Val, len(m))
	for k, v := range m {
		out[types.String(k)] = types.Int(v)
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, out)
}

// nodeInfoValue returns nodeInfo's value, building it on first use.
func (n *NodeInput) nodeInfoValue() ref.Val {
	if n.nodeInfo == nil {
		if n.info == nil {
			return types.NewErr("nodeInfo is not available for node %s", n.Node.Name)
		}
		info := n.info()
		if info == nil {
			return types.NewErr("nodeInfo is not available for node %s", n.Node.Name)
		}
		n.nodeInfo = info.value()
	}
	return n.nodeInfo
}
