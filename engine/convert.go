package engine

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/engine/nodecache"
)

// DefaultMaxCachedNodes bounds the node and namespace caches of a Converter.
const DefaultMaxCachedNodes = 15000

// Converter turns pods, nodes and namespaces into CEL values. Node and
// namespace values are cached per object version (name, UID and
// resourceVersion) and reused across pods and scheduling cycles; the caches
// are bounded, and ForgetNode drops a node that is gone. It is safe for
// concurrent use.
type Converter struct {
	env *Environment
	// nodes holds the entry of each node's current version: read for
	// every pod and node, without a lock. Key: node name (the entry's UID
	// and resourceVersion are checked on read). Bound: max names, then it
	// starts over. Invalidated by a new version of the node (replaced) and
	// ForgetNode. Written by the first conversion of a node version (in a
	// cycle or a hint; concurrent fills store equal values).
	nodes *nodecache.Cache[nodeValue]
	// namespaces holds each namespace's CEL value (*cachedValue). Key:
	// namespace name (UID and resourceVersion checked on read). Bound: max
	// (LRU). Invalidated by a new version and ForgetNamespace. Written by
	// pod conversion.
	namespaces *lru.Cache
	// victims holds the CEL value of each running pod that victim rules
	// read (*cachedValue, Victim): preemption asks of the same pods for
	// preemptor after preemptor. Key: namespace/name (UID and
	// resourceVersion checked on read). Bound: max (LRU). Invalidated by a
	// new version of the pod. Written by Victim.
	victims *lru.Cache
	// podKeys interns pod keys (memo.go).
	podKeys podKeys
	// smallMemo bounds the results a node version remembers per
	// expression to one bucket (SmallMemo).
	smallMemo bool
}

// SmallMemo has the nodes' memo tables keep at most memoWays results
// per expression and node version (the oldest replaced first), instead
// of growing to memoBuckets*memoWays when many pod keys or params objects
// meet on a node, and returns c; call it before the first conversion. For
// the dry run, which takes the pods of one namespace after another on a
// few workers, so that the results of the namespaces done are never read
// again: on a cluster of 5000 nodes and 15 tenants (impact) the grown
// sets held more than half of its live heap. The scheduler's pods come in
// any order, and keep the grown sets.
func (c *Converter) SmallMemo() *Converter {
	c.smallMemo = true
	return c
}

// NewConverter returns a converter whose caches hold up to maxCached nodes
// and as many namespaces.
func NewConverter(env *Environment, maxCached int) *Converter {
	if maxCached <= 0 {
		maxCached = DefaultMaxCachedNodes
	}
	return &Converter{env: env, nodes: nodecache.New[nodeValue](maxCached), namespaces: lru.New(maxCached), victims: lru.New(maxVictims),
		podKeys: podKeys{ids: lru.New(maxCached)}}
}

// maxVictims bounds the victims' values a Converter keeps: the pods a busy
// preemption looks at, about the pods of a tenth of 5000 nodes.
const maxVictims = 16384

// cachedValue is an object's CEL value for one version of the object.
type cachedValue struct {
	uid             ktypes.UID
	resourceVersion string
	val             ref.Val
}

// PodInput is a pod and its namespace, converted once per scheduling cycle
// and read by every evaluation of the cycle. Its exported fields are not
// changed once the first evaluation starts; the pod's CEL value grows as
// policies read more of it (podValue).
type PodInput struct {
	Pod       *corev1.Pod
	Namespace *corev1.Namespace
	// Params finds the params objects of parameterized policies; without
	// it, they fail (and follow their failurePolicy).
	Params ParamsResolver
	// Group is the pod's group, as podGroup reads it; nil reads as
	// NoPodGroup (set it for a pod that names a group, before the first
	// evaluation: the plugins resolve it once per pod and cycle).
	Group *PodGroup

	// pod is the pod's CEL value for the fields it holds, converted on
	// first read and grown when an evaluation reads a field it does not
	// hold (podValue): policies that read only the node, or no policy at
	// all, never pay for it, and those that read its labels do not pay
	// for its spec. Key: none (one value, which holds what every policy
	// evaluated so far reads). Written by podValue, under podMu, which
	// serializes the conversions.
	pod       atomic.Pointer[podValue]
	podMu     sync.Mutex
	namespace ref.Val
	podEnv    *Environment

	schedulerName string

	// keys are the pod's memo keys (memo.go) by podReads, interned in
	// podKeys on first use (keyOf): one per distinct set of reads of the
	// policies evaluated. They live as long as the PodInput (the
	// scheduler keeps one per pod version: its Match); the evaluations
	// that read them write them (equal values).
	keys atomic.Pointer[[]keyFor[podReads]]
	// labelKeys are the memo keys of the specs that hold some of the
	// pod's labels (someLabelsKey): one per such policy or list.
	labelKeys atomic.Pointer[[]keyFor[*podKeySpec]]
	podKeys   *podKeys
}

