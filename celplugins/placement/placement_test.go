package placement

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/topologyaware"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/test/builder"
)

const oneRack = "placement.nodes.all(n, n.metadata.labels['rack'] == placement.nodes[0].metadata.labels['rack'])"

// TestGeneratePlacements: the generator's placement (every node, for a
// group without a topology constraint) is kept or refused as the matching
// policies' placement filters say, with kube-scheduler's codes:
// UnschedulableAndUnresolvable when a rule is false (no node and no
// preemption helps), Unschedulable when a rule failed under Fail; Audit,
// Ignore and policies that do not match the group's pods refuse nothing.
func TestGeneratePlacements(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("trainer-0").SchedulerName("celsched").Label("app", "trainer").Obj()
	group := &framework.PodGroupInfo{
		Namespace: "ns", Name: "train", UnscheduledPods: []*corev1.Pod{pod},
		PodGroup: &schedulingv1beta1.PodGroup{Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}},
	}
	var nodes []fwk.NodeInfo
	for _, n := range []*corev1.Node{
		st.MakeNode().Name("a1").Label("rack", "a").Obj(),
		st.MakeNode().Name("b1").Label("rack", "b").Obj(),
	} {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		nodes = append(nodes, ni)
	}
	trainers := func(name string) *builder.PolicyWrapper {
		return builder.MakePolicy(name).PodLabels(map[string]string{"app": "trainer"})
	}
	refused := "pod group ns/train: no placement passes the SchedulingPolicies: placement (all nodes) rejected by SchedulingPolicy one-rack, rule placement.filters/one-rack: a gang stays in one rack"
	cases := map[string]struct {
		policies   []*schedv1alpha1.SchedulingPolicy
		wantKept   int
		wantCode   fwk.Code
		wantPrefix string
	}{
		"no policy": {wantKept: 1},
		"rule false": {
			policies:   []*schedv1alpha1.SchedulingPolicy{trainers("one-rack").PlacementFilter("one-rack", oneRack, "a gang stays in one rack").Obj()},
			wantCode:   fwk.UnschedulableAndUnresolvable,
			wantPrefix: refused,
		},
		"rule true": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("two-nodes").PlacementFilter("enough", "placement.count >= podGroup.minCount", "").Obj()},
			wantKept: 1,
		},
		"audit": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("one-rack").PlacementFilter("one-rack", oneRack, "").Audit().Obj()},
			wantKept: 1,
		},
		"does not match the group's pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("one-rack").PodLabels(map[string]string{"app": "web"}).
				PlacementFilter("one-rack", oneRack, "").Obj()},
			wantKept: 1,
		},
		"error under Fail": {
			policies:   []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementFilter("zone", "placement.nodes.all(n, n.metadata.labels['zone'] != '')", "").Obj()},
			wantCode:   fwk.Unschedulable,
			wantPrefix: "pod group ns/train: no placement passes the SchedulingPolicies: placement (all nodes) rejected: ",
		},
		"error under Ignore": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementFilter("zone", "placement.nodes.all(n, n.metadata.labels['zone'] != '')", "").Ignore().Obj()},
			wantKept: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))
			generator, err := topologyaware.New(context.Background(), nil, nil, feature.Features{})
			if err != nil {
				t.Fatal(err)
			}
			pl := &Placement{rt: rt, generator: generator}
			result, status := pl.GeneratePlacements(context.Background(), framework.NewCycleState(), group, &fwk.Placement{Nodes: nodes})
			if got := status.Code(); got != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", got, status, tc.wantCode)
			}
			if tc.wantPrefix != "" && !strings.HasPrefix(status.Message(), tc.wantPrefix) {
				t.Errorf("message:\n got %s\nwant prefix %s", status.Message(), tc.wantPrefix)
			}
			kept := 0
			if result != nil {
				kept = len(result.Placements)
			}
			if diff := cmp.Diff(tc.wantKept, kept); diff != "" {
				t.Errorf("placements kept (-want +got):\n%s", diff)
			}
		})
	}
}

// assignment is a pod proposed for a node, as kube-scheduler gives
// ScorePlacement the group's pods.
type assignment struct {
	pod  *corev1.Pod
	node string
}

func (a *assignment) GetPod() *corev1.Pod           { return a.pod }
func (a *assignment) GetPodInfo() fwk.PodInfo       { return nil }
func (a *assignment) GetNodeName() string           { return a.node }
func (a *assignment) GetCycleState() fwk.CycleState { return nil }

