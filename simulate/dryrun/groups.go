package dryrun

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
)

// GroupsOn says whether kube-scheduler places pod groups, all or nothing:
// the feature gate GenericWorkload is on in the process (--feature-gates).
func GroupsOn() bool {
	return utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload)
}

// PendingGroups are the PodGroups of an input that have pending members,
// with those members: what kube-scheduler places a group at a time
// (verdict.Evaluator.PlaceGroups).
type PendingGroups struct {
	// Groups are the PodGroups with pending members, in the input's
	// order, each with its members in the order of the pods.
	Groups []verdict.Group
	// Orphans counts the pending pods that name a PodGroup that is not
	// in the input: kube-scheduler holds them until it exists. Missing
	// are those PodGroups (namespace/name), in name order.
	Orphans int
	Missing []string
}

// SplitGroups sorts pods: the pending members (spec.nodeName empty) of
// the PodGroups of podGroups, by group; and the others (bound, in no
// group, or naming a PodGroup that is not in podGroups), in their order.
func SplitGroups(podGroups []*schedulingv1beta1.PodGroup, pods []*corev1.Pod) (PendingGroups, []*corev1.Pod) {
	index := make(map[string]int, len(podGroups))
	for i, pg := range podGroups {
		index[pg.Namespace+"/"+pg.Name] = i
	}
	members := make([][]*corev1.Pod, len(podGroups))
	var out PendingGroups
	var others []*corev1.Pod
	for _, p := range pods {
		group := engine.GroupName(p)
		if p.Spec.NodeName != "" || group == "" {
			others = append(others, p)
			continue
		}
		key := p.Namespace + "/" + group
		i, ok := index[key]
		if !ok {
			out.Orphans++
			if j, found := slices.BinarySearch(out.Missing, key); !found {
				out.Missing = slices.Insert(out.Missing, j, key)
			}
			others = append(others, p)
			continue
		}
		members[i] = append(members[i], p)
	}
	for i, pg := range podGroups {
		if len(members[i]) > 0 {
			out.Groups = append(out.Groups, verdict.Group{PodGroup: pg, Pods: members[i]})
		}
	}
	return out, others
}

// Members counts the groups' pending members.
func (g *PendingGroups) Members() int {
	n := 0
	for _, group := range g.Groups {
		n += len(group.Pods)
	}
	return n
}

// Notes say which pending pods a report does not take with their group
// (done says what it does with groups: "evaluated", "analyzed"): those
// naming a PodGroup that is not in the input, and, with GenericWorkload
// off, every group's.
func (g *PendingGroups) Notes(done string) []string {
	var out []string
	if g.Orphans > 0 {
		missing := strings.Join(g.Missing[:min(3, len(g.Missing))], ", ")
		if len(g.Missing) > 3 {
			missing += ", ..."
		}
		out = append(out, fmt.Sprintf("%d pending pod(s) name a PodGroup that is not in the input (%s): kube-scheduler holds them until it exists", g.Orphans, missing))
	}
	if len(g.Groups) > 0 && !GroupsOn() {
		out = append(out, fmt.Sprintf("%d pod group(s) with pending members are not %s as groups, their pods one by one: the feature gate GenericWorkload is off (give the manager's --feature-gates)", len(g.Groups), done))
	}
	return out
}
