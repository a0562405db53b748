package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/openapi"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/config/crd"
)

// ParamsVar is the CEL variable holding a parameterized policy's params
// object; null in a policy without paramKind.
const ParamsVar = "params"

// ParamTypes gives the compiler the CEL type of a param kind that is not
// built into Kubernetes (a custom resource's, from its CRD's
// openAPIV3Schema: see NewCRDParamTypes), so that a misspelt params field
// is a compile error. Kinds it does not know are typed from the Kubernetes
// OpenAPI definitions when they are built in (ConfigMap, ...), else dyn.
type ParamTypes interface {
	ParamType(gvk schema.GroupVersionKind) (*apiservercel.DeclType, bool)
}

// ParamSpec is a compiled policy's paramKind and paramRef, checked.
type ParamSpec struct {
	Kind schema.GroupVersionKind
	// Name is the params object's name, or empty with Selector.
	Name     string
	Selector labels.Selector
	// Namespace is paramRef.namespace: empty means the pod's namespace for
	// a namespaced kind.
	Namespace string
	// NotFound is parameterNotFoundAction (Deny when not set).
	NotFound schedv1alpha1.ParameterNotFoundActionType
}

// String names what the policy looks for, e.g. "ConfigMap placement in the
// pod's namespace".
func (s *ParamSpec) String() string {
	what := s.Kind.Kind + " " + s.Name
	if s.Selector != nil {
		what = s.Kind.Kind + " objects selected by " + s.Selector.String()
	}
	if s.Namespace != "" {
		return what + " in namespace " + s.Namespace
	}
	return what
}

// newParamSpec checks a policy's paramKind and paramRef, for files that
// skipped the CRD's validation.
func newParamSpec(spec *schedv1alpha1.SchedulingPolicySpec) (*ParamSpec, field.ErrorList) {
	kindPath, refPath := field.NewPath("spec", "paramKind"), field.NewPath("spec", "paramRef")
	switch {
	case spec.ParamKind == nil && spec.ParamRef == nil:
		return nil, nil
	case spec.ParamKind == nil:
		return nil, field.ErrorList{field.Required(kindPath, "paramRef requires paramKind")}
	case spec.ParamRef == nil:
		return nil, field.ErrorList{field.Required(refPath, "paramKind requires paramRef")}
	}
	var errs field.ErrorList
	gv, err := schema.ParseGroupVersion(spec.ParamKind.APIVersion)
	if err != nil || gv.Version == "" {
		errs = append(errs, field.Invalid(kindPath.Child("apiVersion"), spec.ParamKind.APIVersion, "must be VERSION or GROUP/VERSION"))
	}
	if spec.ParamKind.Kind == "" {
		errs = append(errs, field.Required(kindPath.Child("kind"), ""))
	}
	r := spec.ParamRef
	out := &ParamSpec{Kind: gv.WithKind(spec.ParamKind.Kind), Name: r.Name, Namespace: r.Namespace, NotFound: r.ParameterNotFoundAction}
	if out.NotFound == "" {
		out.NotFound = schedv1alpha1.DenyAction
	}
	if (r.Name == "") == (r.Selector == nil) {
		errs = append(errs, field.Invalid(refPath, "", "exactly one of name or selector must be set"))
	}
	if r.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(r.Selector)
		if err != nil {
			errs = append(errs, field.Invalid(refPath.Child("selector"), r.Selector, err.Error()))
		}
		out.Selector = sel
	}
	return out, errs
}

// Params is one params object converted to a CEL value: built once per
// object version (UID and resourceVersion) and shared by every pod and
// policy that reads it.
type Params struct {
	Kind            schema.GroupVersionKind
	Namespace, Name string
	UID             ktypes.UID
	ResourceVersion string

	val ref.Val
	// id is the converted object's (one version's) memo key: the results
	// of rules that read params and the node are kept per id (memo.go).
	id uint64
	// memo holds the results of the expressions that read only params
	// (*memoResult, with their cost). Key: *expr. Bound: the expressions
	// of the policies bound to this object version. Invalidated with the
	// object version (a new Params). Written by the first evaluation (see
	// evaluation.evalParamsOnly).
	memo sync.Map
}