// TestScorePlacement: ScorePlacement, called in parallel for each
// placement as kube-scheduler does, and NormalizePlacementScore give each
// placement the weighted mean of the enforced matching policies' placement
// scores, each normalized across the placements (MinMax by default,
// MinMaxReverse, None clamping to 0..100); 0 without any, so
// kube-scheduler's own placement scores decide. Audit policies and
// policies that do not match the group's pods score nothing; an enforced
// error under Fail is an Error status (the group's cycle fails), under
// Ignore the rule scores 0 on the placement and takes no part in the
// normalization.
func TestScorePlacement(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("trainer-0").SchedulerName("celsched").Label("app", "trainer").Obj()
	group := &framework.PodGroupInfo{Namespace: "ns", Name: "train", UnscheduledPods: []*corev1.Pod{pod}, PodGroup: &schedulingv1beta1.PodGroup{}}
	nodeInfos := func(nodes ...*corev1.Node) []fwk.NodeInfo {
		var out []fwk.NodeInfo
		for _, n := range nodes {
			ni := framework.NewNodeInfo()
			ni.SetNode(n)
			out = append(out, ni)
		}
		return out
	}
	// Rack a: 120 free GPUs, two of the group's three pods on its gold
	// node; rack b: 480 free GPUs and a zone, one pod on gold.
	placements := []*fwk.PodGroupAssignments{{
		Placement: &fwk.Placement{Name: "rack-a", Nodes: nodeInfos(
			st.MakeNode().Name("a1").Label("free-gpus", "64").Label("tier", "gold").Obj(),
			st.MakeNode().Name("a2").Label("free-gpus", "56").Obj())},
		ProposedAssignments: []fwk.ProposedAssignment{&assignment{pod, "a1"}, &assignment{pod, "a1"}, &assignment{pod, "a2"}},
	}, {
		Placement: &fwk.Placement{Name: "rack-b", Nodes: nodeInfos(
			st.MakeNode().Name("b1").Label("free-gpus", "240").Label("zone", "7").Obj(),
			st.MakeNode().Name("b2").Label("free-gpus", "240").Label("tier", "gold").Obj())},
		ProposedAssignments: []fwk.ProposedAssignment{&assignment{pod, "b1"}, &assignment{pod, "b1"}, &assignment{pod, "b2"}},
	}}
	const goldPods = "100.0 * double(placement.assignedNodes.filter(n, n.metadata.labels[?'tier'] == optional.of('gold')).size()) / double(size(placement.assignedNodes))"
	const freeGPUs = "placement.nodes.map(n, int(n.metadata.labels['free-gpus'])).sum()"
	const zone = "int(placement.nodes[0].metadata.labels['zone'])"
	trainers := func(name string) *builder.PolicyWrapper {
		return builder.MakePolicy(name).PodLabels(map[string]string{"app": "trainer"})
	}
	cases := map[string]struct {
		policies   []*schedv1alpha1.SchedulingPolicy
		want       []int64
		wantCode   fwk.Code
		wantPrefix string
	}{
		"no policy": {want: []int64{0, 0}},
		"most free GPUs: MinMax by default": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gpus").PlacementScore("free", freeGPUs, 1, "").Obj()},
			want:     []int64{0, 100},
		},
		"fewest free GPUs: MinMaxReverse": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gpus").PlacementScore("free", freeGPUs, 1, schedv1alpha1.MinMaxReverse).Obj()},
			want:     []int64{100, 0},
		},
		"None clamps to 0..100": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gpus").
				PlacementScore("free", freeGPUs, 1, schedv1alpha1.None).
				PlacementScore("gold", goldPods, 1, schedv1alpha1.None).Obj()},
			want: []int64{84, 67}, // (100 + 67)/2, (100 + 33)/2
		},
		"weighted across policies": {
			policies: []*schedv1alpha1.SchedulingPolicy{
				trainers("gold").PlacementScore("gold", goldPods, 1, schedv1alpha1.None).Obj(),
				trainers("gpus").PlacementScore("free", freeGPUs, 2, "").Obj(),
			},
			want: []int64{22, 78}, // (67 + 2*0)/3, (33 + 2*100)/3
		},
		"audit": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gpus").PlacementScore("free", freeGPUs, 1, "").Audit().Obj()},
			want:     []int64{0, 0},
		},
		"does not match the group's pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("gpus").PodLabels(map[string]string{"app": "web"}).PlacementScore("free", freeGPUs, 1, "").Obj()},
			want:     []int64{0, 0},
		},
		"error under Fail": {
			policies:   []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", zone, 1, "").Obj()},
			wantCode:   fwk.Error,
			wantPrefix: "pod group ns/train, placement rack-a: SchedulingPolicy zones, rule zone: spec.placement.scores[0].expression: no such key: zone",
		},
		// zone fails on rack a: 0 there, and rack b alone is its highest.
		"error under Ignore": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", zone, 1, "").
				PlacementScore("free", freeGPUs, 1, schedv1alpha1.MinMaxReverse).Ignore().Obj()},
			want: []int64{50, 50}, // (0 + 100)/2, (100 + 0)/2
		},
		"audit error under Fail": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", zone, 1, "").Audit().Obj()},
			want:     []int64{0, 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))
			pl := &Placement{rt: rt}
			scores, status := scorePlacements(pl, group, placements)
			if code := status.Code(); code != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", code, status, tc.wantCode)
			}
			if tc.wantPrefix != "" && !strings.HasPrefix(status.Message(), tc.wantPrefix) {
				t.Errorf("message:\n got %s\nwant prefix %s", status.Message(), tc.wantPrefix)
			}
			if diff := cmp.Diff(tc.want, scores); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// scorePlacements scores the placements as kube-scheduler's
