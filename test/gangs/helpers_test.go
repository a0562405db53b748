package gangs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// schedulerName is the profile of config/scheduler/scheduler-config.yaml.
const schedulerName = "celsched"

// waitTimeout bounds every wait for the scheduler: generous, as the
// machine running the tests may be slow; no test asserts a duration.
const waitTimeout = 45 * time.Second

// nodeSpec describes a simulated node: 4 CPUs unless cpu says otherwise.
type nodeSpec struct {
	name   string
	labels map[string]string
	cpu    string
}

// createNodes creates ready nodes with their capacity and deletes them
// when the test ends.
func createNodes(t *testing.T, specs ...nodeSpec) {
	t.Helper()
	ctx := t.Context()
	for _, s := range specs {
		labels := map[string]string{corev1.LabelHostname: s.name}
		for k, v := range s.labels {
			labels[k] = v
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: labels}}
		if err := k8sClient.Create(ctx, node); err != nil {
			t.Fatalf("creating node %s: %v", s.name, err)
		}
		t.Cleanup(func() { deleteObject(t, node) })
		cpu := s.cpu
		if cpu == "" {
			cpu = "4"
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
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
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[key] = value
	if err := k8sClient.Patch(t.Context(), ns, patch); err != nil {
		t.Fatalf("labelling namespace %s: %v", name, err)
	}
}

// createGang creates a PodGroup with the gang policy minCount and, when
// topologyKey is set, its topology constraint.
func createGang(t *testing.T, namespace, name string, minCount int32, topologyKey string) *schedulingv1beta1.PodGroup {
	t.Helper()
	pg := builder.Gang(namespace, name, minCount, nil)
	if topologyKey != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: topologyKey}},
		}
	}
	if err := k8sClient.Create(t.Context(), pg); err != nil {
		t.Fatalf("creating PodGroup %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() { deleteObject(t, pg) })
	return pg
}

// podOption changes a test pod.
type podOption func(*corev1.Pod)

func withLabels(l map[string]string) podOption {
	return func(p *corev1.Pod) { p.Labels = l }
}

// inGroup makes the pod a member of the PodGroup.
func inGroup(podGroup string) podOption {
	return func(p *corev1.Pod) {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(podGroup)}
	}
}

func withCPU(q string) podOption {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
}

func onNode(node string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node} }
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
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
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

// waitPending waits until the pod's PodScheduled condition is False with the
// given reason and a message containing every part, and returns the message.
// The pod must stay unbound meanwhile.
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
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
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

// unbound says whether the pod is still unbound now.
func unbound(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	var got corev1.Pod
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	return got.Spec.NodeName == ""
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
func applyPolicy(t *testing.T, policy *schedv1alpha1.SchedulingPolicy) {
	t.Helper()
	if err := k8sClient.Create(t.Context(), policy); err != nil {
		t.Fatalf("creating policy %s: %v", policy.Name, err)
	}
	t.Cleanup(func() { deleteObject(t, policy) })
	waitReady(t, policy.Name)
}

// waitReady waits until the manager reports the policy's current
// generation compiled (Ready with its generation).
func waitReady(t *testing.T, name string) {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("policy %s: not Ready: %v; status %+v", name, err, got.Status)
	}
}

func deleteObject(t *testing.T, obj client.Object) {
	t.Helper()
	err := k8sClient.Delete(context.WithoutCancel(t.Context()), obj, client.GracePeriodSeconds(0))
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s: %v", obj.GetName(), err)
	}
}
