package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/test/builder"
)

// The scheduling tests run one after another (policies and nodes are
// cluster-wide); each creates its nodes, namespaces and policies and
// deletes them when it ends.

const (
	reasonUnschedulable = corev1.PodReasonUnschedulable
	reasonGated         = corev1.PodReasonSchedulingGated
)

func gpus(n string) corev1.ResourceList {
	return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}
}

func TestSampleMLOnGPUNodes(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "gpu-1", labels: map[string]string{"nvidia.com/gpu.present": "true"}, extra: gpus("1")},
		nodeSpec{name: "unlabelled-gpu", extra: gpus("4")},
	)
	applyPolicy(t, loadSample(t, "ml-on-gpu-nodes"))
	ns := createNamespace(t, "ml", map[string]string{"team": "ml"})

	// Held before the queue until the namespace is approved.
	trainer := createPod(t, ns, "trainer", withLimit("nvidia.com/gpu", "1"))
	msg := "held by SchedulingPolicy ml-on-gpu-nodes, rule namespace-approved: namespace is not approved for GPU workloads (label it gpu-approved=true)"
	if got := waitPending(t, trainer, reasonGated, msg); got != msg {
		t.Errorf("condition message %q, want %q", got, msg)
	}
	waitEvents(t, trainer, reasonGated, msg)
	// A pod without a GPU is not matched, and schedules anywhere.
	createPod(t, ns, "no-gpu")

	setNamespaceLabel(t, ns, "gpu-approved", "true")
	expectNode(t, trainer, "gpu-1") // the filter keeps it off the unlabelled GPU node

	// The only labelled GPU is taken: the filter and NodeResourcesFit
	// both reject, each with its own reason.
	second := createPod(t, ns, "second", withLimit("nvidia.com/gpu", "1"))
	waitPending(t, second, reasonUnschedulable,
		"0/2 nodes are available",
		"1 node(s) rejected by SchedulingPolicy ml-on-gpu-nodes, rule gpu-node: node has no GPU",
		"1 Insufficient nvidia.com/gpu")
}

func TestSampleBatchPrefersSpot(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "on-demand"},
		nodeSpec{name: "spot", labels: map[string]string{"karpenter.sh/capacity-type": "spot"}},
	)
	applyPolicy(t, loadSample(t, "batch-prefers-spot"))
	ns := createNamespace(t, "batch", nil)
	for _, name := range []string{"job-1", "job-2", "job-3"} {
		pod := createPod(t, ns, name, withLabels(map[string]string{"workload-class": "batch"}))
		expectNode(t, pod, "spot")
	}
}

func TestSamplePaymentsDedicatedPool(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "shared", cpu: "16"},
		nodeSpec{name: "payments-1", labels: map[string]string{"celsched.io/pool": "payments"}},
		nodeSpec{name: "batch-1", labels: map[string]string{"celsched.io/pool": "batch"}, cpu: "16"},
	)
	applyPolicy(t, loadSample(t, "payments-dedicated-pool"))
	ns := createNamespace(t, "payments", map[string]string{"team": "payments"})
	api := createPod(t, ns, "api")
	expectNode(t, api, "payments-1")

	pinned := createPod(t, ns, "pinned", onNode("batch-1"))
	waitPending(t, pinned, reasonUnschedulable,
		"1 node(s) rejected by SchedulingPolicy payments-dedicated-pool, rule payments-pool: node is in pool batch, payments runs only on pool payments",
		"2 node(s) didn't match Pod's node affinity/selector")

	// Deleting the policy requeues the pod it rejected.
	deleteObject(t, loadSample(t, "payments-dedicated-pool"))
	expectNode(t, pinned, "batch-1")
}

func TestSampleAvoidMaintenance(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "maint", cpu: "32",
			labels:      map[string]string{"celsched.io/maintenance": "true"},
			annotations: map[string]string{"celsched.io/maintenance-reason": "disk replacement"}},
		nodeSpec{name: "healthy"},
	)
	applyPolicy(t, loadSample(t, "avoid-maintenance"))
	ns := createNamespace(t, "web", nil)
	expectNode(t, createPod(t, ns, "web-1"), "healthy")

	pinned := createPod(t, ns, "pinned", onNode("maint"))
	waitPending(t, pinned, reasonUnschedulable,
		"1 node(s) rejected by SchedulingPolicy avoid-maintenance, rule not-in-maintenance: node is in maintenance: disk replacement")

	// The maintenance ends: the node update requeues the pod.
	node := &corev1.Node{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: "maint"}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	delete(node.Labels, "celsched.io/maintenance")
	if err := k8sClient.Patch(t.Context(), node, patch); err != nil {
		t.Fatal(err)
	}
	expectNode(t, pinned, "maint")
}