// String is the object as reports name it: Kind namespace/name.
func (p *Params) String() string {
	if p.Namespace == "" {
		return p.Kind.Kind + " " + p.Name
	}
	return p.Kind.Kind + " " + p.Namespace + "/" + p.Name
}

// Key identifies this version of the object: what a cache of results of
// expressions that read params must key on (with the policy version).
func (p *Params) Key() string {
	return string(p.UID) + "/" + p.ResourceVersion
}

// ParamsResolver finds the params objects of a parameterized policy for a
// pod. The scheduler's reads its informers; the dry-run's, files.
type ParamsResolver interface {
	// Resolve returns the params objects the policy reads for the pod, in
	// a stable order; none when none is found. An error (the kind is not
	// served, its objects are not readable) follows the policy's
	// failurePolicy.
	Resolve(spec *ParamSpec, pod *corev1.Pod) ([]*Params, error)
	// Namespace is where Resolve looks for the pod: paramRef.namespace,
	// or the pod's for a namespaced kind; empty for a cluster-scoped one.
	Namespace(spec *ParamSpec, pod *corev1.Pod) string
	// Bound returns policy.WithParams(params), or the copy made before
	// for the same policy and params versions.
	Bound(policy *CompiledPolicy, params *Params) *CompiledPolicy
}

// ParamsError is the error of a parameterized policy whose params cannot
// be read (its paramKind is not served, or no resolver is given).
type ParamsError struct {
	Policy string
	Spec   *ParamSpec
	Err    error
}

func (e *ParamsError) Error() string {
	return fmt.Sprintf("SchedulingPolicy %s: reading its params (%s): %v", e.Policy, e.Spec, e.Err)
}

func (e *ParamsError) Unwrap() error { return e.Err }

// ErrParamsNotReady is wrapped by the error of a resolver that cannot
// tell yet which params objects exist (its informer has not listed them):
// the policy then rejects or holds the pod whatever its failurePolicy,
// since skipping it under Ignore would place the pod without a policy that
// exists; the resolver requeues the pod when the objects are listed.
var ErrParamsNotReady = errors.New("params not listed yet")

// ErrParamsNotReadable is wrapped by the error of a resolver whose param
// kind is served but whose objects cannot be listed (the scheduler may not
// read them: RBAC).
var ErrParamsNotReadable = errors.New("params not readable")

// ParamsRule is the Decision.Rule of a parameterized policy that rejects or
// holds a pod because no params object was found (parameterNotFoundAction
// Deny).
const ParamsRule = "paramRef"

// Params returns the params object a bound policy reads, nil for a policy
// without paramKind or not bound (see WithParams and MatchAll).
func (p *CompiledPolicy) Params() *Params { return p.params }

// ParamSpec returns the policy's paramKind and paramRef, nil when it has
// none.
func (p *Program) ParamSpec() *ParamSpec { return p.paramSpec }

// Base returns the policy a bound copy was made from (itself when not
// bound).
func (p *CompiledPolicy) Base() *CompiledPolicy {
	if p.base != nil {
		return p.base
	}
	if p.origin != nil {
		return p.origin
	}
	return p
}

// WithParams returns a copy of the policy that evaluates with params. The
// copy shares the compiled expressions (so node-only results cached per
// expression stay shared); build it once per params version and reuse it
// (the scheduler's params store does).
func (p *CompiledPolicy) WithParams(params *Params) *CompiledPolicy {
	c := *p
	c.params = params
	c.base = p.Base()
	return &c
}

// binding is a parameterized policy as it applies to one pod: bound to one
// params object, or with the reason it could not be.
type binding struct {
	policy *CompiledPolicy
	// missing: no params object was found and the action is Deny.
	missing bool
	// err: the params could not be read.
	err error
}

