package integration

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// The scheduler's memo must never let one tenant's result serve another:
// identical pods of two namespaces, under rules that read the namespace,
// are placed where the rules say for their own namespace.

// TestTenantNamespaceFilter: a filter keeping each namespace's pods on the
// nodes labelled with its name. The pod of the second namespace is placed
// on its own node, although an identical pod of the first namespace was
// filtered on both nodes just before.
func TestTenantNamespaceFilter(t *testing.T) {
	a := createNamespace(t, "tenant-a", nil)
	b := createNamespace(t, "tenant-b", nil)
	createNodes(t,
		nodeSpec{name: "tenant-node-of-a", labels: map[string]string{"team": a}},
		nodeSpec{name: "tenant-node-of-b", labels: map[string]string{"team": b}},
	)
	applyPolicy(t, builder.MakePolicy("tenant-own-nodes").PodLabels(map[string]string{"app": "tenant-web"}).
		FilterMsg("team", "node.metadata.labels[?'team'].orValue('') == pod.metadata.namespace", "the node belongs to another team", "").Obj())
	web := withLabels(map[string]string{"app": "tenant-web"})
	expectNode(t, createPod(t, a, "web", web), "tenant-node-of-a")
	expectNode(t, createPod(t, b, "web", web), "tenant-node-of-b")
}

// TestTenantNodeInfoPerNamespace: the documented
// at-most-two-replicas-per-node policy counts the pods of the pod's own
// namespace. Namespace B runs two web pods on the node; a web pod of
// namespace A is filtered there first (and kept pending by another policy,
// which rejects every node for A); a third web pod of B pinned to the node
// must stay pending.
func TestTenantNodeInfoPerNamespace(t *testing.T) {
	a := createNamespace(t, "tenant-a", nil)
	b := createNamespace(t, "tenant-b", nil)
	createNodes(t, nodeSpec{name: "tenant-n1"})
	applyPolicy(t, builder.MakePolicy("at-most-two-replicas-per-node").PodLabels(map[string]string{"app": "tenant-replica"}).
		FilterMsg("replicas-per-node", "nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace && "+
			"p.labels[?'app'].orValue('') == pod.metadata.labels['app']).size() < 2", "the node already runs two pods of this app", "").Obj())
	applyPolicy(t, builder.MakePolicy("tenant-a-closed").NamespaceLabels(map[string]string{corev1.LabelMetadataName: a}).
		PodLabels(map[string]string{"app": "tenant-replica"}).FilterMsg("closed", "false", "namespace A is closed", "").Obj())
	replica := withLabels(map[string]string{"app": "tenant-replica"})
	createPod(t, b, "web-1", replica, boundTo("tenant-n1"))
	createPod(t, b, "web-2", replica, boundTo("tenant-n1"))
	// A's pod passes the replica rule on the node (A runs nothing there)
	// and is rejected by the closed namespace.
	waitPending(t, createPod(t, a, "web", replica), corev1.PodReasonUnschedulable, "namespace A is closed")
	waitPending(t, createPod(t, b, "web-3", replica, onNode("tenant-n1")), corev1.PodReasonUnschedulable,
		"the node already runs two pods of this app")
}

// TestBatchingNamespaces: identical pods of two namespaces, each filling a
// node, under a filter and a score that read the namespace, with
// kube-scheduler's opportunistic batching off (the shipped profile, which
// never batches) and on (celsched-batching): every pod lands on a node of
// its own namespace, on the tier its namespace's label prefers. With
// batching on, kube-scheduler reuses rankings (hints used), and never
// across the two namespaces.
func TestBatchingNamespaces(t *testing.T) {
	for _, profile := range []string{schedulerName, "celsched-batching"} {
		t.Run(profile, func(t *testing.T) {
			a := createNamespace(t, "batch-a", map[string]string{"tier": "gold"})
			b := createNamespace(t, "batch-b", map[string]string{"tier": "silver"})
			var nodes []nodeSpec
			for i := range 8 {
				team, tier := a, []string{"gold", "silver"}[i%2]
				if i >= 4 {
					team = b
				}
				nodes = append(nodes, nodeSpec{name: fmt.Sprintf("%s-%d", profile, i), labels: map[string]string{"team": team, "tier": tier}})
			}
			createNodes(t, nodes...)
			applyPolicy(t, builder.MakePolicy("batch-tenants").PodLabels(map[string]string{"app": "batch-web"}).
				Filter("team", "node.metadata.labels[?'team'].orValue('') == pod.metadata.namespace").
				Score("tier", "node.metadata.labels[?'tier'].orValue('') == namespaceObject.metadata.?labels[?'tier'].orValue('') ? 100 : 0", 1, schedv1alpha1.None).Obj())
			before := hintsUsed(t, profile)
			var pods []*corev1.Pod
			for _, ns := range []string{a, a, b, b} {
				pods = append(pods, createPod(t, ns, fmt.Sprintf("web-%d", len(pods)), withScheduler(profile),
					withLabels(map[string]string{"app": "batch-web"}), withRequests("3", "1Gi")))
			}
			used := map[string]bool{}
			for _, pod := range pods {
				name := waitForNode(t, pod)
				var node corev1.Node
				if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, &node); err != nil {
					t.Fatal(err)
				}
				wantTier := map[string]string{a: "gold", b: "silver"}[pod.Namespace]
				if node.Labels["team"] != pod.Namespace || node.Labels["tier"] != wantTier || used[name] {
					t.Errorf("pod %s/%s on %s (team %s, tier %s), want a free node of its team with tier %s",
						pod.Namespace, pod.Name, name, node.Labels["team"], node.Labels["tier"], wantTier)
				}
				used[name] = true
			}
			if profile == "celsched-batching" && hintsUsed(t, profile) == before {
				t.Errorf("profile %s used no batching hint", profile)
			}
		})
	}
}

// hintsUsed is kube-scheduler's count of batching hints used by a profile.
func hintsUsed(t *testing.T, profile string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "scheduler_batch_attempts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["profile"] == profile && labels["result"] == "hint_used" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
