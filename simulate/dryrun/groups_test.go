package dryrun

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/celsched/celsched/test/builder"
)

// TestSplitGroups: the pending members of the input's PodGroups are taken
// by group, in the PodGroups' order; a bound member, a pod in no group and
// pods naming a PodGroup that is not in the input (or is in another
// namespace) stay with the others, and those are counted and named.
func TestSplitGroups(t *testing.T) {
	member := func(ns, name, group, node string) *corev1.Pod {
		p := pod(name, "100m")
		p.Namespace, p.Spec.NodeName = ns, node
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	podGroups := []*schedulingv1beta1.PodGroup{builder.Gang("ml", "b", 2, nil), builder.Gang("ml", "a", 2, nil), builder.Gang("ml", "idle", 2, nil)}
	pods := []*corev1.Pod{
		member("ml", "a-0", "a", ""), member("ml", "b-0", "b", ""), member("ml", "a-1", "a", ""),
		member("ml", "a-2", "a", "n1"),     // bound
		member("ml", "web", "", ""),        // in no group
		member("ml", "lost-0", "lost", ""), // its PodGroup is not in the input
		member("ml", "lost-1", "lost", ""),
		member("ops", "a-0", "a", ""), // ops/a is not ml/a
	}
	pending, others := SplitGroups(podGroups, pods)
	got := map[string][]string{}
	var order []string
	for _, g := range pending.Groups {
		order = append(order, g.PodGroup.Name)
		for _, p := range g.Pods {
			got[g.PodGroup.Name] = append(got[g.PodGroup.Name], p.Namespace+"/"+p.Name)
		}
	}
	var rest []string
	for _, p := range others {
		rest = append(rest, p.Namespace+"/"+p.Name)
	}
	if diff := cmp.Diff(map[string][]string{"a": {"ml/a-0", "ml/a-1"}, "b": {"ml/b-0"}}, got); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b", "a"}, order); diff != "" {
		t.Errorf("groups' order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ml/a-2", "ml/web", "ml/lost-0", "ml/lost-1", "ops/a-0"}, rest); diff != "" {
		t.Errorf("others (-want +got):\n%s", diff)
	}
	if pending.Orphans != 3 || !cmp.Equal(pending.Missing, []string{"ml/lost", "ops/a"}) || pending.Members() != 3 {
		t.Errorf("orphans %d %v, members %d; want 3 [ml/lost ops/a], 3", pending.Orphans, pending.Missing, pending.Members())
	}
}