// bindings returns how the policy applies to the pod: itself when it has
// no paramKind; one bound copy per params object found; a missing binding
// when none is found under Deny; nothing under Allow.
func (p *CompiledPolicy) bindings(in *PodInput) []binding {
	if p.paramSpec == nil || p.params != nil || p.Err() != nil {
		return []binding{{policy: p}}
	}
	if in.Params == nil {
		return []binding{{policy: p, err: &ParamsError{Policy: p.Name, Spec: p.paramSpec, Err: errNoResolver}}}
	}
	found, err := in.Params.Resolve(p.paramSpec, in.Pod)
	if err != nil {
		return []binding{{policy: p, err: &ParamsError{Policy: p.Name, Spec: p.paramSpec, Err: err}}}
	}
	if len(found) == 0 {
		if p.paramSpec.NotFound == schedv1alpha1.AllowAction {
			return nil
		}
		return []binding{{policy: p, missing: true}}
	}
	out := make([]binding, len(found))
	for i, params := range found {
		out[i] = binding{policy: in.Params.Bound(p, params)}
	}
	return out
}

// errNoResolver is the error of a parameterized policy evaluated without a
// ParamsResolver.
var errNoResolver = errors.New("no params resolver")

// missingMessage is the message of a pod held or rejected because no
// params object was found, naming where the resolver looked.
func (p *CompiledPolicy) missingMessage(in *PodInput) string {
	s := *p.paramSpec
	s.Namespace = in.Params.Namespace(&s, in.Pod)
	return fmt.Sprintf("no params %s found (parameterNotFoundAction Deny)", s.String())
}

// paramsValue is the value of params in the policy's evaluations.
func (p *CompiledPolicy) paramsValue() ref.Val {
	if p.params == nil {
		return types.NullValue
	}
	return p.params.val
}

// ParamsValue converts a params object once: typed from its kind's schema
// when the kind is built into Kubernetes (as the compiler types it), as
// plain maps and lists otherwise.
func (e *Environment) ParamsValue(obj *unstructured.Unstructured) (*Params, error) {
	gvk := obj.GroupVersionKind()
	out := &Params{Kind: gvk, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		id: e.memo.params.Add(1)}
	if conv := e.builtinParams(gvk); conv != nil {
		out.val = conv.convert(obj.Object)
		return out, nil
	}
	out.val = types.DefaultTypeAdapter.NativeToValue(obj.UnstructuredContent())
	if types.IsError(out.val) {
		return nil, fmt.Errorf("converting %s: %v", out, out.val)
	}
	return out, nil
}

// builtinParam is a built-in kind's CEL type and converter.
type builtinParam struct {
	decl *apiservercel.DeclType
	conv *valueConverter
}

// builtinParams returns the converter of a kind built into Kubernetes,
// nil for any other.
func (e *Environment) builtinParams(gvk schema.GroupVersionKind) *valueConverter {
	if b := e.builtinParam(gvk); b != nil {
		return b.conv
	}
	return nil
}

func (e *Environment) builtinParam(gvk schema.GroupVersionKind) *builtinParam {
	if v, ok := e.paramKinds.Load(gvk); ok {
		b, _ := v.(*builtinParam)
		return b
	}
	var b *builtinParam
	if s, err := e.schemas.ResolveSchema(gvk); err == nil {
		if decl := openapi.SchemaDeclType(s, true); decl != nil {
			b = &builtinParam{decl: decl.MaybeAssignTypeName("celsched.params"), conv: newValueConverter(s)}
		}
	}
	v, _ := e.paramKinds.LoadOrStore(gvk, b)
	b, _ = v.(*builtinParam)
	return b
}

// paramsDeclType is the type of params in a policy: from types, then the
// built-in kinds, else dyn (with a warning).
func (e *Environment) paramsDeclType(spec *ParamSpec, paramTypes ParamTypes) (*apiservercel.DeclType, string) {
	if spec == nil {
		return apiservercel.DynType, ""
	}
	if paramTypes != nil {
		if d, ok := paramTypes.ParamType(spec.Kind); ok && d != nil {
			return d.MaybeAssignTypeName("celsched.params"), ""
		}
	}
	if d, ok := e.shippedParams.ParamType(spec.Kind); ok && d != nil {
		return d.MaybeAssignTypeName("celsched.params"), ""
	}
	if b := e.builtinParam(spec.Kind); b != nil {
		return b.decl, ""
	}
	return apiservercel.DynType, fmt.Sprintf("params is dyn: the schema of %s is not known to the compiler, so its fields are not checked here (the webhook checks them against the kind's CRD, as does celsched validate --param-crd FILE)", spec.Kind)
}

