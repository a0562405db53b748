package performance

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestGroupPlaces checks how the harness tells where pod groups landed:
// per namespace, the groups of its pods, those bound in part and those
// across more than one domain of their topology constraint (a group
// without one is never split), on nodes in racks r1 and r2.
func TestGroupPlaces(t *testing.T) {
	const rack = "topology.example.com/rack"
	nodeLabels := map[string]map[string]string{
		"a": {rack: "r1"}, "b": {rack: "r1"}, "c": {rack: "r2"},
	}
	group := func(ns, name string, topologyKey string) schedulingv1beta1.PodGroup {
		pg := schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if topologyKey != "" {
			pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: topologyKey}},
			}
		}
		return pg
	}
	pod := func(ns, group, node string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: corev1.PodSpec{NodeName: node}}
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	groups := &schedulingv1beta1.PodGroupList{Items: []schedulingv1beta1.PodGroup{
		group("s", "whole", rack), group("s", "partial", rack), group("s", "split", rack),
		group("t", "free", ""), group("t", "pending", rack),
	}}
	pods := &corev1.PodList{Items: []corev1.Pod{
		pod("s", "whole", "a"), pod("s", "whole", "b"),
		pod("s", "partial", "a"), pod("s", "partial", ""),
		pod("s", "split", "b"), pod("s", "split", "c"),
		pod("t", "free", "a"), pod("t", "free", "c"),
		pod("t", "pending", ""), pod("t", "pending", ""),
		pod("t", "", "c"), // no group
	}}
	want := map[string]groupPlace{
		"s": {PodGroups: 3, Partial: 1, Split: 1},
		"t": {PodGroups: 2},
	}
	if diff := cmp.Diff(want, groupPlaces(groups, nodeLabels, pods)); diff != "" {
		t.Errorf("group places (-want +got):\n%s", diff)
	}
}
