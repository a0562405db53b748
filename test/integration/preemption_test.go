package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	schedulerconfigfile "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/test/builder"
)

// TestPreemptionRules: a policy's victim rules decide whom its pods may
// preempt, through DefaultPreemption's own hook. A team-a pod of high
// priority cannot preempt team-b's pod (it stays pending, its condition
// and a PreemptionRefused event name the policy, the rule and the victim,
// and the victim is not touched) until a rule change lets it, which
// requeues it at once; it preempts team-a's own pod of lower priority; a
// system-cluster-critical pod preempts across tenants. With
// the policy in Audit, the victim is preempted and the event says what
// would have been protected.
func TestPreemptionRules(t *testing.T) {
	low, high := priorityClass(t, "celsched-test-low", 100), priorityClass(t, "celsched-test-high", 1000)
	tenant := map[string]string{"preempt-test": "true"}
	a := createNamespace(t, "preempt-a", nil)
	b := createNamespace(t, "preempt-b", nil)
	createNodes(t, nodeSpec{name: "preempt-1", cpu: "1"}, nodeSpec{name: "preempt-2", cpu: "1"})
	p := applyPolicy(t, builder.MakePolicy("own-tenant-preemption").PodLabels(tenant).
		Victim("own-tenant", "victim.metadata.namespace == pod.metadata.namespace", "another tenant's pod").Obj())
	waitPolicyReady(t, p.Name, metav1.ConditionTrue)
	time.Sleep(propagation)

	big := withRequests("800m", "100Mi")
	// Another tenant's pod: protected.
	other := createPod(t, b, "running", withLabels(tenant), big, onNode("preempt-1"), withPriority(low))
	expectNode(t, other, "preempt-1")
	urgent := createPod(t, a, "urgent", withLabels(tenant), big, onNode("preempt-1"), withPriority(high))
	protected := fmt.Sprintf("pod %s/running protected by SchedulingPolicy own-tenant-preemption, rule preemption.victims/own-tenant: another tenant's pod", b)
	waitPending(t, urgent, corev1.PodReasonUnschedulable, protected)
	waitEvents(t, urgent, "PreemptionRefused", protected)
	if terminating(t, other) {
		t.Errorf("pod %s/%s was preempted: another tenant's pod must be protected", other.Namespace, other.Name)
	}

	// A rule change releases the waiting preemptor at once (its rejecting
	// plugins, room and node selector, register no policy event).
	setVictimRule(t, p.Name, fmt.Sprintf("victim.metadata.namespace in [pod.metadata.namespace, %q]", b))
	waitPreempted(t, other)
	waitNominated(t, urgent, "preempt-1")

	// Its own pod: preempted.
	own := createPod(t, a, "own", withLabels(tenant), big, onNode("preempt-2"), withPriority(low))
	expectNode(t, own, "preempt-2")
	again := createPod(t, a, "again", withLabels(tenant), big, onNode("preempt-2"), withPriority(high))
	waitPreempted(t, own)
	waitNominated(t, again, "preempt-2")

	// A system-cluster-critical pod preempts across tenants, whatever the
	// rules.
	setVictimRule(t, p.Name, "victim.metadata.namespace == pod.metadata.namespace")
	time.Sleep(propagation)
	createNodes(t, nodeSpec{name: "preempt-4", cpu: "1"})
	tenantB := createPod(t, b, "running-4", withLabels(tenant), big, onNode("preempt-4"), withPriority(low))
	expectNode(t, tenantB, "preempt-4")
	critical := createPod(t, "kube-system", "critical-"+a, withLabels(tenant), big, onNode("preempt-4"), withPriority("system-cluster-critical"))
	waitPreempted(t, tenantB)
	waitNominated(t, critical, "preempt-4")

	// Audit: records what it would have protected, protects nothing.
	deleteObject(t, p)
	audited := applyPolicy(t, builder.MakePolicy("own-tenant-preemption-audit").PodLabels(tenant).Audit().
		Victim("own-tenant", "victim.metadata.namespace == pod.metadata.namespace", "another tenant's pod").Obj())
	waitPolicyReady(t, audited.Name, metav1.ConditionTrue)
	time.Sleep(propagation)
	c := createNamespace(t, "preempt-c", nil)
	createNodes(t, nodeSpec{name: "preempt-3", cpu: "1"})
	victim := createPod(t, b, "audited", withLabels(tenant), big, onNode("preempt-3"), withPriority(low))
	expectNode(t, victim, "preempt-3")
	preemptor := createPod(t, c, "preemptor", withLabels(tenant), big, onNode("preempt-3"), withPriority(high))
	waitPreempted(t, victim)
	waitEvents(t, preemptor, "PreemptionWouldProtect", fmt.Sprintf("Audit: pod %s/audited protected by SchedulingPolicy own-tenant-preemption-audit, rule preemption.victims/own-tenant: another tenant's pod", b))
}

