package verdict

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/test/builder"
)

const (
	rackLabel  = "topology.example.com/rack"
	blockLabel = "topology.example.com/block"
	// oneRack is the placement filter "a gang stays in one rack".
	oneRack = "placement.nodes.all(n, n.metadata.labels[?'" + rackLabel + "'].orValue('') == placement.nodes[0].metadata.labels[?'" + rackLabel + "'].orValue(''))"
)

// groupsProfile is TestPlaceGroups' name for the celsched profile.
const groupsProfile = "celsched-groups"

// gang returns the group and n members requesting cpu, labelled.
func gang(pg *schedulingv1beta1.PodGroup, n int, cpu string, labels map[string]string) Group {
	g := Group{PodGroup: pg}
	for i := range n {
		p := pod(pg.Namespace, fmt.Sprintf("%s-%d", pg.Name, i), labels)
		p.Spec.SchedulerName = groupsProfile
		requesting(cpu)(p)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(pg.Name)}
		g.Pods = append(g.Pods, p)
	}
	return g
}

// TestPlaceGroups: kube-scheduler itself, run by PlaceGroups over a
// cluster in memory, places a 4-member gang whose policy keeps it in one
// rack in the only rack that takes all 4; keeps wholly pending, with the
// policy and rule, a gang that no rack can take; keeps wholly pending a
// gang one of whose members a filter refuses everywhere (none of 2
// bound); holds a gang short of its minimum count, and one a preEnqueue
// rule holds, each with the plugin's message; and places a gang no
// policy applies to across racks.
func TestPlaceGroups(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true,
	})
	var nodes []*corev1.Node
	for _, spec := range []struct{ name, rack, block, cpu string }{
		{"a1", "a", "b1", "1500m"}, {"a2", "a", "b1", "1500m"},
		{"b1", "b", "b1", "1500m"}, {"b2", "b", "b1", "1500m"},
		{"c1", "c", "b2", "2500m"}, {"c2", "c", "b2", "2500m"},
	} {
		n := node(spec.name, map[string]string{rackLabel: spec.rack, blockLabel: spec.block, corev1.LabelHostname: spec.name})
		n.Status.Allocatable[corev1.ResourceCPU] = resourceQuantity(spec.cpu)
		nodes = append(nodes, n)
	}
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("one-rack").PodLabels(map[string]string{"app": "trainer"}).
			PlacementFilter("one-rack", oneRack, "a gang stays in one rack").Obj(),
		builder.MakePolicy("no-ps").Filter("ps", "pod.metadata.labels[?'role'].orValue('') != 'ps'").Obj(),
		builder.MakePolicy("queue").NamespaceLabels(map[string]string{"team": "ml"}).PreEnqueue("open", "pod.metadata.labels[?'queue'].orValue('') != 'closed'", "the queue is closed").Obj(),
	}
	trainer := map[string]string{"app": "trainer"}
	// spill's members carry what the live scheduler wrote before: the run
	// writes its own (and a run that waited for a change would hang).
	spill := gang(podGroup("ml", "spill", 4, ""), 4, "1", trainer)
	for _, p := range spill.Pods {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "pod group ml/spill: no placement passes the SchedulingPolicies: placement (all nodes) rejected by SchedulingPolicy one-rack, rule placement.filters/one-rack: a gang stays in one rack"}}
	}
	// free's members have no UID (as in a file): the run gives them one.
	free := gang(podGroup("ml", "free", 2, blockLabel), 2, "100m", map[string]string{"app": "other"})
	for _, p := range free.Pods {
		p.UID = ""
	}
	ps := gang(podGroup("ml", "ps", 2, ""), 2, "100m", map[string]string{"app": "other"})
	ps.Pods[1].Labels = map[string]string{"app": "other", "role": "ps"}
	groups := []Group{
		gang(podGroup("ml", "train", 4, blockLabel), 4, "1", trainer),
		spill,
		ps,
		gang(podGroup("ml", "short", 3, ""), 2, "100m", trainer),
		free,
		gang(podGroup("ml", "queued", 2, ""), 2, "100m", map[string]string{"queue": "closed"}),
	}
	// The profile renamed: PlaceGroups records kube-scheduler's metrics
	// under its profiles' names, which TestDryRunRecordsNoMetrics checks
	// the Evaluator's frameworks never do with the scheduler's.
	e := newEvaluatorWith(t, namespace("ml", map[string]string{"team": "ml"}), nodes, nil, policies, func(cfg *schedulerconfig.KubeSchedulerConfiguration) {
		cfg.Profiles[0].SchedulerName = groupsProfile
	})
	got, err := e.PlaceGroups(context.Background(), groups)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*GroupResult{}
	for _, r := range got {
		byName[r.Group] = r
		t.Logf("%s: %s %v %s refused=%v", r.Group, r.State, r.Members, r.Reason, r.Refused)
	}

	train := byName["ml/train"]
	if train.State != GroupPlaced {
		t.Fatalf("ml/train %s (%s), want placed in rack c", train.State, train.Reason)
	}
	for _, m := range train.Members {
		if !strings.HasPrefix(m.Node, "c") {
			t.Errorf("ml/train member %s on %q, want c1 or c2 (the only rack that takes 4)", m.Pod, m.Node)
		}
	}
	if train.Placement != "b2" {
		t.Errorf("ml/train placed in %q, want block b2", train.Placement)
	}
	wantRefused := []celplugins.RefusedPlacement{{Placement: "b1",
		Refusal: "placement b1 rejected by SchedulingPolicy one-rack, rule placement.filters/one-rack: a gang stays in one rack",
		Policy:  "one-rack", Rule: "one-rack"}}
	if diff := cmp.Diff(wantRefused, train.Refused); diff != "" {
		t.Errorf("ml/train refused placements (-want +got):\n%s", diff)
	}

	spilled := byName["ml/spill"]
	refusal := "rejected by SchedulingPolicy one-rack, rule placement.filters/one-rack: a gang stays in one rack"
	if spilled.State != GroupUnschedulable || !strings.Contains(spilled.Reason, refusal) {
		t.Errorf("ml/spill %s (%q), want unschedulable naming %q", spilled.State, spilled.Reason, refusal)
	}
	for _, m := range spilled.Members {
		if m.Node != "" || !strings.Contains(m.Reason, refusal) {
			t.Errorf("ml/spill member %+v, want pending naming the rule", m)
		}
	}

	psGroup := byName["ml/ps"]
	if psGroup.State != GroupUnschedulable {
		t.Errorf("ml/ps %s, want unschedulable: one member's nodes are all refused, so none is bound", psGroup.State)
	}
	for _, m := range psGroup.Members {
		if m.Node != "" {
			t.Errorf("ml/ps member %s bound to %s, want the whole gang pending", m.Pod, m.Node)
		}
	}
	if !strings.Contains(psGroup.Reason, "no-ps") {
		t.Errorf("ml/ps reason %q, want it to name the policy no-ps", psGroup.Reason)
	}

	if short := byName["ml/short"]; short.State != GroupHeld {
		t.Errorf("ml/short %s (%s), want held: 2 pods of a gang of 3", short.State, short.Reason)
	}

	queued := byName["ml/queued"]
	if want := "held at PreEnqueue by CELPreEnqueue: "; queued.State != GroupHeld || !strings.Contains(queued.Reason, want) || !strings.Contains(queued.Reason, "the queue is closed") {
		t.Errorf("ml/queued %s (%q), want held by CELPreEnqueue with the rule's message", queued.State, queued.Reason)
	}

	placedFree := byName["ml/free"]
	if placedFree.State != GroupPlaced || (placedFree.Placement != "b1" && placedFree.Placement != "b2") {
		t.Errorf("ml/free %s in %q, want placed in one block", placedFree.State, placedFree.Placement)
	}
}

