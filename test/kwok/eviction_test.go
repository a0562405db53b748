package kwok_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/kubecontrollers"
	"github.com/celsched/celsched/test/testenv"
)

// TestEvictionReplacedOnKWOKNode: with KWOK, kube-controller-manager's
// ReplicaSet and disruption controllers and the celsched manager, an
// eviction (policy/v1 Eviction, under a PodDisruptionBudget) of a running
// pod of a ReplicaSet completes: the pod disappears, and the ReplicaSet's
// replacement is placed by celsched on a node its policy allows, and goes
// Running.
func TestEvictionReplacedOnKWOKNode(t *testing.T) {
	ctx := context.Background()
	stopControllers, err := kubecontrollers.Start(ctx, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopControllers)
	runManager(t)

	// Two nodes in pool allowed, one in pool other: the policy keeps the
	// pods off the third.
	for _, n := range []struct{ name, pool string }{{"kwok-evict-a1", "allowed"}, {"kwok-evict-a2", "allowed"}, {"kwok-evict-o1", "other"}} {
		createNode(t, n.name, map[string]string{"pool": n.pool})
	}
	policy := builder.MakePolicy("kwok-allowed-pool").NamespaceLabels(map[string]string{"kwok-test": "eviction"}).
		Filter("pool", "node.metadata.?labels[?'pool'].orValue('') == 'allowed'").Obj()
	if err := k8sClient.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), policy) })
	waitFor(t, "policy kwok-allowed-pool Ready", func(ctx context.Context) (bool, string, error) {
		got := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == got.Generation, fmt.Sprintf("%+v", got.Status.Conditions), nil
	})

	ns := "eviction"
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kwok-test": "eviction"}}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{container()},
					TerminationGracePeriodSeconds: ptr.To[int64](30)},
			},
		},
	}
	if err := k8sClient.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if err := k8sClient.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	before := waitReplicaSetRunning(t, ns, labels, 3, nil)
	// The disruption controller's view, which the Eviction API reads.
	waitFor(t, "PDB web allowing one disruption", func(ctx context.Context) (bool, string, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
			return false, "", err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 1, fmt.Sprintf("%+v", pdb.Status), nil
	})

	victim := before[0]
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim.Name}}
	if err := clientset.PolicyV1().Evictions(ns).Evict(ctx, eviction); err != nil {
		t.Fatalf("evicting %s/%s: %v", ns, victim.Name, err)
	}
	waitGone(t, victim)
	after := waitReplicaSetRunning(t, ns, labels, 3, func(p *corev1.Pod) bool { return p.UID != victim.UID })
	var replacement *corev1.Pod
	for _, p := range after {
		if !slices.ContainsFunc(before, func(b *corev1.Pod) bool { return b.UID == p.UID }) {
			replacement = p
		}
	}
	if replacement == nil {
		t.Fatalf("no replacement among %v (before: %v)", podNames(after), podNames(before))
	}
	// Bound by celsched: the only scheduler of this control plane, whose
	// binding the API server records as PodScheduled.
	if !strings.HasPrefix(replacement.Spec.NodeName, "kwok-evict-a") {
		t.Errorf("replacement %s on node %q, want a node of pool allowed", replacement.Name, replacement.Spec.NodeName)
	}
	if c := podCondition(replacement, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("replacement %s: PodScheduled %+v, want True", replacement.Name, c)
	}
}

// runManager runs the celsched manager in-process (as the cluster's
// admin) until the test ends.
func runManager(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const namespace = "celsched-system"
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	opts := app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"}
	testenv.SelfSignedWebhook(testEnv, &opts, namespace)
	stop, err := testenv.RunManager(ctx, testConfig, k8sClient, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
}

// waitReplicaSetRunning waits until the namespace has want pods of the
// selector labels, every one Running, not terminating and passing ok
// (when given), and returns them sorted by name. Every one must be bound
// to a node of pool allowed (the policy's).
func waitReplicaSetRunning(t *testing.T, ns string, labels map[string]string, want int, ok func(*corev1.Pod) bool) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	waitFor(t, fmt.Sprintf("%d pods of %v Running in %s", want, labels, ns), func(ctx context.Context) (bool, string, error) {
		list := &corev1.PodList{}
		if err := k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, "", err
		}
		out = out[:0]
		var state []string
		for i := range list.Items {
			p := &list.Items[i]
			state = append(state, fmt.Sprintf("%s on %q %s deleting=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil))
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && (ok == nil || ok(p)) {
				out = append(out, p)
			}
		}
		return len(out) == want && len(list.Items) == want, strings.Join(state, "; "), nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, p := range out {
		if !strings.HasPrefix(p.Spec.NodeName, "kwok-evict-a") {
			t.Errorf("pod %s on node %q, want a node of pool allowed", p.Name, p.Spec.NodeName)
		}
	}
	return out
}

func podCondition(pod *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == typ {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
