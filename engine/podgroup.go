package engine

// podGroup in pod rules: the pod's group (pod.spec.schedulingGroup), its
// labels and minimum count, and the nodes where its members are placed,
// read by match conditions, preEnqueue rules, variables, filters and
// scores. Placement rules read the same group (without the members:
// placement.assignedNodes is theirs), declared by the same function.

import (
	"encoding/json"
	"slices"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/celsched/celsched/engine/celcost"
)

// podGroupDeclType declares podGroup: metadata (name, namespace, labels)
// and minCount; with members, also assignedNodes, the names of the nodes
// where members are placed, declared as long as placement.nodes at most
// for the estimates (a group may have more members: expressions that read
// it are tracked at runtime). It returns podGroup's type and every type it
// declares.
func podGroupDeclType(members bool) (*apiservercel.DeclType, []*apiservercel.DeclType) {
	labels := apiservercel.NewMapType(apiservercel.StringType, apiservercel.StringType, MaxLabelsPerObject)
	meta := apiservercel.NewObjectType("celsched.podGroup.metadata", map[string]*apiservercel.DeclField{
		"name":      apiservercel.NewDeclField("name", apiservercel.StringType, true, nil, nil),
		"namespace": apiservercel.NewDeclField("namespace", apiservercel.StringType, true, nil, nil),
		"labels":    apiservercel.NewDeclField("labels", labels, true, nil, nil),
	})
	fields := map[string]*apiservercel.DeclField{
		"metadata": apiservercel.NewDeclField("metadata", meta, true, nil, nil),
		"minCount": apiservercel.NewDeclField("minCount", apiservercel.IntType, true, nil, nil),
	}
	if members {
		fields[podGroupAssignedNodes] = apiservercel.NewDeclField(podGroupAssignedNodes,
			apiservercel.NewListType(apiservercel.StringType, celcost.MaxPlacementNodes), true, nil, nil)
	}
	group := apiservercel.NewObjectType("celsched.podGroup", fields)
	return group, []*apiservercel.DeclType{meta, group}
}

// podGroupAssignedNodes is the field of podGroup in pod rules that lists
// where the members are placed.
const podGroupAssignedNodes = "assignedNodes"

// PodGroup is a pod's group as pod rules read it (podGroup). Build it
// with NewPodGroup, once per pod and scheduling cycle; it is immutable.
type PodGroup struct {
	// Namespace and Name are the group's: the pod's namespace and
	// pod.spec.schedulingGroup.podGroupName; both empty for a pod that
	// names no group.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Labels and MinCount are the PodGroup object's (its gang policy's
	// minCount); empty and 0 when the object is not known (not created
	// yet, or the GenericWorkload gate is off) or the policy is not a
	// gang.
	Labels   map[string]string `json:"labels,omitempty"`
	MinCount int64             `json:"minCount,omitempty"`
	// AssignedNodes are the nodes where the group's other members are
	// bound or assumed, sorted and without duplicates.
	AssignedNodes []string `json:"assignedNodes,omitempty"`

	// val is the CEL value, built by NewPodGroup.
	val ref.Val
}

// NoPodGroup is podGroup of a pod that names no group.
var NoPodGroup = NewPodGroup("", "", nil, nil)

// NewPodGroup returns the group named namespace/name, with its PodGroup
// object (nil when it is not known) and the nodes of its placed members
// (in any order, repeated or not: they are sorted and deduplicated).
func NewPodGroup(namespace, name string, group *schedulingv1beta1.PodGroup, assigned []string) *PodGroup {
	g := &PodGroup{Namespace: namespace, Name: name}
	if group != nil {
		g.Labels = group.Labels
		if gang := group.Spec.SchedulingPolicy.Gang; gang != nil {
			g.MinCount = int64(gang.MinCount)
		}
	}
	if len(assigned) > 0 {
		g.AssignedNodes = slices.Compact(slices.Sorted(slices.Values(assigned)))
	}
	nodes := make([]ref.Val, len(g.AssignedNodes))
	for i, n := range g.AssignedNodes {
		nodes[i] = types.String(n)
	}
	g.val = types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{
		types.String("metadata"):            podGroupMetadata(namespace, name, g.Labels),
		types.String("minCount"):            types.Int(g.MinCount),
		types.String(podGroupAssignedNodes): types.NewRefValList(types.DefaultTypeAdapter, nodes),
	})
	return g
}

