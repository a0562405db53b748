package source

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/dryrun"
)

// paramKind is a kind that a policy's paramKind names, with the first
// policy (by name) that names it, for messages.
type paramKind struct {
	gvk    schema.GroupVersionKind
	policy string
}

// paramKinds are the kinds that the policies' paramKind name, by group
// and kind; a paramKind whose apiVersion does not parse is left out (the
// policy's compile error says so).
func paramKinds(policies ...[]*schedv1alpha1.SchedulingPolicy) map[schema.GroupKind]paramKind {
	out := map[schema.GroupKind]paramKind{}
	for _, list := range policies {
		for _, p := range list {
			if p.Spec.ParamKind == nil {
				continue
			}
			gv, err := schema.ParseGroupVersion(p.Spec.ParamKind.APIVersion)
			if err != nil {
				continue
			}
			gvk := gv.WithKind(p.Spec.ParamKind.Kind)
			if k, ok := out[gvk.GroupKind()]; !ok || p.Name < k.policy {
				out[gvk.GroupKind()] = paramKind{gvk: gvk, policy: p.Name}
			}
		}
	}
	return out
}

// sortedKinds are the kinds in a stable order.
func sortedKinds(kinds map[schema.GroupKind]paramKind) []paramKind {
	out := make([]paramKind, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvk.GroupKind().String() < out[j].gvk.GroupKind().String() })
	return out
}

// isCRD says whether an object is a CustomResourceDefinition.
func isCRD(obj *unstructured.Unstructured) bool {
	return obj.GroupVersionKind().GroupKind() == schema.GroupKind{Group: apiextensionsv1.GroupName, Kind: "CustomResourceDefinition"}
}

// paramObjectsIn keeps, of objects read from files, the params objects of
// the kinds the policies name and the CustomResourceDefinitions; it
// returns, for a note, the kinds of the other objects it leaves out.
func paramObjectsIn(objs []*unstructured.Unstructured, kinds map[schema.GroupKind]paramKind) (params, crds []*unstructured.Unstructured, other []string) {
	for _, o := range objs {
		switch gk := o.GroupVersionKind().GroupKind(); {
		case isCRD(o):
			crds = append(crds, o)
		case kinds[gk].policy != "":
			params = append(params, o)
		default:
			if !slices.Contains(other, gk.String()) {
				other = append(other, gk.String())
			}
		}
	}
	return params, crds, other
}

// checkParamCRDs fails, for files, when a kind that a policy's paramKind
// names is neither built into Kubernetes, nor celsched's own
// (TenantPlacement), nor defined by one of the CustomResourceDefinitions:
// its objects cannot be read without knowing the kind.
func checkParamCRDs(kinds map[schema.GroupKind]paramKind, crds []*unstructured.Unstructured) error {
	defined := map[schema.GroupKind]bool{}
	for _, o := range crds {
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		defined[schema.GroupKind{Group: group, Kind: kind}] = true
	}
	for _, k := range sortedKinds(kinds) {
		if scheme.Recognizes(k.gvk) || defined[k.gvk.GroupKind()] {
			continue
		}
		return fmt.Errorf("paramKind %s %s of SchedulingPolicy %s: its CustomResourceDefinition is in none of the files read; add it (kubectl get crd -o yaml) with the objects of the kind",
			k.gvk.GroupVersion(), k.gvk.Kind, k.policy)
	}
	return nil
}

// asUnstructured converts a typed object read from a file (a ConfigMap, a
// TenantPlacement) to the form params objects take.
func asUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: content}
	if gvks, _, err := scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		u.SetGroupVersionKind(gvks[0])
	}
	return u, nil
}

// listParams reads, in pages, the params objects of the kinds: for a
// namespaced kind, those of the namespace that namespaceOf gives for the
// policy naming it (all namespaces when empty), and all of a
// cluster-scoped kind. A kind the cluster does not serve contributes
// nothing and a note (the policies then find no params, as in the
// scheduler); a kind the user may not list is an error naming the kind,
// the resource and the verb.
func listParams(ctx context.Context, c client.Client, policies []*schedv1alpha1.SchedulingPolicy, namespaceOf func(*schedv1alpha1.ParamRef) string) ([]*unstructured.Unstructured, []string, error) {
	type source struct {
		gk        schema.GroupKind
		namespace string
	}
	seen := map[source]bool{}
	unserved := map[schema.GroupKind]bool{}
	objects := map[dryrun.ParamsKey]bool{}
	var out []*unstructured.Unstructured
	var notes []string
	for _, p := range policies {
		kind, ref := p.Spec.ParamKind, p.Spec.ParamRef
		if kind == nil || ref == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(kind.APIVersion)
		if err != nil {
			continue // the policy's compile error says so
		}
		gvk := gv.WithKind(kind.Kind)
		mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			if !unserved[gvk.GroupKind()] {
				unserved[gvk.GroupKind()] = true
				notes = append(notes, fmt.Sprintf("paramKind %s %s of SchedulingPolicy %s is not served by the cluster: no params objects of it", gv, kind.Kind, p.Name))
			}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("paramKind %s %s of SchedulingPolicy %s: %w", gv, kind.Kind, p.Name, err)
		}
		src := source{gk: gvk.GroupKind()}
		var opts []client.ListOption
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			src.namespace = namespaceOf(ref)
		}
		if seen[src] || seen[source{gk: src.gk}] {
			continue // listed, or all of its namespaces listed
		}
		seen[src] = true
		if src.namespace != "" {
			opts = append(opts, client.InNamespace(src.namespace))
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(kind.Kind + "List"))
		items, err := listAll[*unstructured.Unstructured](ctx, c, list, opts...)
		if err != nil {
			where := "in all namespaces"
			if src.namespace != "" {
				where = "in namespace " + src.namespace
			}
			if apierrors.IsForbidden(err) {
				return nil, nil, fmt.Errorf("reading the params of SchedulingPolicy %s: the %q verb on %s (%s) %s is forbidden to you: %w",
					p.Name, "list", mapping.Resource.GroupResource(), kind.Kind, where, err)
			}
			return nil, nil, fmt.Errorf("listing %s (paramKind of SchedulingPolicy %s) %s: %w", mapping.Resource.GroupResource(), p.Name, where, err)
		}
		for _, o := range items {
			if k := dryrun.ParamsKeyOf(o); !objects[k] { // a namespace's and all namespaces' lists overlap
				objects[k] = true
				out = append(out, o)
			}
		}
	}
	return out, notes, nil
}

// joinKinds lists kinds for a note.
func joinKinds(kinds []string) string {
	slices.Sort(kinds)
	return strings.Join(kinds, ", ")
}

// scheme knows the kinds the CLI reads typed: Kubernetes' own and
// celsched's (SchedulingPolicy, TenantPlacement). It is not written after
// it is built.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(schedv1alpha1.AddToScheme(s))
	return s
}()