// RunPlacementScorePlugins does: ScorePlacement in parallel, one call per
// placement with its own cycle state over the group's, then
// NormalizePlacementScore on the group's state. It returns the scores, or
// the status of the first placement (in order) that failed.
func scorePlacements(pl *Placement, group fwk.PodGroupInfo, placements []*fwk.PodGroupAssignments) ([]int64, *fwk.Status) {
	groupState := framework.NewCycleState()
	scores := make([]fwk.PlacementScore, len(placements))
	statuses := make([]*fwk.Status, len(placements))
	var wg sync.WaitGroup
	for i, a := range placements {
		wg.Go(func() {
			state := framework.NewCycleState()
			state.SetPodGroupSchedulingCycle(groupState)
			scores[i].Placement = a.Placement
			scores[i].Score, statuses[i] = pl.ScorePlacement(context.Background(), state, group, a)
		})
	}
	wg.Wait()
	for _, s := range statuses {
		if !s.IsSuccess() {
			return nil, s
		}
	}
	if s := pl.PlacementScoreExtensions().NormalizePlacementScore(context.Background(), groupState, group, scores); !s.IsSuccess() {
		return nil, s
	}
	out := make([]int64, len(scores))
	for i, s := range scores {
		out[i] = s.Score
	}
	return out, nil
}

// TestNormalizePlacementScoreRows: a raw score that is not a row that
// ScorePlacement wrote in the group's cycle (another plugin's score, a row
// given twice) is an error, never a wrong score.
func TestNormalizePlacementScoreRows(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("trainer-0").Label("app", "trainer").Obj()
	group := &framework.PodGroupInfo{Namespace: "ns", Name: "train", UnscheduledPods: []*corev1.Pod{pod}, PodGroup: &schedulingv1beta1.PodGroup{}}
	policy := builder.MakePolicy("p").PodLabels(map[string]string{"app": "trainer"}).PlacementScore("count", "placement.count", 1, "").Obj()
	pl := &Placement{rt: plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))}
	cases := map[string][]int64{
		"beyond the rows": {0, 2},
		"negative":        {-1, 1},
		"a row twice":     {1, 1},
	}
	for name, rows := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			groupState := framework.NewCycleState()
			state := framework.NewCycleState()
			state.SetPodGroupSchedulingCycle(groupState)
			scores := make([]fwk.PlacementScore, len(rows))
			for i := range rows {
				a := &fwk.PodGroupAssignments{Placement: &fwk.Placement{Name: fmt.Sprintf("p%d", i)}, ProposedAssignments: []fwk.ProposedAssignment{&assignment{pod, "n"}}}
				if _, s := pl.ScorePlacement(context.Background(), state, group, a); !s.IsSuccess() {
					t.Fatal(s)
				}
				scores[i] = fwk.PlacementScore{Placement: a.Placement, Score: rows[i]}
			}
			s := pl.NormalizePlacementScore(context.Background(), groupState, group, scores)
			if s.Code() != fwk.Error || !strings.Contains(s.Message(), "was not written by ScorePlacement in this cycle") {
				t.Errorf("status %v, want an Error that the raw score is not a row of the cycle", s)
			}
		})
	}
}
