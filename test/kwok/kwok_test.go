package kwok_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/test/kwok"
)

// waitFor polls cond every 100ms until it holds, or fails the test after
// timeout with what it last said.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (ok bool, state string, err error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, state, err := cond(ctx)
		last = state
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

// createNode creates a KWOK node, deleted when the test ends, and waits
// until KWOK makes it Ready.
func createNode(t *testing.T, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	node := kwok.Node(name, labels)
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := k8sClient.Delete(context.Background(), node); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	return waitNode(t, name, "Ready", kwok.Ready)
}

// waitNode waits until ok holds for node name, and returns it.
func waitNode(t *testing.T, name, what string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	got := &corev1.Node{}
	waitFor(t, fmt.Sprintf("node %s %s", name, what), func(ctx context.Context) (bool, string, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, "", err
		}
		return ok(got), fmt.Sprintf("conditions %v", got.Status.Conditions), nil
	})
	return got
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// createNamespace creates a namespace named after the test.
func createNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := k8sClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// waitRunning waits until pod is Running, and returns it.
func waitRunning(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	waitFor(t, fmt.Sprintf("pod %s/%s Running", pod.Namespace, pod.Name), func(ctx context.Context) (bool, string, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, "", err
		}
		return got.Status.Phase == corev1.PodRunning, fmt.Sprintf("node %q, phase %q", got.Spec.NodeName, got.Status.Phase), nil
	})
	return got
}

func container() corev1.Container {
	return corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10"}
}

// TestNodeReadyWithLease: KWOK makes a node it manages Ready, with the
// addresses and node info a kubelet writes, and renews its Lease; a node
// without the annotation it leaves alone.
func TestNodeReadyWithLease(t *testing.T) {
	ctx := context.Background()
	node := createNode(t, "kwok-ready", nil)
	if got := node.Status.Allocatable.Cpu().String(); got != "32" {
		t.Errorf("allocatable CPU %s, want the 32 of kwok.Node (KWOK keeps it)", got)
	}
	if len(node.Status.Addresses) == 0 || node.Status.NodeInfo.KubeletVersion == "" {
		t.Errorf("KWOK wrote no addresses or node info: %+v, %+v", node.Status.Addresses, node.Status.NodeInfo)
	}

	// The heartbeat: the node's Lease, renewed.
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node.Name}
	var first time.Time
	waitFor(t, "node kwok-ready's Lease", func(ctx context.Context) (bool, string, error) {
		if err := k8sClient.Get(ctx, key, lease); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		if lease.Spec.RenewTime == nil {
			return false, "no renewTime", nil
		}
		first = lease.Spec.RenewTime.Time
		// KWOK holds it under its own identity.
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "", "no holder", nil
	})
	waitFor(t, "node kwok-ready's Lease renewed", func(ctx context.Context) (bool, string, error) {
		if err := k8sClient.Get(ctx, key, lease); err != nil {
			return false, "", err
		}
		return lease.Spec.RenewTime.After(first), fmt.Sprintf("renewTime %v (first %v)", lease.Spec.RenewTime, first), nil
	})

	// A node without the annotation: no conditions, ever.
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-kwok"}}
	if err := k8sClient.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), plain) })
	// KWOK has had the time it takes to make a managed node Ready.
	createNode(t, "kwok-ready-after", nil)
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
		t.Fatal(err)
	}
	if len(plain.Status.Conditions) != 0 {
		t.Errorf("KWOK wrote conditions on a node without %s: %v", kwok.ManagedAnnotation, plain.Status.Conditions)
	}
}

// createBoundPod creates a pod bound to node, as if scheduled.
func createBoundPod(t *testing.T, ns, name, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{container()}},
	}
	if err := k8sClient.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// TestPodBoundGoesRunning: a pod bound to a KWOK node goes Running, with
// an IP and its container ready; one bound to a node KWOK does not manage
// stays Pending.
func TestPodBoundGoesRunning(t *testing.T) {
	ctx := context.Background()
	createNode(t, "kwok-run", nil)
	ns := createNamespace(t, "running")
	got := waitRunning(t, createBoundPod(t, ns, "bound", "kwok-run"))
	if got.Status.PodIP == "" || len(got.Status.ContainerStatuses) != 1 || !got.Status.ContainerStatuses[0].Ready {
		t.Errorf("running pod: IP %q, container statuses %+v; want an IP and the container ready", got.Status.PodIP, got.Status.ContainerStatuses)
	}

	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-kwok-run"}}
	if err := k8sClient.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), plain) })
	elsewhere := createBoundPod(t, ns, "elsewhere", plain.Name)
	// KWOK has had the time it takes to run a pod on its node.
	waitRunning(t, createBoundPod(t, ns, "bound-after", "kwok-run"))
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(elsewhere), elsewhere); err != nil {
		t.Fatal(err)
	}
	if elsewhere.Status.Phase == corev1.PodRunning {
		t.Errorf("a pod on a node KWOK does not manage went Running")
	}
}

// TestGracefulDeletionCompletes: a running pod deleted with a grace period
// (what an eviction does) disappears: KWOK deletes it, as a kubelet would
// once its containers stopped.
func TestGracefulDeletionCompletes(t *testing.T) {
	ctx := context.Background()
	createNode(t, "kwok-delete", nil)
	ns := createNamespace(t, "deleting")
	pod := waitRunning(t, createBoundPod(t, ns, "doomed", "kwok-delete"))
	if err := k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod)
}

// waitGone waits until pod (this very pod, by UID) no longer exists.
func waitGone(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pod %s/%s deleted", pod.Namespace, pod.Name), func(ctx context.Context) (bool, string, error) {
		got := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return got.UID != pod.UID, fmt.Sprintf("phase %s, deletionTimestamp %v", got.Status.Phase, got.DeletionTimestamp), nil
	})
}

// TestNodeNotReady: kwok.SetNotReady makes a node NotReady, and Ready
// again.
func TestNodeNotReady(t *testing.T) {
	ctx := context.Background()
	createNode(t, "kwok-sick", nil)
	if err := kwok.SetNotReady(ctx, k8sClient, "kwok-sick", true); err != nil {
		t.Fatal(err)
	}
	node := waitNode(t, "kwok-sick", "NotReady", func(n *corev1.Node) bool {
		c := readyCondition(n)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	if c := readyCondition(node); c.Reason != "nodeFailed" {
		t.Errorf("Ready condition %+v, want reason nodeFailed (KWOK's node-not-ready stage)", c)
	}
	// It stays NotReady: KWOK's node-initialize, which makes nodes Ready,
	// does not win over the label.
	time.Sleep(5 * time.Second)
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		t.Fatal(err)
	}
	if kwok.Ready(node) {
		t.Errorf("node kwok-sick is Ready again while labelled %s", kwok.NotReadyLabel)
	}
	if err := kwok.SetNotReady(ctx, k8sClient, "kwok-sick", false); err != nil {
		t.Fatal(err)
	}
	waitNode(t, "kwok-sick", "Ready again", kwok.Ready)
}
