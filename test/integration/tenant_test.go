package integration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

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