// NodeInput is a node (and, lazily, the scheduler's view of it) for the
// evaluations of one scheduling cycle. Not safe for concurrent use: build
// one per node and goroutine. The scheduler's plugins keep it on their
// stack (Converter.NodeInput): a node whose expressions are all cached
// costs no allocation.
type NodeInput struct {
	Node *corev1.Node

	node ref.Val
	// memo holds the results of the memoized expressions on this node
	// version; nil when the node is not cached (it has no
	// resourceVersion).
	memo *memoTable
	// generation identifies the contents of the scheduler's view of the
	// node (fwk.NodeInfo.GetGeneration); 0 when unknown. nodeInfo's value
	// and the results of expressions reading it are kept per generation.
	generation int64
	// infoCache is the node's nodeInfo value of the last generation
	// converted; nil when the node is not cached.
	infoCache *atomic.Pointer[infoValue]
	// info builds nodeInfo on first use; nil when the caller has none.
	// infoFrom(infoSource) does the same without a closure.
	info       func() *NodeInfo
	infoFrom   NodeInfoSource
	infoSource any
	nodeInfo   ref.Val
	// shared is the copy on the heap that the evaluations of this input
	// share (see forEvaluation).
	shared *NodeInput
}

// NodeInfoSource builds the engine's view of a scheduler NodeInfo from
// source: a plain function, not a closure, so that passing it allocates
// nothing.
type NodeInfoSource func(source any) *NodeInfo

// forEvaluation returns the copy of the input that evaluations keep (on the
// heap), made once per input, so that nodeInfo is built once for all the
// policies evaluated on it, and the caller's input can stay on its stack.
func (n *NodeInput) forEvaluation() *NodeInput {
	if n.shared == nil {
		c := *n
		n.shared = &c
	}
	return n.shared
}

// Pod converts a pod and its namespace. The namespace may be nil when it is
// unknown; expressions reading it then fail with an error.
func (c *Converter) Pod(pod *corev1.Pod, ns *corev1.Namespace) (*PodInput, error) {
	in := &PodInput{
		Pod:           pod,
		Namespace:     ns,
		podEnv:        c.env,
		schedulerName: pod.Spec.SchedulerName,
		podKeys:       &c.podKeys,
	}
	if ns != nil {
		var err error
		in.namespace, err = c.cached(c.namespaces, ns.Name, ns.UID, ns.ResourceVersion, ns, c.env.namespaceValues)
		if err != nil {
			return nil, fmt.Errorf("converting namespace %s: %w", ns.Name, err)
		}
	}
	return in, nil
}

// podValue is a pod's CEL value for some of its fields (projection.go).
type podValue struct {
	fields podFields
	val    ref.Val
}

// podValue returns a CEL value of the pod that holds the fields need (the
// fields the evaluating policy reads): the cycle's evaluations share it,
// and when it lacks some of need, it is converted again with the fields it
// held and need's. A pod that cannot be converted is an error value, which
// fails the expressions that read it.
func (in *PodInput) podValue(need podFields) ref.Val {
	if v := in.pod.Load(); v != nil && v.fields.covers(need) {
		return v.val
	}
	in.podMu.Lock()
	defer in.podMu.Unlock()
	fields := need
	if v := in.pod.Load(); v != nil {
		if v.fields.covers(need) {
			return v.val
		}
		fields = fields.union(v.fields)
	}
	val, err := in.podEnv.podVal(in.Pod, fields)
	if err != nil {
		val = types.NewErr("converting pod %s/%s: %v", in.Pod.Namespace, in.Pod.Name, err)
	}
	in.pod.Store(&podValue{fields: fields, val: val})
	return val
}

