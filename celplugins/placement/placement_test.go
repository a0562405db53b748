package placement

import (
	"context"
	"strings"
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

// TestScorePlacement: the weighted mean of the enforced matching policies'
// placement scores (0 without any, so kube-scheduler's own placement
// scores decide); Audit policies and policies that do not match the
// group's pods score nothing; an enforced error under Fail is an Error
// status (the group's cycle fails), under Ignore the rule scores 0.
func TestScorePlacement(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("trainer-0").SchedulerName("celsched").Label("app", "trainer").Obj()
	group := &framework.PodGroupInfo{Namespace: "ns", Name: "train", UnscheduledPods: []*corev1.Pod{pod}, PodGroup: &schedulingv1beta1.PodGroup{}}
	var nodes []fwk.NodeInfo
	for _, n := range []*corev1.Node{
		st.MakeNode().Name("a1").Label("rack", "a").Label("tier", "gold").Obj(),
		st.MakeNode().Name("a2").Label("rack", "a").Obj(),
	} {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		nodes = append(nodes, ni)
	}
	// Two of the group's pods on a1 (gold), one on a2.
	assignments := &fwk.PodGroupAssignments{
		Placement:           &fwk.Placement{Name: "rack-a", Nodes: nodes},
		ProposedAssignments: []fwk.ProposedAssignment{&assignment{pod, "a1"}, &assignment{pod, "a1"}, &assignment{pod, "a2"}},
	}
	const goldPods = "100.0 * double(placement.assignedNodes.filter(n, n.metadata.labels[?'tier'] == optional.of('gold')).size()) / double(size(placement.assignedNodes))"
	const missing = "int(placement.nodes[0].metadata.labels['zone'])"
	trainers := func(name string) *builder.PolicyWrapper {
		return builder.MakePolicy(name).PodLabels(map[string]string{"app": "trainer"})
	}
	cases := map[string]struct {
		policies   []*schedv1alpha1.SchedulingPolicy
		want       int64
		wantCode   fwk.Code
		wantPrefix string
	}{
		"no policy": {},
		"gold share of the pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gold").PlacementScore("gold", goldPods, 1).Obj()},
			want:     67,
		},
		"weighted across policies": {
			policies: []*schedv1alpha1.SchedulingPolicy{
				trainers("gold").PlacementScore("gold", goldPods, 1).Obj(),
				trainers("packed").PlacementScore("full", "100", 2).Obj(),
			},
			want: 89, // (67 + 2*100) / 3
		},
		"audit": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("gold").PlacementScore("gold", goldPods, 1).Audit().Obj()},
		},
		"does not match the group's pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("gold").PodLabels(map[string]string{"app": "web"}).PlacementScore("gold", goldPods, 1).Obj()},
		},
		"error under Fail": {
			policies:   []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", missing, 1).Obj()},
			wantCode:   fwk.Error,
			wantPrefix: "pod group ns/train, placement rack-a: SchedulingPolicy zones, rule zone: spec.placement.scores[0].expression: no such key: zone",
		},
		"error under Ignore": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", missing, 1).PlacementScore("full", "100", 1).Ignore().Obj()},
			want:     50,
		},
		"audit error under Fail": {
			policies: []*schedv1alpha1.SchedulingPolicy{trainers("zones").PlacementScore("zone", missing, 1).Audit().Obj()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))
			pl := &Placement{rt: rt}
			got, status := pl.ScorePlacement(context.Background(), nil, group, assignments)
			if code := status.Code(); code != tc.wantCode {
				t.Fatalf("code %v (%v), want %v", code, status, tc.wantCode)
			}
			if tc.wantPrefix != "" && !strings.HasPrefix(status.Message(), tc.wantPrefix) {
				t.Errorf("message:\n got %s\nwant prefix %s", status.Message(), tc.wantPrefix)
			}
			if got != tc.want {
				t.Errorf("score %d, want %d", got, tc.want)
			}
		})
	}
}
