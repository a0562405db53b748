package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// schedulerName is the profile of config/scheduler/scheduler-config.yaml.
const schedulerName = "celsched"

// waitTimeout bounds every wait for the scheduler: generous, as the
// machine running the tests may be slow; no test asserts a duration.
const waitTimeout = 30 * time.Second

// nodeSpec describes a simulated node.
type nodeSpec struct {
	name        string
	labels      map[string]string
	annotations map[string]string
	taints      []corev1.Taint
	cpu, memory string
	extra       corev1.ResourceList
}

// createNodes creates nodes with their capacity and deletes them when the
// test ends.
func createNodes(t *testing.T, specs ...nodeSpec) {
	t.Helper()
	ctx := t.Context()
	for _, s := range specs {
		labels := map[string]string{corev1.LabelHostname: s.name}
		for k, v := range s.labels {
			labels[k] = v
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: labels, Annotations: s.annotations},
			Spec:       corev1.NodeSpec{Taints: s.taints},
		}
		if err := k8sClient.Create(ctx, node); err != nil {
			t.Fatalf("creating node %s: %v", s.name, err)
		}
		t.Cleanup(func() { deleteObject(t, node) })
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(orDefault(s.cpu, "4")),
			corev1.ResourceMemory: resource.MustParse(orDefault(s.memory, "16Gi")),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		for k, v := range s.extra {
			capacity[k] = v
		}
		node.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		}
		if err := k8sClient.Status().Update(ctx, node); err != nil {
			t.Fatalf("setting the status of node %s: %v", s.name, err)
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// createNamespace creates a namespace with a generated name and labels.
func createNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels}}
	if err := k8sClient.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { deleteObject(t, ns) })
	return ns.Name
}

// setNamespaceLabel sets one label of a namespace.
func setNamespaceLabel(t *testing.T, name, key, value string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels[key] = value
	if err := k8sClient.Patch(t.Context(), ns, patch); err != nil {
		t.Fatalf("labelling namespace %s: %v", name, err)
	}
}

// podOption changes a test pod.
type podOption func(*corev1.Pod)

func withLabels(l map[string]string) podOption {
	return func(p *corev1.Pod) { p.Labels = l }
}

func withRequests(cpu, memory string) podOption {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		}
	}
}

func withLimit(name corev1.ResourceName, q string) podOption {
	return func(p *corev1.Pod) {
		if p.Spec.Containers[0].Resources.Limits == nil {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		}
		p.Spec.Containers[0].Resources.Limits[name] = resource.MustParse(q)
	}
}

func onNode(node string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node} }
}

func withScheduler(name string) podOption {
	return func(p *corev1.Pod) { p.Spec.SchedulerName = name }
}

// boundTo creates the pod already bound to a node, as a running pod.
func boundTo(node string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeName = node }
}

// createPod creates a pod for the celsched scheduler.
func createPod(t *testing.T, namespace, name string, opts ...podOption) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: schedulerName,
			Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	for _, o := range opts {
		o(pod)
	}
	if err := k8sClient.Create(t.Context(), pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() { deleteObject(t, pod) })
	return pod
}

// waitForNode waits until the pod is bound and returns its node.
func waitForNode(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	var got corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		return got.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not scheduled: %v; PodScheduled: %s", pod.Namespace, pod.Name, err, scheduledCondition(&got))
	}
	return got.Spec.NodeName
}

// expectNode waits until the pod is bound and checks the node.
func expectNode(t *testing.T, pod *corev1.Pod, want string) {
	t.Helper()
	if got := waitForNode(t, pod); got != want {
		t.Errorf("pod %s/%s was scheduled on %s, want %s", pod.Namespace, pod.Name, got, want)
	}
}

// waitPending waits until the pod's PodScheduled condition is False with the
// given reason and a message containing every part, and returns the message.
func waitPending(t *testing.T, pod *corev1.Pod, reason string, parts ...string) string {
	t.Helper()
	var got corev1.Pod
	matches := func() bool {
		c := podCondition(&got)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != reason {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				return false
			}
		}
		return true
	}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		if got.Spec.NodeName != "" {
			return false, fmt.Errorf("scheduled on %s", got.Spec.NodeName)
		}
		return matches(), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: want PodScheduled=False reason %s with %q: %v; got %s", pod.Namespace, pod.Name, reason, parts, err, scheduledCondition(&got))
	}
	return podCondition(&got).Message
}

func podCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func scheduledCondition(pod *corev1.Pod) string {
	c := podCondition(pod)
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

// applyPolicy creates a policy, deletes it when the test ends, and waits
// until the manager reports it compiled (Ready with its generation).
func applyPolicy(t *testing.T, policy *schedv1alpha1.SchedulingPolicy) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	if err := k8sClient.Create(t.Context(), policy); err != nil {
		t.Fatalf("creating policy %s: %v", policy.Name, err)
	}
	t.Cleanup(func() { deleteObject(t, policy) })
	waitPolicyReady(t, policy.Name, metav1.ConditionTrue)
	return policy
}

// waitPolicyReady waits until the policy's Ready condition has the status
// for its current generation, and returns the policy.
func waitPolicyReady(t *testing.T, name string, status metav1.ConditionStatus) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	return waitPolicy(t, name, "Ready "+string(status), func(got *schedv1alpha1.SchedulingPolicy) bool {
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && c != nil && c.Status == status && c.ObservedGeneration == got.Generation
	})
}

// waitPolicy polls the policy until ok says it is what the test waits
// for (what, in the failure), and returns it.
func waitPolicy(t *testing.T, name, what string, ok func(*schedv1alpha1.SchedulingPolicy) bool) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		return ok(got), nil
	})
	if err != nil {
		t.Fatalf("policy %s: not %s: %v; status %+v", name, what, err, got.Status)
	}
	return got
}

// loadSample reads a sample policy of config/samples.
func loadSample(t *testing.T, name string) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "samples", "scheduling_v1alpha1_"+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := yaml.UnmarshalStrict(data, policy); err != nil {
		t.Fatal(err)
	}
	return policy
}

func deleteObject(t *testing.T, obj client.Object) {
	t.Helper()
	err := k8sClient.Delete(context.WithoutCancel(t.Context()), obj, client.GracePeriodSeconds(0))
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s: %v", obj.GetName(), err)
	}
}

// events returns the messages of the events about a pod with a reason.
func events(t *testing.T, pod *corev1.Pod, reason string) []string {
	t.Helper()
	list, err := clientset.EventsV1().Events(pod.Namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range list.Items {
		if e := &list.Items[i]; e.Regarding.UID == pod.UID && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// waitEvents waits until the pod has events with the reason and each of
// the notes (events are written asynchronously), and returns the notes of
// all its events with the reason.
func waitEvents(t *testing.T, pod *corev1.Pod, reason string, notes ...string) []string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		got = events(t, pod, reason)
		for _, n := range notes {
			if !slices.Contains(got, n) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("events %s of pod %s/%s: want %q, got %q", reason, pod.Namespace, pod.Name, notes, got)
	}
	return got
}
