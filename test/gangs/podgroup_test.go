package gangs

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/test/builder"
)

// TestPodGroupInRules: filters and match conditions read the pod's group
// (podGroup). A policy for the groups labelled team=ml keeps gangs of more
// than 4 members off small nodes: a 5-member ml gang that the two small
// nodes could hold stays wholly pending, each refused member's condition
// naming the policy and rule; once a large node joins, the gang is placed
// on it whole. A 5-member gang of another team is not matched (its
// PodGroup has no team label) and lands on the small nodes.
func TestPodGroupInRules(t *testing.T) {
	small := map[string]string{"size": "small"}
	createNodes(t, nodeSpec{name: "small-1", labels: small}, nodeSpec{name: "small-2", labels: small})
	applyPolicy(t, builder.MakePolicy("gang-size").
		Condition("ml-groups", "podGroup.metadata.labels[?'team'].orValue('') == 'ml'").
		FilterMsg("small-or-large", "podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'", "gangs of more than 4 need a large node", "").Obj())
	ns := createNamespace(t, "podgroup", nil)
	labelGroup(t, createGang(t, ns, "train", 5, ""), map[string]string{"team": "ml"})
	pods := members(t, ns, "train", 5, nil, withCPU("1"))
	refusal := "2 node(s) rejected by SchedulingPolicy gang-size, rule small-or-large: gangs of more than 4 need a large node"
	refused := 0
	for _, pod := range pods {
		msg := waitPending(t, pod, reasonUnschedulable)
		if strings.Contains(msg, refusal) {
			refused++
		}
		t.Logf("%s: %s", pod.Name, msg)
	}
	if refused == 0 {
		t.Errorf("no member's condition names the policy and rule (%q)", refusal)
	}

	createNodes(t, nodeSpec{name: "large-1", cpu: "8", labels: map[string]string{"size": "large"}})
	for _, pod := range pods {
		if got := waitForNode(t, pod); got != "large-1" {
			t.Errorf("%s on %s, want large-1", pod.Name, got)
		}
	}

	createGang(t, ns, "web", 5, "")
	web := make([]*corev1.Pod, 0, 5)
	for i := range 5 {
		web = append(web, createPod(t, ns, fmt.Sprintf("web-%d", i), inGroup("web"), withCPU("1"), withNodeSelector(small)))
	}
	for _, pod := range web {
		if got := waitForNode(t, pod); got != "small-1" && got != "small-2" {
			t.Errorf("%s on %s, want a small node", pod.Name, got)
		}
	}
}

// TestPodGroupMembersTogether: a filter reading where the group's members
// are (podGroup.assignedNodes) keeps a gang on one node. kube-scheduler
// places a gang's members one after the other in one pod group cycle,
// assuming each in its snapshot: each member's filter sees those placed
// before it, so the three members, which kube-scheduler would spread over
// three empty nodes, share the first one's node.
func TestPodGroupMembersTogether(t *testing.T) {
	createNodes(t, nodeSpec{name: "t1"}, nodeSpec{name: "t2"}, nodeSpec{name: "t3"})
	applyPolicy(t, builder.MakePolicy("together").PodLabels(map[string]string{"app": "together"}).
		FilterMsg("with-the-others", "size(podGroup.assignedNodes) == 0 || node.metadata.name in podGroup.assignedNodes", "not where the group is", "").Obj())
	ns := createNamespace(t, "together", nil)
	createGang(t, ns, "train", 3, "")
	pods := members(t, ns, "train", 3, nil, withCPU("1"), withLabels(map[string]string{"app": "together"}))
	nodes := nodesOf(t, pods)
	if len(slices.Compact(slices.Clone(nodes))) != 1 {
		t.Errorf("members on %v, want one node", nodes)
	}
}

// withNodeSelector sets the pod's nodeSelector.
func withNodeSelector(selector map[string]string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = selector }
}

// labelGroup sets a PodGroup's labels.
func labelGroup(t *testing.T, pg client.Object, labels map[string]string) {
	t.Helper()
	patch := client.MergeFrom(pg.DeepCopyObject().(client.Object))
	pg.SetLabels(labels)
	if err := k8sClient.Patch(t.Context(), pg, patch); err != nil {
		t.Fatalf("labelling PodGroup %s: %v", pg.GetName(), err)
	}
}