func TestSampleZonePreference(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "zone-a-1", labels: map[string]string{corev1.LabelTopologyZone: "a"}},
		nodeSpec{name: "zone-b-1", labels: map[string]string{corev1.LabelTopologyZone: "b"}},
		nodeSpec{name: "zone-b-2", labels: map[string]string{corev1.LabelTopologyZone: "b"}},
	)
	applyPolicy(t, loadSample(t, "zone-preference"))
	ns := createNamespace(t, "shop", map[string]string{"celsched.io/preferred-zone": "b"})
	// Home zone first; within it, the app spreads over the nodes.
	first := waitForNode(t, createPod(t, ns, "web-1", withLabels(map[string]string{"app": "web"})))
	second := waitForNode(t, createPod(t, ns, "web-2", withLabels(map[string]string{"app": "web"})))
	got := []string{first, second}
	slices.Sort(got)
	if want := []string{"zone-b-1", "zone-b-2"}; !slices.Equal(got, want) {
		t.Errorf("pods on %v, want one on each of %v", got, want)
	}
}

func TestSampleRequireCostCenter(t *testing.T) {
	createNodes(t, nodeSpec{name: "node-1"})
	applyPolicy(t, loadSample(t, "require-cost-center"))
	ns := createNamespace(t, "sandbox", nil)
	pod := createPod(t, ns, "test")
	msg := "held by SchedulingPolicy require-cost-center, rule namespace-has-cost-center: namespace has no cost-center label"
	waitPending(t, pod, reasonGated, msg)
	start := time.Now()
	setNamespaceLabel(t, ns, "cost-center", "cc-42")
	expectNode(t, pod, "node-1")
	t.Logf("namespace labelled -> held pod bound: %v", time.Since(start))

	// A policy change releases held pods too: here, switching to Audit.
	other := createNamespace(t, "sandbox", nil)
	held := createPod(t, other, "held")
	waitPending(t, held, reasonGated, msg)
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: "require-cost-center"}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Enforcement = schedv1alpha1.Audit
	if err := k8sClient.Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	expectNode(t, held, "node-1")
	t.Logf("policy switched to Audit -> held pod bound: %v", time.Since(start))
	// and the policy, in Audit, says what it would have done.
	waitEvents(t, held, audit.ReasonWouldReject,
		"SchedulingPolicy require-cost-center (Audit), enforced, would have held it (rule preEnqueue/namespace-has-cost-center: namespace has no cost-center label)")
}

func TestSampleMemoryHeadroomAuditChangesNothing(t *testing.T) {
	createNodes(t, nodeSpec{name: "busy", memory: "10Gi"}, nodeSpec{name: "idle", memory: "10Gi"})
	applyPolicy(t, loadSample(t, "memory-headroom-audit"))
	ns := createNamespace(t, "audit", map[string]string{"cost-center": "x"})
	// 9Gi of 10Gi requested on busy: the audit rule is false there.
	createPod(t, ns, "hog", boundTo("busy"), withRequests("100m", "9Gi"))
	pod := createPod(t, ns, "pinned", onNode("busy"), withRequests("100m", "512Mi"))
	expectNode(t, pod, "busy")
}

func TestPolicyUpdateRequeuesAndTakesEffect(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "red", labels: map[string]string{"color": "red"}},
		nodeSpec{name: "blue", labels: map[string]string{"color": "blue"}},
	)
	p := applyPolicy(t, builder.MakePolicy("only-red").FilterRules(schedv1alpha1.Rule{
		Name: "color", Expression: "node.metadata.labels[?'color'].orValue('') == 'red'", Message: "only red nodes",
	}).Obj())
	ns := createNamespace(t, "colors", nil)
	expectNode(t, createPod(t, ns, "first"), "red")
	blueOnly := createPod(t, ns, "blue-only", onNode("blue"))
	waitPending(t, blueOnly, reasonUnschedulable, "rejected by SchedulingPolicy only-red, rule color: only red nodes")

	// The update requeues the rejected pod and applies to the next one.
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Filters[0].Expression = "node.metadata.labels[?'color'].orValue('') == 'blue'"
	p.Spec.Filters[0].Message = "only blue nodes"
	if err := k8sClient.Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	updated := time.Now()
	// A pod created right after the update may be scheduled before the
	// scheduler's watch delivers the policy (separate watches are not
	// ordered): the new version applies once Ready reports its generation,
	// as the status controller compiles into the scheduler's registry.
	waitPolicyReady(t, p.Name, metav1.ConditionTrue)
	next := createPod(t, ns, "next")
	expectNode(t, blueOnly, "blue")
	t.Logf("policy update -> rejected pod bound: %v", time.Since(updated))
	expectNode(t, next, "blue")
	t.Logf("policy update -> next pod bound: %v", time.Since(updated))
}

