package impact

import (
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/verdict"
)

// GroupImpact is what the draft does to a pod group: where kube-scheduler
// places its pending members, all or nothing, with the live policies and
// with the drafted ones (verdict.Evaluator.PlaceGroups).
type GroupImpact struct {
	// Group is namespace/name.
	Group  string               `json:"group"`
	Change Change               `json:"change"`
	Now    *verdict.GroupResult `json:"now"`
	Draft  *verdict.GroupResult `json:"draft"`
	// Policies are the added, changed or deleted policies that apply to a
	// pending member, now or with the draft.
	Policies []string `json:"policies"`
}

// GroupSummary counts the pod groups.
type GroupSummary struct {
	// Pending counts the PodGroups of the input with pending members of
	// the profiles evaluated.
	Pending int `json:"pending"`
	// NotAffected counts those that no added, changed or deleted policy
	// applies to (through any pending member), now or with the draft: not
	// evaluated.
	NotAffected int `json:"notAffected"`
	// ByChange counts every evaluated group by change, unchanged included.
	ByChange map[Change]int `json:"byChange"`
}

// groupMembers takes out of pods the pending members of the PodGroups of
// the input (dryrun.SplitGroups), when kube-scheduler places pod groups
// (GenericWorkload on): they are evaluated with their group, not one by
// one. Pods naming a PodGroup that is not in the input stay, and a note
// counts them.
func (r *Report) groupMembers(podGroups []*schedulingv1beta1.PodGroup, pods []*corev1.Pod) (rest []*corev1.Pod, groups []verdict.Group) {
	pending, others := dryrun.SplitGroups(podGroups, pods)
	r.Notes = append(r.Notes, pending.Notes("evaluated")...)
	if len(pending.Groups) == 0 || !dryrun.GroupsOn() {
		return pods, nil
	}
	r.Summary.Groups = &GroupSummary{Pending: len(pending.Groups), ByChange: map[Change]int{}}
	r.Summary.GroupMembers = pending.Members()
	return others, pending.Groups
}

// groups evaluates the pod groups with their pending members: those a
// changed policy applies to are placed by kube-scheduler with each policy
// set, all in one run per set (groups compete for nodes as in the
// scheduler's queue), and those whose outcome changes are listed.
func (r *Report) groups(ctx context.Context, c *change, pending []verdict.Group) error {
	var groups []verdict.Group
	var relevant []sets.Set[string]
	for _, g := range pending {
		policies := sets.New[string]()
		for _, p := range g.Pods {
			rel, _, err := c.relevant(ctx, p)
			if err != nil {
				return err
			}
			policies = policies.Union(rel)
		}
		if policies.Len() == 0 {
			r.Summary.Groups.NotAffected++
			continue
		}
		groups = append(groups, g)
		relevant = append(relevant, policies)
	}
	if len(groups) == 0 {
		return nil
	}
	now, err := c.now.PlaceGroups(ctx, groups)
	if err != nil {
		return fmt.Errorf("placing the pod groups with the live policies: %w", err)
	}
	next, err := c.next.PlaceGroups(ctx, groups)
	if err != nil {
		return fmt.Errorf("placing the pod groups with the draft: %w", err)
	}
	for i := range groups {
		gi := GroupImpact{Group: now[i].Group, Change: classifyGroup(now[i], next[i]), Now: now[i], Draft: next[i], Policies: sets.List(relevant[i])}
		r.Summary.Groups.ByChange[gi.Change]++
		if gi.Change != Unchanged {
			r.Groups = append(r.Groups, gi)
		}
	}
	sort.SliceStable(r.Groups, func(i, j int) bool {
		a, b := slices.Index(Changes, r.Groups[i].Change), slices.Index(Changes, r.Groups[j].Change)
		if a != b {
			return a < b
		}
		return r.Groups[i].Group < r.Groups[j].Group
	})
	return nil
}

// classifyGroup names the change from one group outcome to the other, as
// classify does for a pod: placed, stranded (placed now, unschedulable
// with the draft), held, released (held now, tried and unschedulable with
// the draft), and moved: placed both ways, but in another topology domain
// because the draft's placement filters refuse the one it gets now (a
// domain picked among equals differs from run to run, and is not a
// change).
func classifyGroup(now, draft *verdict.GroupResult) Change {
	switch {
	case now.State == draft.State:
		if now.State == verdict.GroupPlaced && now.Placement != draft.Placement &&
			slices.ContainsFunc(draft.Refused, func(p celplugins.RefusedPlacement) bool { return p.Placement == now.Placement }) {
			return Moved
		}
		return Unchanged
	case draft.State == verdict.GroupHeld:
		return Held
	case draft.State == verdict.GroupPlaced:
		return Placed
	case now.State == verdict.GroupPlaced:
		return Stranded
	default: // held now, unschedulable with the draft
		return Released
	}
}

// GroupsLine counts the pod groups evaluated and left out; empty when
// there are none.
func (s *Summary) GroupsLine() string {
	if s.Groups == nil {
		return ""
	}
	return fmt.Sprintf("%d with pending members; %d not affected (no changed policy applies to a pending member)", s.Groups.Pending, s.Groups.NotAffected)
}