// setVictimRule sets the expression of the policy's first victim rule.
func setVictimRule(t *testing.T, name, expression string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, current); err != nil {
			return err
		}
		current.Spec.Preemption.Victims[0].Expression = expression
		return k8sClient.Update(t.Context(), current)
	})
	if err != nil {
		t.Fatalf("updating SchedulingPolicy %s: %v", name, err)
	}
}

// priorityClass creates a PriorityClass and deletes it when the test ends.
func priorityClass(t *testing.T, name string, value int32) string {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if err := k8sClient.Create(t.Context(), pc); err != nil {
		t.Fatalf("creating PriorityClass %s: %v", name, err)
	}
	t.Cleanup(func() { deleteObject(t, pc) })
	return name
}

func withPriority(class string) podOption {
	return func(p *corev1.Pod) { p.Spec.PriorityClassName = class }
}

// terminating says whether the pod is being deleted (or is gone): with no
// kubelet, a preempted pod keeps its deletionTimestamp.
func terminating(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	got := &corev1.Pod{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(pod), got); err != nil {
		return client.IgnoreNotFound(err) == nil
	}
	return got.DeletionTimestamp != nil
}

// waitPreempted waits until the scheduler has deleted the pod.
func waitPreempted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return terminating(t, pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not preempted: %v", pod.Namespace, pod.Name, err)
	}
}

// waitNominated waits until the preemptor is nominated to the node.
func waitNominated(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	got := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		return got.Status.NominatedNodeName == node || got.Spec.NodeName == node, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not nominated to %s: %v; nominated %q, PodScheduled: %s", pod.Namespace, pod.Name, node, err, got.Status.NominatedNodeName, scheduledCondition(got))
	}
}

