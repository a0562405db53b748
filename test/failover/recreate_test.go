package failover

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// recreateCycles deletes and recreates of the policy "recreate".
	recreateCycles = 50
	// Per cycle: pods pending under the old rule, and pods created once
	// the new policy is Ready.
	recreatePending = 3
	recreateAfter   = 4
)

// TestRecreatedPolicyTakesEffect: a policy deleted and at once created
// again under the same name (a new UID, a different rule), while pods it
// selects are pending, becomes Ready, and the pods created after that
// follow the new rule. The rule alternates between keeping the pods out of
// zone a and out of zone b (no-zone-c keeps them out of c): the pending
// pods select the zone the old rule forbids, which the new one allows.
func TestRecreatedPolicyTakesEffect(t *testing.T) {
	m := startManager(t, "recreate", leaderElection{})
	m.waitReady(t)
	ns := createNamespace(t, "recreate")
	selector := map[string]string{"celsched.test/recreate": "true"}

	policy := zonePolicy("recreate", selector, "a")
	if err := k8sClient.Create(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := k8sClient.Delete(context.WithoutCancel(t.Context()), policy)
		if client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting policy %s: %v", policy.Name, err)
		}
	})
	waitPolicyReady(t, policy)

	forbidden := "a" // by the policy in force
	for cycle := range recreateCycles {
		allowed := map[string]string{"a": "b", "b": "a"}[forbidden]
		var pods []*corev1.Pod
		for i := range recreatePending {
			pod := newPod(ns, fmt.Sprintf("c%02d-pending-%d", cycle, i), selector)
			pod.Spec.NodeSelector = map[string]string{zoneLabel: forbidden}
			if err := k8sClient.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod)
		}
		for _, pod := range pods {
			waitUnschedulable(t, pod)
		}

		// The new rule forbids the zone the old one allowed.
		if err := k8sClient.Delete(t.Context(), policy); err != nil {
			t.Fatalf("cycle %d: deleting policy %s: %v", cycle, policy.Name, err)
		}
		policy = zonePolicy(policy.Name, selector, allowed)
		if err := k8sClient.Create(t.Context(), policy); err != nil {
			t.Fatalf("cycle %d: recreating policy %s: %v", cycle, policy.Name, err)
		}
		waitPolicyReady(t, policy)

		for i := range recreateAfter {
			pod := newPod(ns, fmt.Sprintf("c%02d-after-%d", cycle, i), selector)
			if err := k8sClient.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod)
		}
		// Every pod, pending before or created after, may only go where the
		// old rule forbade.
		for _, pod := range pods {
			if node := waitBound(t, pod); zoneOf[node] != forbidden {
				t.Errorf("cycle %d: pod %s was bound to %s in zone %s; policy %s (UID %s) allows only zone %s",
					cycle, pod.Name, node, zoneOf[node], policy.Name, policy.UID, forbidden)
			}
		}
		forbidden = allowed
	}
}

// waitUnschedulable waits until the scheduler has tried the pod and found
// no node for it.
func waitUnschedulable(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	got := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		if got.Spec.NodeName != "" {
			return false, fmt.Errorf("bound to %s", got.Spec.NodeName)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s did not become unschedulable: %v; %s", pod.Name, err, podConditions(t, pod.Namespace, []string{pod.Name}))
	}
}

// waitBound waits until the pod is bound and returns its node.
func waitBound(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	got := &corev1.Pod{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		return got.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s was not bound: %v; %s", pod.Name, err, podConditions(t, pod.Namespace, []string{pod.Name}))
	}
	return got.Spec.NodeName
}
