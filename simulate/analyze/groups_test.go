package analyze

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

// groupsInput is testdata/groups-cluster.yaml with policies that keep
// three of its five pod groups from the placement kube-scheduler gives
// them without: trainer gangs to rack b (too small for them), frozen pods
// held, GPU pods to nodes with an accelerator (none has one).
func groupsInput(t *testing.T) Input {
	t.Helper()
	read, err := (&source.Source{Files: source.Files{Dump: []string{"testdata/groups-cluster.yaml"}}}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(read.PodGroups) != 5 {
		t.Fatalf("read %d PodGroups from the dump, want 5", len(read.PodGroups))
	}
	read.Policies = []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("trainers-in-rack-b").PodLabels(map[string]string{"app": "trainer"}).
			PlacementFilter("rack-b", "placement.nodes.all(n, n.metadata.labels[?'topology.example.com/rack'].orValue('') == 'b')", "trainer gangs go to rack b").Obj(),
		builder.MakePolicy("freeze").PodLabels(map[string]string{"frozen": "yes"}).PreEnqueue("thawed", "false", "frozen").Obj(),
		builder.MakePolicy("gpu-only").PodLabels(map[string]string{"app": "gpu"}).Filter("accelerator", "node.metadata.labels[?'accelerator'].hasValue()").Obj(),
	}
	return Input{Input: *read}
}

// groupFinding is what TestRunGroups checks of a pod group's finding.
type groupFinding struct {
	Kind      Kind
	Policies  []string
	Rules     []string
	State     verdict.GroupState
	Placement string
	Refused   []string // placement: policy/rule
	Pods      int
}

// TestRunGroups: with GenericWorkload on, analyze places the pod groups
// with kube-scheduler with the policies and without: a gang the
// placement filter keeps out of the only rack that takes it, a gang a
// preEnqueue rule holds and a gang a filter refuses every node are
// group-unplaceable, each naming the policy and rule (and the placement
// refused); a gang no node fits even without policies is
// group-no-placement, naming none; the gang no policy applies to has no
// finding. The per-class findings stay. With the gate off, a note says
// the groups are not analyzed as groups, and there is no group finding.
func TestRunGroups(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true,
	})
	r, err := Run(context.Background(), groupsInput(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]groupFinding{}
	for _, f := range r.Findings {
		if f.Kind != GroupUnplaceable && f.Kind != GroupNoPlacement {
			continue
		}
		g := groupFinding{Kind: f.Kind, Policies: f.Policies, Rules: f.Rules, State: f.GroupState, Placement: f.Placement, Pods: f.Pods}
		for _, p := range f.Refused {
			g.Refused = append(g.Refused, p.Placement+": "+p.Policy+"/"+p.Rule)
		}
		got[f.Subject] = g
	}
	want := map[string]groupFinding{
		"pod group ml/trainers": {Kind: GroupUnplaceable, Policies: []string{"trainers-in-rack-b"}, Rules: []string{"trainers-in-rack-b/placement.filters/rack-b"},
			State: verdict.GroupUnschedulable, Placement: "a", Refused: []string{"a: trainers-in-rack-b/rack-b"}, Pods: 2},
		"pod group ml/frozen": {Kind: GroupUnplaceable, Policies: []string{"freeze"}, Rules: []string{"freeze/preEnqueue/thawed"},
			State: verdict.GroupHeld, Pods: 2},
		"pod group ml/gpu": {Kind: GroupUnplaceable, Policies: []string{"gpu-only"}, Rules: []string{"gpu-only/filters/accelerator"},
			State: verdict.GroupUnschedulable, Pods: 2},
		"pod group ml/huge": {Kind: GroupNoPlacement, State: verdict.GroupUnschedulable, Pods: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod group findings (-want +got):\n%s", diff)
	}
	if r.Summary.Groups != 5 || r.Summary.ByKind[GroupUnplaceable] != 3 || r.Summary.ByKind[GroupNoPlacement] != 1 {
		t.Errorf("summary %+v, want 5 groups, 3 group-unplaceable and 1 group-no-placement", r.Summary)
	}
	// The per-class findings are there as before: the GPU pods' class
	// has no node, the huge pods' fits none.
	for _, kind := range []Kind{NoFeasibleNode, NoNodeFits} {
		if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Kind == kind }) {
			t.Errorf("no %s finding among %+v", kind, r.Findings)
		}
	}

	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: false, features.TopologyAwareWorkloadScheduling: false,
	})
	off, err := Run(context.Background(), groupsInput(t))
	if err != nil {
		t.Fatal(err)
	}
	if off.Summary.ByKind[GroupUnplaceable]+off.Summary.ByKind[GroupNoPlacement] != 0 || off.Summary.Groups != 0 {
		t.Errorf("gate off: group findings %v, groups %d; want none", off.Summary.ByKind, off.Summary.Groups)
	}
	wantNote := "5 pod group(s) with pending members are not analyzed as groups, their pods one by one: the feature gate GenericWorkload is off (give the manager's --feature-gates)"
	if !slices.Contains(off.Notes, wantNote) {
		t.Errorf("gate off: notes %q, want %q", off.Notes, wantNote)
	}
}