func TestFailurePolicy(t *testing.T) {
	createNodes(t, nodeSpec{name: "node-1"})
	ns := createNamespace(t, "failures", nil)
	// A runtime error: the label is missing on every node.
	broken := schedv1alpha1.Rule{Name: "needs-rack", Expression: "node.metadata.labels['rack'] == 'r1'"}

	t.Run("Fail rejects with the error", func(t *testing.T) {
		applyPolicy(t, builder.MakePolicy("runtime-error-fail").FilterRules(broken).Obj())
		pod := createPod(t, ns, "fail")
		waitPending(t, pod, reasonUnschedulable,
			"1 node(s) rejected: SchedulingPolicy runtime-error-fail, rule needs-rack: spec.filters[0].expression: no such key: rack (failurePolicy Fail)")
	})
	t.Run("Ignore passes", func(t *testing.T) {
		p := builder.MakePolicy("runtime-error-ignore").FilterRules(broken).Obj()
		p.Spec.FailurePolicy = schedv1alpha1.Ignore
		applyPolicy(t, p)
		expectNode(t, createPod(t, ns, "ignore"), "node-1")
	})
	t.Run("a compile error with Fail rejects the pod and is in the status", func(t *testing.T) {
		// The webhook refuses it; stored before the webhook was installed.
		withoutWebhook(t)
		p := builder.MakePolicy("compile-error").FilterRules(schedv1alpha1.Rule{Name: "typo", Expression: "node.metadata.lables['a'] == 'b'"}).Obj()
		if err := k8sClient.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, p) })
		got := waitPolicyReady(t, p.Name, "False")
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		if c.Reason != schedv1alpha1.ReasonCompileError || !strings.Contains(c.Message, "spec.filters[0].expression") || !strings.Contains(c.Message, "undefined field 'lables'") {
			t.Errorf("Ready condition %+v, want CompileError naming spec.filters[0].expression and the field", c)
		}
		pod := createPod(t, ns, "compile-error")
		waitPending(t, pod, reasonUnschedulable,
			"SchedulingPolicy compile-error does not compile (failurePolicy Fail): spec.filters[0].expression:", "undefined field 'lables'")
	})
	t.Run("Audit changes nothing even when it fails closed", func(t *testing.T) {
		p := builder.MakePolicy("runtime-error-audit").FilterRules(broken).Obj()
		p.Spec.Enforcement = schedv1alpha1.Audit
		applyPolicy(t, p)
		expectNode(t, createPod(t, ns, "audit"), "node-1")
	})
}

// TestRejectionDoesNotPreempt: evicting pods cannot make a node pass a
// filter that does not read nodeInfo, so preemption leaves the node alone.
func TestRejectionDoesNotPreempt(t *testing.T) {
	createNodes(t, nodeSpec{name: "only", cpu: "2", labels: map[string]string{"tier": "batch"}})
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "celsched-test-high"}, Value: 1000}
	if err := k8sClient.Create(t.Context(), high); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, high) })
	ns := createNamespace(t, "preempt", nil)
	victim := createPod(t, ns, "low-priority", boundTo("only"), withRequests("1500m", "1Gi"))
	applyPolicy(t, builder.MakePolicy("no-batch-tier").FilterRules(schedv1alpha1.Rule{
		Name: "tier", Expression: "node.metadata.labels[?'tier'].orValue('') != 'batch'", Message: "batch tier",
	}).Obj())
	important := createPod(t, ns, "high-priority", withRequests("1", "1Gi"), func(p *corev1.Pod) {
		p.Spec.PriorityClassName = high.Name
	})
	// The policy rejects the node before NodeResourcesFit counts its CPU
	// (CELFilter runs right after NodeAffinity): the node is unresolvable,
	// and preemption does not try it.
	waitPending(t, important, reasonUnschedulable,
		"0/1 nodes are available: 1 node(s) rejected by SchedulingPolicy no-batch-tier, rule tier: batch tier.",
		"preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
	// Nor when the policy is the only reason.
	small := createPod(t, ns, "high-priority-small", withRequests("100m", "128Mi"), func(p *corev1.Pod) {
		p.Spec.PriorityClassName = high.Name
	})
	waitPending(t, small, reasonUnschedulable,
		"0/1 nodes are available: 1 node(s) rejected by SchedulingPolicy no-batch-tier, rule tier: batch tier.",
		"preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
	got := &corev1.Pod{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(victim), got); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the low-priority pod was preempted: %v, deletionTimestamp %v", err, got.DeletionTimestamp)
	}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(important), got); err != nil || got.Status.NominatedNodeName != "" {
		t.Errorf("the pod was nominated to %q (%v)", got.Status.NominatedNodeName, err)
	}
}