// TestPlaceGroupsPlacementScore: the dry run's group placement is
// kube-scheduler's, so a placement score is normalized across the
// placements as in the scheduler. Rack a's nodes have 4 CPUs, rack b's 2:
// kube-scheduler's own placement scores pack, and prefer rack b for a
// 2-member gang. A rule over 100 (the free GPUs of the rack's nodes)
// places the gang in rack a when rack a has the most and the rule is
// MinMax (the default), or has the fewest and the rule is
// MinMaxReverse; clamped to 0..100 (None), it scores both racks 100 and
// kube-scheduler's preference stands.
func TestPlaceGroupsPlacementScore(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true,
	})
	const freeGPUs = "placement.nodes.map(n, int(n.metadata.labels['free-gpus'])).sum()"
	cases := map[string]struct {
		normalization    schedv1alpha1.ScoreNormalization
		freeInA, freeInB string
		want             string
	}{
		"MinMax by default: the most free GPUs": {freeInA: "200", freeInB: "150", want: "a"},
		"MinMaxReverse: the fewest free GPUs":   {normalization: schedv1alpha1.MinMaxReverse, freeInA: "150", freeInB: "200", want: "a"},
		"None: both clamped to 100":             {normalization: schedv1alpha1.None, freeInA: "200", freeInB: "150", want: "b"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var nodes []*corev1.Node
			for _, spec := range []struct{ name, rack, cpu, free string }{
				{"a1", "a", "4", tc.freeInA}, {"a2", "a", "4", tc.freeInA},
				{"b1", "b", "2", tc.freeInB}, {"b2", "b", "2", tc.freeInB},
			} {
				n := node(spec.name, map[string]string{rackLabel: spec.rack, "free-gpus": spec.free, corev1.LabelHostname: spec.name})
				n.Status.Allocatable[corev1.ResourceCPU] = resourceQuantity(spec.cpu)
				nodes = append(nodes, n)
			}
			policies := []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("free-gpus").PodLabels(map[string]string{"app": "trainer"}).
				PlacementScore("free-gpus", freeGPUs, 1, tc.normalization).Obj()}
			e := newEvaluatorWith(t, namespace("ml", nil), nodes, nil, policies, func(cfg *schedulerconfig.KubeSchedulerConfiguration) {
				cfg.Profiles[0].SchedulerName = groupsProfile
			})
			got, err := e.PlaceGroups(context.Background(), []Group{gang(podGroup("ml", "train", 2, rackLabel), 2, "1", map[string]string{"app": "trainer"})})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].State != GroupPlaced {
				t.Fatalf("results %+v, want ml/train placed", got)
			}
			if got[0].Placement != tc.want {
				t.Errorf("ml/train placed in rack %q, want %q", got[0].Placement, tc.want)
			}
		})
	}
}