// TestPreemptionVerdictIsOne: on a generated cluster
// (builder.GeneratePreemption: full nodes, running victims of two
// priorities from tenants', batch and shared namespaces, one preemptor of
// a tenant pinned to each node, and the sample's tenant victim rules), the
// dry run's preemption (what celsched eval reports:
// verdict.Evaluator.Preempt, on the cluster read just before the
// preemptor is created) and the live scheduler's agree on every
// preemptor: nominated to the node eval names, with exactly the victims
// eval names preempted there; or pending with the first victim eval says
// the rules protected in its condition, and no pod of its node preempted.
// -verdict.seed draws another cluster.
func TestPreemptionVerdictIsOne(t *testing.T) {
	ctx := t.Context()
	cfg, err := schedulerconfigfile.Load(filepath.Join("testdata", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("pv%d-%d", *verdictSeed, verdictRuns.Add(1))
	g := builder.GeneratePreemption(builder.GenerateOptions{Seed: *verdictSeed, Nodes: 8, Prefix: prefix, RunLabel: verdictRunLabel, SchedulerName: schedulerName})
	priorities := map[string]int32{}
	for _, pc := range g.PriorityClasses {
		priorities[priorityClass(t, pc.Name, pc.Value)] = pc.Value
	}
	for _, ns := range g.Namespaces {
		ns := ns.DeepCopy()
		if err := k8sClient.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, ns) })
	}
	for _, n := range g.Nodes {
		createNode(t, n.DeepCopy())
	}
	policy := applyPolicy(t, g.Policy.DeepCopy())
	waitPolicyReady(t, policy.Name, metav1.ConditionTrue)
	time.Sleep(propagation)
	onNode := map[string][]*corev1.Pod{}
	for _, v := range g.Victims {
		pod := v.DeepCopy()
		if err := k8sClient.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, pod) })
		node := v.Spec.NodeSelector[corev1.LabelHostname]
		expectNode(t, pod, node)
		onNode[node] = append(onNode[node], pod)
	}

	outcomes := map[string]int{}
	for _, p := range g.Preemptors {
		node := p.Spec.NodeSelector[corev1.LabelHostname]
		lc := readCluster(t)
		s, err := dryrun.NewCluster(lc.namespaces, lc.nodes, lc.bound(), nil).Scheduler(ctx, lc.policies, lc.params, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The pod as the API server admits it: its priority resolved.
		evaluated := p.DeepCopy()
		priority := priorities[p.Spec.PriorityClassName]
		evaluated.Spec.Priority = &priority
		res, eval, err := s.Preempt(ctx, evaluated)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Feasible) > 0 || eval == nil {
			t.Fatalf("pod %s: eval finds it a node (%v) or evaluates no preemption: the generated node %s is not full", podKey(p), res.Feasible, node)
		}
		pod := p.DeepCopy()
		if err := k8sClient.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, pod) })
		if eval.Node != "" {
			outcomes["preempts"]++
			waitNominated(t, pod, eval.Node)
			for _, v := range onNode[node] {
				if slices.Contains(eval.Victims, podKey(v)) {
					waitPreempted(t, v)
				}
			}
		} else if len(eval.Protected) > 0 {
			outcomes["protected"]++
			waitPending(t, pod, corev1.PodReasonUnschedulable, "victims protected: "+eval.Protected[0])
		} else {
			outcomes["none"]++
			waitPending(t, pod, corev1.PodReasonUnschedulable)
		}
		// Nothing but eval's victims was preempted on the node (the
		// scheduler deletes a preemptor's victims in one step).
		for _, v := range onNode[node] {
			if terminating(t, v) != slices.Contains(eval.Victims, podKey(v)) {
				t.Errorf("pod %s: eval says preemption on %q evicts %v (protecting %v); the live scheduler preempted %s: %v",
					podKey(p), eval.Node, eval.Victims, eval.Protected, podKey(v), terminating(t, v))
			}
		}
	}
	t.Logf("seed %d: %d preemptors: %d preempt, %d find every victim protected, %d neither", *verdictSeed, len(g.Preemptors), outcomes["preempts"], outcomes["protected"], outcomes["none"])
}

// TestPreemptionImportance: spec.preemption.importance orders victims of
// equal priority: on a full node with two such pods, a preemptor that
// needs one pod's room evicts the one its policy values less, whichever
// was created first (without importance, kube-scheduler's order of two
// pods with no start time is the node's list order).
func TestPreemptionImportance(t *testing.T) {
	low, high := priorityClass(t, "celsched-importance-low", 100), priorityClass(t, "celsched-importance-high", 1000)
	ns := createNamespace(t, "importance", nil)
	createNodes(t, nodeSpec{name: "importance-1", cpu: "1"}, nodeSpec{name: "importance-2", cpu: "1"})
	p := applyPolicy(t, builder.MakePolicy("keep-the-database").NamespaceLabels(map[string]string{corev1.LabelMetadataName: ns}).
		Importance("pod.metadata.?labels[?'app'].orValue('') == 'database' ? 100 : 0").Obj())
	waitPolicyReady(t, p.Name, metav1.ConditionTrue)
	time.Sleep(propagation)

	half := withRequests("450m", "100Mi")
	for i, node := range []string{"importance-1", "importance-2"} {
		apps := []string{"database", "cache"}
		if i == 1 {
			apps = []string{"cache", "database"} // the other order of creation
		}
		victims := map[string]*corev1.Pod{}
		for _, app := range apps {
			pod := createPod(t, ns, app+"-"+node, withLabels(map[string]string{"app": app}), half, onNode(node), withPriority(low))
			expectNode(t, pod, node)
			victims[app] = pod
		}
		preemptor := createPod(t, ns, "urgent-"+node, withRequests("500m", "100Mi"), onNode(node), withPriority(high))
		waitPreempted(t, victims["cache"])
		waitNominated(t, preemptor, node)
		if terminating(t, victims["database"]) {
			t.Errorf("node %s: the database pod was preempted; its policy values it over the cache pod", node)
		}
	}
}
