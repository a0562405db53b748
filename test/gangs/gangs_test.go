package gangs

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/placement"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/builder"
)

// The tests run one after another (policies and nodes are cluster-wide);
// each creates its nodes, namespaces and policies and deletes them when it
// ends.

const (
	reasonUnschedulable = corev1.PodReasonUnschedulable
	reasonGated         = corev1.PodReasonSchedulingGated
)

// members creates the n pods of a gang, trainer-0 to trainer-(n-1), each
// with opts and those that member(i) adds.
func members(t *testing.T, namespace, group string, n int, member func(i int) []podOption, opts ...podOption) []*corev1.Pod {
	t.Helper()
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		o := append([]podOption{inGroup(group)}, opts...)
		if member != nil {
			o = append(o, member(i)...)
		}
		pods[i] = createPod(t, namespace, fmt.Sprintf("trainer-%d", i), o...)
	}
	return pods
}

// TestGangRefusedMemberKeepsGangPending: a policy refuses the only node
// one member of a 4-member gang fits on. The gang stays wholly pending
// (not 3 of 4 bound): the refused member's condition names the policy and
// rule; the others carry the gang's status from kube-scheduler (its
// minCount). A pod outside a group schedules as always. When the policy
// changes, the group is requeued and placed whole.
func TestGangRefusedMemberKeepsGangPending(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "n1"}, nodeSpec{name: "n2"}, nodeSpec{name: "n3"},
		nodeSpec{name: "n4", labels: map[string]string{"maintenance": "true"}},
	)
	policy := builder.MakePolicy("avoid-maintenance").PodLabels(map[string]string{"app": "trainer"}).
		FilterMsg("not-in-maintenance", "node.metadata.labels[?'maintenance'].orValue('') != 'true'", "node is in maintenance", "").Obj()
	applyPolicy(t, policy)
	ns := createNamespace(t, "gang", nil)
	createGang(t, ns, "train", 4, "")
	// trainer-i may run only on node n(i+1), with 3 of its 4 CPUs: the
	// policy refuses trainer-3 its only node. (kube-scheduler places a
	// gang's members one by one, greedily: pinned members make the
	// placement after the policy change the only one.)
	pods := members(t, ns, "train", 4, func(i int) []podOption {
		return []podOption{onNode(fmt.Sprintf("n%d", i+1))}
	}, withLabels(map[string]string{"app": "trainer"}), withCPU("3"))

	refusal := "rejected by SchedulingPolicy avoid-maintenance, rule not-in-maintenance: node is in maintenance"
	msg := waitPending(t, pods[3], reasonUnschedulable, refusal)
	t.Logf("trainer-3: %s", msg)
	for _, pod := range pods[:3] {
		msg := waitPending(t, pod, reasonUnschedulable, "pod group is unschedulable", "minCount (4) cannot be satisfied")
		t.Logf("%s: %s", pod.Name, msg)
	}
	for _, pod := range pods {
		if !unbound(t, pod) {
			t.Errorf("pod %s was bound, want the whole gang pending", pod.Name)
		}
	}

	// Outside a group, the same policy applies as always: a pod that fits
	// only on n4 is refused it, one that fits on n1 is placed.
	soloN4 := createPod(t, ns, "solo-n4", withLabels(map[string]string{"app": "trainer"}), withCPU("1"), onNode("n4"))
	waitPending(t, soloN4, reasonUnschedulable, "0/4 nodes are available: 1 node(s) "+refusal)
	solo := createPod(t, ns, "solo", withLabels(map[string]string{"app": "trainer"}), withCPU("1"), onNode("n1"))
	if got := waitForNode(t, solo); got != "n1" {
		t.Errorf("solo on %s, want n1", got)
	}

	// The policy lets maintenance nodes through: the group is retried (on
	// the policy's event, or after its backoff) and placed whole.
	current := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: policy.Name}, current); err != nil {
		t.Fatal(err)
	}
	current.Spec.Filters[0].Expression = "node.metadata.labels[?'maintenance'].orValue('') != 'forbidden'"
	if err := k8sClient.Update(t.Context(), current); err != nil {
		t.Fatal(err)
	}
	for i, pod := range pods {
		if got, want := waitForNode(t, pod), fmt.Sprintf("n%d", i+1); got != want {
			t.Errorf("%s on %s, want %s", pod.Name, got, want)
		}
	}
	if got := waitForNode(t, soloN4); got != "n4" {
		t.Errorf("solo-n4 on %s, want n4", got)
	}
}

