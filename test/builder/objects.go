package builder

import (
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// The objects of a unit test's cluster, as the API server would store
// them (a UID and a resourceVersion: converters cache by them).

// Namespace is a namespace with labels.
func Namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("ns-" + name), ResourceVersion: "1", Labels: labels}}
}

// Node is a node with labels and room for 4 CPUs, 8 GiB and 110 pods.
func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("node-" + name), ResourceVersion: "1", Labels: labels},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}},
	}
}

// Pod is an unbound pod of the celsched profile with one container and
// no requests (Requesting adds one).
func Pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("pod-" + ns + "-" + name), ResourceVersion: "1", Labels: labels},
		Spec:       corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	}
}

// Requesting sets a Pod's CPU request.
func Requesting(cpu string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
}

// PodGroup is a gang of minCount, with a topology constraint on key when
// set.
func PodGroup(ns, name string, minCount int32, key string) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("pg-" + ns + "-" + name), ResourceVersion: "1"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
		},
	}
	if key != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: key}},
		}
	}
	return pg
}
