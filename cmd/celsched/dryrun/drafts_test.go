package dryrun

import (
	"testing"

	"github.com/google/go-cmp/cmp"

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
