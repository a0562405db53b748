package dryrun

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// What a draft does to a live policy (PolicyChange.Change).
const (
	PolicyAdded     = "added"
	PolicyChanged   = "changed"
	PolicyDeleted   = "deleted"
	PolicyUnchanged = "unchanged"
)

// PolicyChange is what a draft does to one policy.
type PolicyChange struct {
	Name   string `json:"name"`
	Change string `json:"change"`
}

// ApplyDrafts returns the live policies with the drafts applied: a draft
// replaces the live policy of its name, or is added; the policies named in
// deletions are removed (each must be live). It also says what changed,
// per policy, in the order of the drafts and then of the deletions.
func ApplyDrafts(live, drafts []*schedv1alpha1.SchedulingPolicy, deletions []string) ([]*schedv1alpha1.SchedulingPolicy, []PolicyChange, error) {
	out := slices.Clone(live)
	var changes []PolicyChange
	for _, d := range drafts {
		i := slices.IndexFunc(out, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == d.Name })
		switch {
		case i < 0:
			out = append(out, d)
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyAdded})
		case equality.Semantic.DeepEqual(out[i].Spec, d.Spec):
			out[i] = d
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyUnchanged})
		default:
			out[i] = d
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyChanged})
		}
	}
	for _, name := range deletions {
		if slices.ContainsFunc(drafts, func(d *schedv1alpha1.SchedulingPolicy) bool { return d.Name == name }) {
			return nil, nil, fmt.Errorf("--delete %s: a draft of that name is given too", name)
		}
		i := slices.IndexFunc(out, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == name })
		if i < 0 {
			return nil, nil, fmt.Errorf("--delete %s: no live SchedulingPolicy of that name", name)
		}
		out = slices.Delete(out, i, i+1)
		changes = append(changes, PolicyChange{Name: name, Change: PolicyDeleted})
	}
	return out, changes, nil
}

// ParamsKey names a params object: its kind's group and name (any
// version), its namespace (empty for a cluster-scoped kind) and its name.
type ParamsKey struct {
	Group, Kind, Namespace, Name string
}

// ParamsKeyOf is the key of an object.
func ParamsKeyOf(obj *unstructured.Unstructured) ParamsKey {
	gvk := obj.GroupVersionKind()
	return ParamsKey{Group: gvk.Group, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// GroupKind is the key's kind.
func (k ParamsKey) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: k.Group, Kind: k.Kind}
}

// String is the key as reports and --delete-params write it:
// KIND[.GROUP]/NAMESPACE/NAME, or KIND[.GROUP]/NAME for a cluster-scoped
// kind.
func (k ParamsKey) String() string {
	kind := k.GroupKind().String()
	if k.Namespace == "" {
		return kind + "/" + k.Name
	}
	return kind + "/" + k.Namespace + "/" + k.Name
}

// ParseParamsKey parses KIND[.GROUP]/NAMESPACE/NAME or KIND[.GROUP]/NAME.
func ParseParamsKey(s string) (ParamsKey, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return ParamsKey{}, fmt.Errorf("%q: want KIND/NAMESPACE/NAME, or KIND/NAME for a cluster-scoped kind (KIND may be KIND.GROUP)", s)
	}
	gk := schema.ParseGroupKind(parts[0])
	k := ParamsKey{Group: gk.Group, Kind: gk.Kind, Name: parts[len(parts)-1]}
	if len(parts) == 3 {
		k.Namespace = parts[1]
	}
	return k, nil
}

// Reads says whether a policy's paramRef may select the object of that key
// with one of those label sets (its labels before and after a change).
func Reads(spec *engine.ParamSpec, key ParamsKey, labelSets ...map[string]string) bool {
	if spec == nil || spec.Kind.GroupKind() != key.GroupKind() {
		return false
	}
	if spec.Namespace != "" && key.Namespace != "" && spec.Namespace != key.Namespace {
		return false
	}
	return slices.ContainsFunc(labelSets, func(l map[string]string) bool { return spec.Selects(key.Name, l) })
}