// Node returns the input of a node for one cycle. info, when not nil, builds
// the scheduler's view of the node; it is called at most once, and only when
// a policy reads nodeInfo.
func (c *Converter) Node(node *corev1.Node, info func() *NodeInfo) (*NodeInput, error) {
	entry, err := c.node(node)
	if err != nil {
		return nil, err
	}
	return &NodeInput{Node: node, node: entry.Value.val, memo: memoTableOf(entry), info: info}, nil
}

// NodeInput is Node for the per-(pod, node) path, by value: source is the
// scheduler's view of the node, given to info on first use, and generation
// identifies its contents (fwk.NodeInfo.GetGeneration: it changes whenever
// a pod is added to or removed from the node, or the node changes; 0 when
// unknown).
func (c *Converter) NodeInput(node *corev1.Node, generation int64, source any, info NodeInfoSource) (NodeInput, error) {
	entry, err := c.node(node)
	if err != nil {
		return NodeInput{}, err
	}
	in := NodeInput{Node: node, node: entry.Value.val, memo: memoTableOf(entry), generation: generation, infoFrom: info, infoSource: source}
	if in.memo != nil && generation != 0 {
		in.infoCache = &entry.Value.info
	}
	return in, nil
}

// infoValue is nodeInfo's value for one generation of the scheduler's view.
type infoValue struct {
	generation int64
	val        ref.Val
}

// NodeValue returns the CEL value of a node, converting it only when this
// version of the node is not cached.
func (c *Converter) NodeValue(node *corev1.Node) (ref.Val, error) {
	entry, err := c.node(node)
	if err != nil {
		return nil, err
	}
	return entry.Value.val, nil
}

// nodeEntry is a node version's entry in the Converter's node cache.
type nodeEntry = nodecache.Entry[nodeValue]

// nodeValue is what is kept per node version: its CEL value and the
// results of the memoized expressions evaluated on it.
type nodeValue struct {
	val ref.Val
	// memo is kept in the entry, so that reading it costs no other cache
	// line than the entry's, already read to check the version.
	memo memoTable
	// info is nodeInfo's value for the last generation converted. Key:
	// the NodeInfo generation (checked on read). Bound: one. Invalidated
	// by a new generation or node version. Written by the first
	// evaluation that reads nodeInfo.
	info atomic.Pointer[infoValue]
}

// memoTable returns the entry's memo, or nil for a node that is not cached
// (it has no resourceVersion).
func memoTableOf(e *nodeEntry) *memoTable {
	if e.ResourceVersion == "" {
		return nil
	}
	return &e.Value.memo
}

func (c *Converter) node(node *corev1.Node) (*nodeEntry, error) {
	// The object an entry was made from finds it without reading the
	// object (a cache miss per node in a scheduling cycle): only objects
	// with a resourceVersion get entries.
	if e := c.nodes.LoadObject(node); e != nil {
		return e, nil
	}
	// An object without a resourceVersion (not from an apiserver) is never
	// taken from the cache: it could be anything.
	if node.ResourceVersion != "" {
		if e := c.nodes.Load(node); e != nil {
			return e, nil
		}
	}
	val, err := c.env.toVal(node, c.env.nodeValues)
	if err != nil {
		return nil, fmt.Errorf("converting node %s: %w", node.Name, err)
	}
	e := &nodeEntry{Node: node, UID: node.UID, ResourceVersion: node.ResourceVersion, Value: nodeValue{val: val}}
	e.Value.memo.small = c.smallMemo
	if node.ResourceVersion != "" {
		c.nodes.Store(node.Name, e)
	}
	return e, nil
}

// ForgetNode drops a node's cached value, e.g. when the node is deleted.
func (c *Converter) ForgetNode(name string) { c.nodes.Store(name, nil) }

// ForgetNamespace drops a namespace's cached value.
func (c *Converter) ForgetNamespace(name string) { c.namespaces.Remove(name) }