func TestBuiltinPluginsStillApply(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "small", cpu: "2"},
		nodeSpec{name: "tainted", cpu: "64", taints: []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}},
	)
	applyPolicy(t, builder.MakePolicy("allow-all").FilterRules(schedv1alpha1.Rule{Name: "yes", Expression: "true"}).Obj())
	ns := createNamespace(t, "builtins", nil)

	big := createPod(t, ns, "big", withRequests("8", "1Gi"))
	waitPending(t, big, reasonUnschedulable, "0/2 nodes are available", "1 Insufficient cpu", "1 node(s) had untolerated taint")

	other := createPod(t, ns, "other-scheduler", withScheduler("default-scheduler"))
	expectNode(t, createPod(t, ns, "fits"), "small")
	// Scheduled after `other` was created: had celsched picked it up, it
	// would be bound or have a condition by now.
	got := &corev1.Pod{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" || podCondition(got) != nil {
		t.Errorf("a pod of another scheduler was touched: node %q, condition %s", got.Spec.NodeName, scheduledCondition(got))
	}
}

// TestIgnoreSkipsOnlyTheFailingRule: with failurePolicy Ignore, a rule that
// fails (needs-tier: the node has no tier label) is skipped and the rule
// after it (no-maintenance) still rejects the node, live and in celsched
// eval, with the same message.
func TestIgnoreSkipsOnlyTheFailingRule(t *testing.T) {
	createNodes(t, nodeSpec{name: "ignore-maint", labels: map[string]string{"maintenance": "true"}})
	ns := createNamespace(t, "ignore", nil)
	p := builder.MakePolicy("ignore-error-then-false").FilterRules(schedv1alpha1.Rule{Name: "needs-tier", Expression: "node.metadata.labels['tier'] != ''"},
		schedv1alpha1.Rule{Name: "no-maintenance", Expression: "!('maintenance' in node.metadata.labels)", Message: "node is in maintenance"}).Obj()
	p.Spec.FailurePolicy = schedv1alpha1.Ignore
	p.Spec.Match = &schedv1alpha1.MatchResources{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ignore-test": "yes"}}}
	applyPolicy(t, p)
	pod := createPod(t, ns, "pod", withLabels(map[string]string{"ignore-test": "yes"}), onNode("ignore-maint"))
	want := "node(s) rejected by SchedulingPolicy ignore-error-then-false, rule no-maintenance: node is in maintenance"
	live := waitPending(t, pod, reasonUnschedulable, "1 "+want)

	node := &corev1.Node{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: "ignore-maint"}, node); err != nil {
		t.Fatal(err)
	}
	namespace := &corev1.Namespace{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: ns}, namespace); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	eval := cliReport(t, "eval", "-o", "json", "-f", writeObjects(t, dir, "policy", p), "--pod", writeObjects(t, dir, "pod", pod),
		"--nodes", writeObjects(t, dir, "nodes", node), "--namespace", writeObjects(t, dir, "namespaces", namespace))
	got := eval.Node("ignore-maint")
	if got == nil || got.RejectedBy == nil || got.RejectedBy.Message != want {
		t.Fatalf("celsched eval on ignore-maint: %+v, want rejected with %q", got, want)
	}
	if !strings.Contains(live, got.RejectedBy.Message) {
		t.Errorf("live condition %q does not carry eval's message %q", live, got.RejectedBy.Message)
	}
}