// TestGangRequeuedOnNodeEvent: the gang that a policy keeps pending is
// placed whole once the refused node changes so that the policy passes it.
// (kube-scheduler retries a rejected group when a member's queueing hint
// says so, CELFilter's node hint here, and after the group's backoff; the
// test asserts the outcome, not which of the two came first.)
func TestGangRequeuedOnNodeEvent(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "n1"}, nodeSpec{name: "n2"},
		nodeSpec{name: "n3", labels: map[string]string{"maintenance": "true"}},
	)
	applyPolicy(t, builder.MakePolicy("avoid-maintenance").PodLabels(map[string]string{"app": "trainer"}).
		FilterMsg("not-in-maintenance", "node.metadata.labels[?'maintenance'].orValue('') != 'true'", "node is in maintenance", "").Obj())
	ns := createNamespace(t, "node-event", nil)
	createGang(t, ns, "train", 3, "")
	pods := members(t, ns, "train", 3, func(i int) []podOption {
		return []podOption{onNode(fmt.Sprintf("n%d", i+1))}
	}, withLabels(map[string]string{"app": "trainer"}), withCPU("3"))
	waitPending(t, pods[2], reasonUnschedulable, "rejected by SchedulingPolicy avoid-maintenance, rule not-in-maintenance")
	for _, pod := range pods[:2] {
		waitPending(t, pod, reasonUnschedulable, "pod group is unschedulable", "minCount (3) cannot be satisfied")
	}

	node := &corev1.Node{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: "n3"}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels["maintenance"] = "done"
	if err := k8sClient.Patch(t.Context(), node, patch); err != nil {
		t.Fatal(err)
	}
	for i, pod := range pods {
		if got, want := waitForNode(t, pod), fmt.Sprintf("n%d", i+1); got != want {
			t.Errorf("%s on %s, want %s", pod.Name, got, want)
		}
	}
}

// TestGangHeldAtPreEnqueue: a preEnqueue rule over the namespace holds
// every member of the gang before the queue, each with the policy and
// rule; approving the namespace releases the whole group, which is placed.
func TestGangHeldAtPreEnqueue(t *testing.T) {
	createNodes(t, nodeSpec{name: "n1"}, nodeSpec{name: "n2"})
	applyPolicy(t, builder.MakePolicy("approved-gangs").PodLabels(map[string]string{"app": "trainer"}).
		PreEnqueue("namespace-approved", "namespaceObject.metadata.?labels[?'gangs-approved'].orValue('') == 'true'", "namespace is not approved for gangs").Obj())
	ns := createNamespace(t, "held", nil)
	createGang(t, ns, "train", 4, "")
	pods := members(t, ns, "train", 4, nil, withLabels(map[string]string{"app": "trainer"}), withCPU("1"))
	held := "held by SchedulingPolicy approved-gangs, rule namespace-approved: namespace is not approved for gangs"
	for _, pod := range pods {
		waitPending(t, pod, reasonGated, held)
	}

	setNamespaceLabel(t, ns, "gangs-approved", "true")
	for _, pod := range pods {
		waitForNode(t, pod)
	}
}

// TestProfileRunsGangPlugins: with the gates on (the manager set them in
// this process), the shipped celsched profile runs kube-scheduler's gang
// and placement plugins, as the stock default profile does, beside the
// CEL plugins; CELPlacement generates the placements in
// TopologyPlacementGenerator's place.
func TestProfileRunsGangPlugins(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range cfg.Profiles[0].Plugins.MultiPoint.Enabled {
		got = append(got, p.Name)
	}
	for _, want := range []string{names.GangScheduling, names.TopologyPlacementGenerator, names.PodGroupPodsCount, filter.Name, placement.Name} {
		if !slices.Contains(got, want) {
			t.Errorf("profile %s runs %v, want %s among them", cfg.Profiles[0].SchedulerName, got, want)
		}
	}
	// CELPlacement runs TopologyPlacementGenerator itself: a profile may
	// run one PlacementGenerate plugin.
	var disabled []string
	for _, p := range cfg.Profiles[0].Plugins.PlacementGenerate.Disabled {
		disabled = append(disabled, p.Name)
	}
	if !slices.Contains(disabled, names.TopologyPlacementGenerator) {
		t.Errorf("placementGenerate disables %v, want %s", disabled, names.TopologyPlacementGenerator)
	}
}