func (c *Converter) cached(cache *lru.Cache, name string, uid ktypes.UID, rv string, obj runtime.Object, s *valueConverter) (ref.Val, error) {
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

// toVal converts a typed object to a CEL value of its OpenAPI schema. Every
// map and list is built once, so that reading a field during evaluation is a
// map lookup that allocates nothing.
func (e *Environment) toVal(obj runtime.Object, conv *valueConverter) (ref.Val, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return conv.convert(u), nil
}

// valueConverter converts unstructured data of one OpenAPI schema to CEL
// values, eagerly. It is built once per schema: walking apiserver's lazy
// wrappers (UnstructuredToVal) instead costs a map of all properties per
// field read, twenty times more on a node. Scalars are still converted by
// UnstructuredToVal, so formats (date-time, duration, byte, int-or-string)
// read exactly as in every Kubernetes CEL expression.
type valueConverter struct {
	schema *spec.Schema
	kind   valueKind
	props  map[string]*valueConverter // object properties
	elem   *valueConverter            // map values and list items
	// escaped is the property's name escaped for CEL when it is a keyword
	// (namespace: __namespace__), else empty.
	escaped string
}

type valueKind int

const (
	// scalarValue: converted by UnstructuredToVal (formats, int-or-string).
	scalarValue valueKind = iota
	// plain scalars of their JSON type, converted directly.
	stringValue
	intValue
	boolValue
	objectValue
	mapValue
	listValue
	// lazyValue: what this converter does not model (embedded resources,
	// objects without a schema), left to UnstructuredToVal.
	lazyValue
)

func newValueConverter(s *spec.Schema) *valueConverter {
	c := &valueConverter{schema: s}
	switch {
	case isIntOrString(s):
		c.kind = scalarValue
	case s.Type.Contains("object") && len(s.Properties) > 0 && !isEmbeddedResource(s):
		c.kind = objectValue
		c.props = make(map[string]*valueConverter, len(s.Properties))
		for name := range s.Properties {
			prop := s.Properties[name]
			pc := newValueConverter(&prop)
			if escaped, ok := apiservercel.Escape(name); ok && escaped != name {
				pc.escaped = escaped
			}
			c.props[name] = pc
		}
	case s.Type.Contains("object") && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		c.kind = mapValue
		c.elem = newValueConverter(s.AdditionalProperties.Schema)
	case s.Type.Contains("array") && s.Items != nil && s.Items.Schema != nil:
		c.kind = listValue
		c.elem = newValueConverter(s.Items.Schema)
	case s.Type.Contains("object") || s.Type.Contains("array"):
		c.kind = lazyValue
	case s.Type.Contains("string") && s.Format == "":
		c.kind = stringValue
	case s.Type.Contains("integer"):
		c.kind = intValue
	case s.Type.Contains("boolean"):
		c.kind = boolValue
	default:
		c.kind = scalarValue
	}
	return c
}

func (c *valueConverter) convert(v any) ref.Val {
	switch c.kind {
	case objectValue:
		m, ok := v.(map[string]any)
		if !ok {
			return openapi.UnstructuredToVal(v, c.schema)
		}
		out := make(map[ref.Val]ref.Val, len(m))
		for k, fv := range m {
			prop, ok := c.props[k]
			// Null fields read as absent, as in UnstructuredToVal.
			if !ok || fv == nil {
				continue
			}
			val := prop.convert(fv)
			out[types.String(k)] = val
			// Field names that are CEL keywords (namespace) are also
			// reachable escaped (__namespace__), as in apiserver's values.
			if prop.escaped != "" {
				out[types.String(prop.escaped)] = val
			}
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, out)
	case mapValue:
		m, ok := v.(map[string]any)
		if !ok {
			return openapi.UnstructuredToVal(v, c.schema)
		}
		out := make(map[ref.Val]ref.Val, len(m))
		for k, fv := range m {
			out[types.String(k)] = c.elem.convert(fv)
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, out)
	case listValue:
		l, ok := v.([]any)
		if !ok {
			return openapi.UnstructuredToVal(v, c.schema)
		}
		out := make([]ref.Val, len(l))
		for i, ev := range l {
			out[i] = c.elem.convert(ev)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, out)
	case stringValue:
		if str, ok := v.(string); ok {
			return types.String(str)
		}
	case intValue:
		if n, ok := v.(int64); ok {
			return types.Int(n)
		}
	case boolValue:
		if b, ok := v.(bool); ok {
			return types.Bool(b)
		}
	}
	// Formats, int-or-string, and values not of the schema's type (which
	// UnstructuredToVal turns into a descriptive error value).
	return openapi.UnstructuredToVal(v, c.schema)
}

func isIntOrString(s *spec.Schema) bool {
	v, _ := s.Extensions.GetBool("x-kubernetes-int-or-string")
	return v
}

func isEmbeddedResource(s *spec.Schema) bool {
	v, _ := s.Extensions.GetBool("x-kubernetes-embedded-resource")
	return v
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

// value builds the CEL value of nodeInfo, as maps of converted values so
// that reading a field allocates nothing. Its pods are converted on first
// read (lazyList): most rules that read nodeInfo read its resources, and
// the pods cost two maps each, for every version of the node a pod's
// binding makes.
func (n *NodeInfo) value() ref.Val {
	refs := n.Pods
	pods := &lazyList{size: len(refs), build: func() ref.Val {
		pods := make([]ref.Val, len(refs))
		for i, p := range refs {
			podLabels := make(map[ref.Val]ref.Val, len(p.Labels))
			for k, v := range p.Labels {
				podLabels[types.String(k)] = types.String(v)
			}
			pods[i] = types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{
				types.String("namespace"): types.String(p.Namespace),
				types.String("name"):      types.String(p.Name),
				types.String("labels"):    types.NewRefValMap(types.DefaultTypeAdapter, podLabels),
			})
		}
		return types.NewRefValList(types.DefaultTypeAdapter, pods)
	}}
	return types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{
		types.String("allocatable"): resourceMap(n.Allocatable),
		types.String("requested"):   resourceMap(n.Requested),
		types.String("podCount"):    types.Int(len(n.Pods)),
		types.String("pods"):        pods,
	})
}