// podGroupMetadata is podGroup.metadata.
func podGroupMetadata(namespace, name string, labels map[string]string) ref.Val {
	l := make(map[ref.Val]ref.Val, len(labels))
	for k, v := range labels {
		l[types.String(k)] = types.String(v)
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{
		types.String("name"):      types.String(name),
		types.String("namespace"): types.String(namespace),
		types.String("labels"):    types.NewRefValMap(types.DefaultTypeAdapter, l),
	})
}

// Key is the group's value as a string: equal keys, equal values of
// podGroup. The scheduler keeps a pod's Match for as long as its key
// holds. (A memo key holds the same value, members included even for a
// policy that reads only the group's metadata or minCount: the members
// of a gang then share their results until the next member is placed.)
func (g *PodGroup) Key() string {
	if g == nil {
		return ""
	}
	b, err := json.Marshal(g)
	if err != nil {
		return "" // a struct of strings and ints marshals
	}
	return string(b)
}

// PodGroupResolver finds a pod's group for pod rules: the scheduler's
// reads its pod group manager, the dry-run's the cluster it was given.
type PodGroupResolver interface {
	// PodGroup returns the pod's group (NoPodGroup for a pod that names
	// none), without the pod itself among the placed members.
	PodGroup(pod *corev1.Pod) *PodGroup
}

// GroupName is the name of the pod group a pod belongs to
// (pod.spec.schedulingGroup.podGroupName), empty when it names none.
func GroupName(pod *corev1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}

// StaticPodGroups is a PodGroupResolver over fixed PodGroup objects and
// pods, as the dry run reads them: a group's members are the pods that
// name it, placed where their spec.nodeName says.
type StaticPodGroups struct {
	groups map[groupKey]*schedulingv1beta1.PodGroup
	// placed are the placed members of each group.
	placed map[groupKey][]*corev1.Pod
}

type groupKey struct{ namespace, name string }

// NewStaticPodGroups indexes PodGroup objects and pods for a dry run.
func NewStaticPodGroups(groups []*schedulingv1beta1.PodGroup, pods []*corev1.Pod) *StaticPodGroups {
	s := &StaticPodGroups{groups: map[groupKey]*schedulingv1beta1.PodGroup{}, placed: map[groupKey][]*corev1.Pod{}}
	for _, g := range groups {
		s.groups[groupKey{g.Namespace, g.Name}] = g
	}
	for _, p := range pods {
		if name := GroupName(p); name != "" && p.Spec.NodeName != "" {
			k := groupKey{p.Namespace, name}
			s.placed[k] = append(s.placed[k], p)
		}
	}
	return s
}

// Known says whether the pod is in a pod group whose PodGroup object is
// among the groups.
func (s *StaticPodGroups) Known(pod *corev1.Pod) bool {
	name := GroupName(pod)
	return name != "" && s.groups[groupKey{pod.Namespace, name}] != nil
}

// PodGroup implements PodGroupResolver. The pod itself is not a placed
// member: a bound pod is evaluated as if it were created again.
func (s *StaticPodGroups) PodGroup(pod *corev1.Pod) *PodGroup {
	name := GroupName(pod)
	if name == "" {
		return NoPodGroup
	}
	k := groupKey{pod.Namespace, name}
	var nodes []string
	for _, m := range s.placed[k] {
		if m.Name != pod.Name { // one namespace: the name is the pod's identity
			nodes = append(nodes, m.Spec.NodeName)
		}
	}
	return NewPodGroup(pod.Namespace, name, s.groups[k], nodes)
}