// shippedParamTypes types the param kinds that celsched ships
// (TenantPlacement) from their CRDs, built into the binary (config/crd),
// so that the scheduler, the webhook and the CLI type them alike without
// reading a CRD.
func shippedParamTypes() (CRDParamTypes, error) {
	types := CRDParamTypes{}
	crds, err := crd.ParamKinds()
	if err != nil {
		return nil, err
	}
	for _, c := range crds {
		if err := types.Add(c); err != nil {
			return nil, err
		}
	}
	return types, nil
}

// paramKindCache is Environment.paramKinds: the built-in param kinds
// resolved so far, *builtinParam or nil per GroupVersionKind.
type paramKindCache = sync.Map

// LookupNamespace is the namespace where the params objects of a pod are:
// paramRef.namespace, else the pod's for a namespaced kind; empty for a
// cluster-scoped kind.
func (s *ParamSpec) LookupNamespace(pod *corev1.Pod, namespaced bool) string {
	switch {
	case !namespaced:
		return ""
	case s.Namespace != "":
		return s.Namespace
	default:
		return pod.Namespace
	}
}

// Selects says whether an object of the kind, in the lookup namespace, is
// one of the policy's params objects: by name, or by the selector.
func (s *ParamSpec) Selects(name string, objLabels map[string]string) bool {
	if s.Selector != nil {
		return s.Selector.Matches(labels.Set(objLabels))
	}
	return name == s.Name
}

// StaticParams is a ParamsResolver over a fixed set of params objects, as
// the dry-run reads them from files. A kind is namespaced unless
// ClusterScoped says otherwise.
type StaticParams struct {
	Objects       []*Params
	ClusterScoped map[schema.GroupKind]bool
	// labels of each object, by Params pointer.
	labels map[*Params]map[string]string
	// byNamespace indexes Objects by kind and namespace.
	byNamespace map[staticKey][]*Params
}

type staticKey struct {
	kind      schema.GroupKind
	namespace string
}

// NewStaticParams converts params objects once, for a dry run.
func NewStaticParams(env *Environment, objs []*unstructured.Unstructured) (*StaticParams, error) {
	s := &StaticParams{ClusterScoped: map[schema.GroupKind]bool{}, labels: map[*Params]map[string]string{}, byNamespace: map[staticKey][]*Params{}}
	namespaced := map[schema.GroupKind]bool{}
	for _, o := range objs {
		p, err := env.ParamsValue(o)
		if err != nil {
			return nil, err
		}
		s.Objects = append(s.Objects, p)
		s.labels[p] = o.GetLabels()
		key := staticKey{kind: p.Kind.GroupKind(), namespace: p.Namespace}
		s.byNamespace[key] = append(s.byNamespace[key], p)
		if o.GetNamespace() != "" {
			namespaced[o.GroupVersionKind().GroupKind()] = true
		}
	}
	// A kind whose objects all have no namespace is cluster-scoped.
	for _, p := range s.Objects {
		if gk := p.Kind.GroupKind(); !namespaced[gk] {
			s.ClusterScoped[gk] = true
		}
	}
	return s, nil
}

// Namespace implements ParamsResolver.
func (s *StaticParams) Namespace(spec *ParamSpec, pod *corev1.Pod) string {
	return spec.LookupNamespace(pod, !s.ClusterScoped[spec.Kind.GroupKind()])
}

// Resolve implements ParamsResolver.
func (s *StaticParams) Resolve(spec *ParamSpec, pod *corev1.Pod) ([]*Params, error) {
	gk := spec.Kind.GroupKind()
	ns := s.Namespace(spec, pod)
	var out []*Params
	for _, p := range s.byNamespace[staticKey{kind: gk, namespace: ns}] {
		if spec.Selects(p.Name, s.labels[p]) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *Params) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Bound implements ParamsResolver.
func (s *StaticParams) Bound(policy *CompiledPolicy, params *Params) *CompiledPolicy {
	return policy.WithParams(params)
}