// lazyList is a CEL list built on first use, once, by build (which must
// return a traits.Lister); its size is known before. Safe for concurrent
// use: a nodeInfo value is shared by the Filter calls running in
// parallel.
type lazyList struct {
	size  int
	once  sync.Once
	build func() ref.Val
	list  traits.Lister
}

func (l *lazyList) get() traits.Lister {
	l.once.Do(func() {
		l.list = l.build().(traits.Lister)
		l.build = nil
	})
	return l.list
}

func (l *lazyList) ConvertToNative(t reflect.Type) (any, error) { return l.get().ConvertToNative(t) }
func (l *lazyList) ConvertToType(t ref.Type) ref.Val            { return l.get().ConvertToType(t) }
func (l *lazyList) Equal(other ref.Val) ref.Val                 { return l.get().Equal(other) }
func (l *lazyList) Type() ref.Type                              { return types.ListType }
func (l *lazyList) Value() any                                  { return l.get().Value() }
func (l *lazyList) Add(other ref.Val) ref.Val                   { return l.get().Add(other) }
func (l *lazyList) Contains(v ref.Val) ref.Val                  { return l.get().Contains(v) }
func (l *lazyList) Get(index ref.Val) ref.Val                   { return l.get().Get(index) }
func (l *lazyList) Iterator() traits.Iterator                   { return l.get().Iterator() }
func (l *lazyList) Size() ref.Val                               { return types.Int(l.size) }

func resourceMap(m map[string]int64) ref.Val {
	out := make(map[ref.Val]ref.Val, len(m))
	for k, v := range m {
		out[types.String(k)] = types.Int(v)
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, out)
}

// nodeInfoValue returns nodeInfo's value, building it on first use.
func (n *NodeInput) nodeInfoValue() ref.Val {
	if n.nodeInfo == nil && n.infoCache != nil {
		if v := n.infoCache.Load(); v != nil && v.generation == n.generation {
			n.nodeInfo = v.val
		}
	}
	if n.nodeInfo == nil {
		var info *NodeInfo
		switch {
		case n.info != nil:
			info = n.info()
		case n.infoFrom != nil:
			info = n.infoFrom(n.infoSource)
		}
		if info == nil {
			return types.NewErr("nodeInfo is not available for node %s", n.Node.Name)
		}
		n.nodeInfo = info.value()
		if n.infoCache != nil {
			n.infoCache.Store(&infoValue{generation: n.generation, val: n.nodeInfo})
		}
	}
	return n.nodeInfo
}
