package builder

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// GeneratedPreemption is a cluster generated for the preemption part of a
// differential test: nodes of 1 CPU, each full with two running victims
// of different priorities (so that kube-scheduler's order of victims
// never ties) from namespaces drawn among three tenants (one of them
// production), a batch namespace and a namespace of no tenant; and, per
// node, a preemptor of a tenant, pinned to the node, that needs one
// victim's room. The policy is config/samples/preemption's tenant rule:
// whether preemption places a preemptor, which victim it evicts and which
// the rule protects depends on the draw.
type GeneratedPreemption struct {
	PriorityClasses []*schedulingv1.PriorityClass
	Namespaces      []*corev1.Namespace
	Policy          *schedv1alpha1.SchedulingPolicy
	Nodes           []*corev1.Node
	// Victims are pinned to Nodes (two each, created first: both fit);
	// Preemptors are pinned too, one per node, in node order.
	Victims, Preemptors []*corev1.Pod
}

// Priorities of a GeneratedPreemption, by the role of their pods.
const (
	genPriorityLow       = 100
	genPriorityMid       = 200
	genPriorityPreemptor = 1000
)

// GeneratePreemption draws a GeneratedPreemption of o.Nodes nodes from
// o.Seed; every name starts with o.Prefix and the namespaces carry
// o.RunLabel=o.Prefix, which the policy matches.
func GeneratePreemption(o GenerateOptions) *GeneratedPreemption {
	r := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	g := &GeneratedPreemption{}
	class := func(role string, value int32) string {
		name := o.Prefix + "-" + role
		g.PriorityClasses = append(g.PriorityClasses, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value})
		return name
	}
	low, mid, high := class("low", genPriorityLow), class("mid", genPriorityMid), class("preemptor", genPriorityPreemptor)

	namespace := func(suffix string, labels map[string]string) string {
		name := o.Prefix + "-" + suffix
		l := map[string]string{o.RunLabel: o.Prefix}
		for k, v := range labels {
			l[k] = v
		}
		g.Namespaces = append(g.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
		return name
	}
	tenants := []string{
		namespace("t1", map[string]string{GenTenantLabel: "t1"}),
		namespace("t2", map[string]string{GenTenantLabel: "t2"}),
		namespace("t3", map[string]string{GenTenantLabel: "t3", "celsched.io/environment": "production"}),
	}
	others := []string{
		namespace("batch", map[string]string{GenTierLabel: "batch"}),
		namespace("shared", nil),
	}
	anyNamespace := append(append([]string{}, tenants...), others...)

	g.Policy = MakePolicy(o.Prefix+"-tenant-preemption").NamespaceLabels(map[string]string{o.RunLabel: o.Prefix}).
		Victim("own-namespace-or-batch",
			"victim.metadata.namespace == pod.metadata.namespace || victimNamespaceObject.metadata.?labels[?'"+GenTierLabel+"'].orValue('') == 'batch'",
			"another tenant's pod that is not batch").
		Victim("never-another-tenants-production",
			"victim.metadata.namespace == pod.metadata.namespace || victimNamespaceObject.metadata.?labels[?'celsched.io/environment'].orValue('') != 'production'",
			"another tenant's production pod").Obj()

	pod := func(ns, name, node, priorityClass, cpu string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{
				SchedulerName:     o.SchedulerName,
				PriorityClassName: priorityClass,
				NodeSelector:      map[string]string{corev1.LabelHostname: node},
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")},
				}}},
			},
		}
	}
	for i := range o.Nodes {
		name := fmt.Sprintf("%s-node-%d", o.Prefix, i)
		g.Nodes = append(g.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
			}},
		})
		for j, class := range []string{low, mid} {
			g.Victims = append(g.Victims, pod(anyNamespace[r.IntN(len(anyNamespace))], fmt.Sprintf("victim-%d-%d", i, j), name, class, "450m"))
		}
		g.Preemptors = append(g.Preemptors, pod(tenants[r.IntN(len(tenants))], fmt.Sprintf("preemptor-%d", i), name, high, "500m"))
	}
	return g
}
