package impact

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/builder"
)

const blockLabel = "topology.example.com/block"

// oneRack is the placement filter "a gang stays in one rack".
const oneRack = "placement.nodes.all(n, n.metadata.labels[?'topology.example.com/rack'].orValue('') == placement.nodes[0].metadata.labels[?'topology.example.com/rack'].orValue(''))"

// TestRunGroups: impact on a dump with pod groups (testdata/groups-cluster.yaml)
// places each group with kube-scheduler under the live policies and under
// the draft and lists the groups whose outcome changes: a gang the draft's
// placement filter moves out of the block it gets now (moved, with the
// refusal), a gang a drafted preEnqueue rule holds (held), a gang whose
// freezing policy the draft deletes (placed). A gang placed both ways in a
// domain picked among equals, and one refused both ways, are unchanged;
// a group no changed policy applies to is not evaluated.
func TestRunGroups(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true,
	})
	read, err := (&source.Source{Files: source.Files{Dump: []string{"testdata/groups-cluster.yaml"}}}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(read.PodGroups) != 6 {
		t.Fatalf("read %d PodGroups from the dump, want 6", len(read.PodGroups))
	}
	trainers := map[string]string{"app": "trainer"}
	read.Policies = []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("gangs").PodLabels(trainers).
			PlacementFilter("block-b1", "placement.nodes.all(n, n.metadata.labels[?'"+blockLabel+"'].orValue('') == 'b1')", "gangs go to block b1").Obj(),
		builder.MakePolicy("freeze").PodLabels(map[string]string{"frozen": "yes"}).PreEnqueue("thawed", "false", "frozen").Obj(),
	}
	read.Drafts = []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("gangs").PodLabels(trainers).PlacementFilter("one-rack", oneRack, "a gang stays in one rack").Obj(),
		builder.MakePolicy("hold-batch").PodLabels(map[string]string{"queue": "closed"}).PreEnqueue("open", "false", "the batch queue is closed").Obj(),
	}
	r, err := Run(context.Background(), Input{Input: *read, Deletions: []string{"freeze"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, g := range r.Groups {
		got[g.Group] = g.Change
		t.Logf("%s %s: now %s, draft %s", g.Group, g.Change, g.Now.Outcome(), g.Draft.Outcome())
	}
	want := map[string]Change{"ml/train": Moved, "ml/batch": Held, "ml/frozen": Placed}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("group changes (-want +got):\n%s\nnotes: %v", diff, r.Notes)
	}
	wantSummary := &GroupSummary{Pending: 6, NotAffected: 1, ByChange: map[Change]int{Moved: 1, Held: 1, Placed: 1, Unchanged: 2}}
	if diff := cmp.Diff(wantSummary, r.Summary.Groups); diff != "" {
		t.Errorf("group summary (-want +got):\n%s", diff)
	}
	for _, g := range r.Groups {
		switch g.Group {
		case "ml/train":
			if g.Now.Placement != "b1" || g.Draft.Placement != "b2" {
				t.Errorf("ml/train placed in %q now and %q with the draft, want b1 and b2", g.Now.Placement, g.Draft.Placement)
			}
			if len(g.Draft.Refused) == 0 || g.Draft.Refused[0].Placement != "b1" {
				t.Errorf("ml/train: the draft's refusals %v do not name block b1", g.Draft.Refused)
			}
			if diff := cmp.Diff([]string{"gangs"}, g.Policies); diff != "" {
				t.Errorf("ml/train policies (-want +got):\n%s", diff)
			}
		case "ml/batch":
			if g.Draft.State != verdict.GroupHeld || g.Draft.Reason != "held at PreEnqueue by CELPreEnqueue: held by SchedulingPolicy hold-batch, rule open: the batch queue is closed" {
				t.Errorf("ml/batch with the draft: %s (%q), want held by hold-batch", g.Draft.State, g.Draft.Reason)
			}
		}
	}
}

// TestRunGroupsGateOff: without GenericWorkload, groups are not placed
// as groups, and a note says why.
func TestRunGroupsGateOff(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, false)
	read, err := (&source.Source{Files: source.Files{Dump: []string{"testdata/groups-cluster.yaml"}}}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	read.Drafts = []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("hold-batch").PreEnqueue("open", "false", "closed").Obj()}
	r, err := Run(context.Background(), Input{Input: *read})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Groups) != 0 || r.Summary.Groups != nil {
		t.Errorf("groups %v, summary %+v: want none evaluated", r.Groups, r.Summary.Groups)
	}
	if r.Summary.Pending != 14 || r.Summary.ByChange[Held] != 14 {
		t.Errorf("summary %+v: want the 14 pods evaluated one by one, all held by the draft", r.Summary)
	}
	wantNote := "6 pod group(s) with pending members are not evaluated as groups, their pods one by one: the feature gate GenericWorkload is off (give the manager's --feature-gates)"
	if !slices.Contains(r.Notes, wantNote) {
		t.Errorf("notes %q, want %q", r.Notes, wantNote)
	}
}