// ParamsChange is what a draft does to one params object.
type ParamsChange struct {
	Key    ParamsKey `json:"-"`
	Object string    `json:"object"`
	Change string    `json:"change"`
	// Policies are the live or drafted policies whose paramRef may select
	// the object.
	Policies []string `json:"policies"`
	// Labels are the object's labels before and after the change (a
	// paramRef selector reads them).
	Labels []map[string]string `json:"-"`
}

// ApplyParamsDrafts returns the live params objects with the drafts
// applied: a draft replaces the live object of its kind (any version),
// namespace and name, or is added; deletions remove live objects (each
// must exist). A replacement that changes neither the content nor the
// labels is unchanged. The changes are in the order of the drafts, then of
// the deletions.
func ApplyParamsDrafts(live, drafts []*unstructured.Unstructured, deletions []ParamsKey) ([]*unstructured.Unstructured, []ParamsChange, error) {
	out := slices.Clone(live)
	index := func(k ParamsKey) int {
		return slices.IndexFunc(out, func(o *unstructured.Unstructured) bool { return matchesKey(ParamsKeyOf(o), k) })
	}
	var changes []ParamsChange
	seen := map[ParamsKey]bool{}
	namespaced := map[schema.GroupKind]bool{}
	for _, o := range live {
		if o.GetNamespace() != "" {
			namespaced[o.GroupVersionKind().GroupKind()] = true
		}
	}
	for _, d := range drafts {
		k := ParamsKeyOf(d)
		if seen[k] {
			return nil, nil, fmt.Errorf("params object %s is drafted twice", k)
		}
		if k.Namespace == "" && namespaced[k.GroupKind()] {
			return nil, nil, fmt.Errorf("params object %s has no metadata.namespace, and the live objects of its kind are namespaced", k)
		}
		seen[k] = true
		c := ParamsChange{Key: k, Object: k.String(), Labels: []map[string]string{d.GetLabels()}}
		switch i := index(k); {
		case i < 0:
			out = append(out, d)
			c.Change = PolicyAdded
		case sameParams(out[i], d):
			out[i] = d
			c.Change = PolicyUnchanged
		default:
			c.Labels = append(c.Labels, out[i].GetLabels())
			out[i] = d
			c.Change = PolicyChanged
		}
		changes = append(changes, c)
	}
	for _, k := range deletions {
		if slices.ContainsFunc(drafts, func(d *unstructured.Unstructured) bool { return matchesKey(ParamsKeyOf(d), k) }) {
			return nil, nil, fmt.Errorf("--delete-params %s: a draft of that object is given too", k)
		}
		i := index(k)
		if i < 0 {
			return nil, nil, fmt.Errorf("--delete-params %s: no live params object of that kind, namespace and name", k)
		}
		key := ParamsKeyOf(out[i])
		changes = append(changes, ParamsChange{Key: key, Object: key.String(), Change: PolicyDeleted, Labels: []map[string]string{out[i].GetLabels()}})
		out = slices.Delete(out, i, i+1)
	}
	return out, changes, nil
}

// matchesKey says whether an object's key is k; k may leave the group out.
func matchesKey(obj, k ParamsKey) bool {
	if k.Group == "" {
		obj.Group = ""
	}
	return obj == k
}

// sameParams says whether two versions of a params object read the same:
// everything but apiVersion and metadata, and the labels.
func sameParams(a, b *unstructured.Unstructured) bool {
	content := func(o *unstructured.Unstructured) map[string]any {
		c := maps.Clone(o.Object)
		delete(c, "apiVersion")
		delete(c, "metadata")
		return c
	}
	return equality.Semantic.DeepEqual(content(a), content(b)) && maps.Equal(a.GetLabels(), b.GetLabels())
}
