package dryrun

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

func TestApplyDrafts(t *testing.T) {
	live := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("a").Filter("f", "true").Obj(),
		builder.MakePolicy("b").Filter("f", "true").Obj(),
		builder.MakePolicy("c").Filter("f", "true").Obj(),
	}
	cases := map[string]struct {
		drafts      []*schedv1alpha1.SchedulingPolicy
		deletions   []string
		wantNames   []string
		wantChanges []PolicyChange
		wantErr     string
	}{
		"added, changed, unchanged and deleted": {
			drafts: []*schedv1alpha1.SchedulingPolicy{
				builder.MakePolicy("d").Filter("f", "true").Obj(),
				builder.MakePolicy("a").Filter("f", "false").Obj(),
				builder.MakePolicy("b").Filter("f", "true").Obj(),
			},
			deletions: []string{"c"},
			wantNames: []string{"a", "b", "d"},
			wantChanges: []PolicyChange{
				{Name: "d", Change: PolicyAdded}, {Name: "a", Change: PolicyChanged},
				{Name: "b", Change: PolicyUnchanged}, {Name: "c", Change: PolicyDeleted},
			},
		},
		"deleting what is not live": {deletions: []string{"x"}, wantErr: "--delete x: no live SchedulingPolicy of that name"},
		"deleting a draft": {
			drafts:    []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("a").Obj()},
			deletions: []string{"a"},
			wantErr:   "--delete a: a draft of that name is given too",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, changes, err := ApplyDrafts(live, tc.drafts, tc.deletions)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.Name)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantChanges, changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if len(live) != 3 || live[0].Spec.Filters[0].Expression != "true" {
				t.Error("the live policies were changed")
			}
		})
	}
}

func configMap(namespace, name, zone string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"zone": zone}}}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

// TestApplyParamsDrafts: a params draft replaces the live object of its
// kind, namespace and name (any version; metadata but labels does not
// count as a change), or is added; deletions remove live objects; bad
// drafts are errors naming the object.
func TestApplyParamsDrafts(t *testing.T) {
	live := []*unstructured.Unstructured{configMap("a", "place", "z1", nil), configMap("b", "place", "z2", nil)}
	relabelled := configMap("a", "place", "z1", map[string]string{"tier": "gold"})
	sameContent := configMap("b", "place", "z2", nil)
	sameContent.SetResourceVersion("42")
	cases := map[string]struct {
		drafts      []*unstructured.Unstructured
		deletions   []string
		wantChanges []string
		wantErr     string
	}{
		"changed, unchanged, added": {
			drafts:      []*unstructured.Unstructured{configMap("a", "place", "z9", nil), sameContent, configMap("c", "place", "z3", nil)},
			wantChanges: []string{"ConfigMap/a/place changed", "ConfigMap/b/place unchanged", "ConfigMap/c/place added"},
		},
		"labels are content (selectors read them)": {
			drafts:      []*unstructured.Unstructured{relabelled},
			wantChanges: []string{"ConfigMap/a/place changed"},
		},
		"deleted": {
			deletions:   []string{"ConfigMap/b/place"},
			wantChanges: []string{"ConfigMap/b/place deleted"},
		},
		"deleting what is not live": {deletions: []string{"ConfigMap/b/other"}, wantErr: "--delete-params ConfigMap/b/other: no live params object"},
		"drafted and deleted":       {drafts: []*unstructured.Unstructured{configMap("a", "place", "z9", nil)}, deletions: []string{"ConfigMap/a/place"}, wantErr: "a draft of that object is given too"},
		"drafted twice":             {drafts: []*unstructured.Unstructured{configMap("a", "x", "1", nil), configMap("a", "x", "2", nil)}, wantErr: "drafted twice"},
		"no namespace":              {drafts: []*unstructured.Unstructured{configMap("", "place", "z", nil)}, wantErr: "ConfigMap/place has no metadata.namespace"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var deletions []ParamsKey
			for _, d := range tc.deletions {
				k, err := ParseParamsKey(d)
				if err != nil {
					t.Fatal(err)
				}
				deletions = append(deletions, k)
			}
			out, changes, err := ApplyParamsDrafts(live, tc.drafts, deletions)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.Object+" "+c.Change)
			}
			if diff := cmp.Diff(tc.wantChanges, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if len(live) != 2 || live[0].Object["data"].(map[string]any)["zone"] != "z1" {
				t.Error("the live objects were modified")
			}
			if name == "deleted" && len(out) != 1 {
				t.Errorf("after a deletion, %d objects", len(out))
			}
		})
	}
	for _, bad := range []string{"ConfigMap", "ConfigMap//x", "a/b/c/d"} {
		if _, err := ParseParamsKey(bad); err == nil {
			t.Errorf("ParseParamsKey(%q): no error", bad)
		}
	}
	if k, err := ParseParamsKey("TenantPlacement.placement.example.com/team-a/placement"); err != nil ||
		k != (ParamsKey{Group: "placement.example.com", Kind: "TenantPlacement", Namespace: "team-a", Name: "placement"}) {
		t.Errorf("ParseParamsKey of a custom kind: %+v, %v", k, err)
	}
}
