package analyze

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/verdict"
)

// groups analyzes the pod groups with pending members among pods
// (dryrun.SplitGroups) as kube-scheduler schedules them, all or nothing:
// it places them twice, with the policies in force (s) and with none
// (base), each time all in one run (groups compete for nodes as in the
// scheduler's queue). A group placed without the policies and not with
// them is group-unplaceable, naming the policies and rules that keep it
// from its placement; a group placed by neither is group-no-placement,
// naming none. With GenericWorkload off, a note says the groups are not
// analyzed as groups.
func (r *Report) groups(ctx context.Context, s, base *dryrun.Scheduler, podGroups []*schedulingv1beta1.PodGroup, pods []*corev1.Pod) error {
	pending, _ := dryrun.SplitGroups(podGroups, pods)
	r.Notes = append(r.Notes, pending.Notes("analyzed")...)
	if len(pending.Groups) == 0 || !dryrun.GroupsOn() {
		return nil
	}
	r.Summary.Groups = len(pending.Groups)
	now, err := s.PlaceGroups(ctx, pending.Groups)
	if err != nil {
		return fmt.Errorf("placing the pod groups with the policies: %w", err)
	}
	without, err := base.PlaceGroups(ctx, pending.Groups)
	if err != nil {
		return fmt.Errorf("placing the pod groups without any policy: %w", err)
	}
	for i, g := range pending.Groups {
		switch {
		case now[i].State == verdict.GroupPlaced:
		case without[i].State != verdict.GroupPlaced:
			r.Findings = append(r.Findings, Finding{Kind: GroupNoPlacement, Subject: "pod group " + now[i].Group, Pods: len(g.Pods),
				GroupState: without[i].State,
				Evidence:   "kube-scheduler places it neither with the policies nor without any; without any policy, " + without[i].Outcome(),
				Suggestion: "no policy is involved: give the group room for its minimum count in one topology domain (nodes, its pods' requests, its minCount or topology constraint), or its missing members"})
		default:
			f, err := unplaceable(ctx, s, base, g, now[i], without[i])
			if err != nil {
				return err
			}
			r.Findings = append(r.Findings, f)
		}
	}
	return nil
}

// unplaceable is the group-unplaceable finding of a group that the
// policies keep from the placement it gets without them (now and without
// are its results with and without the policies), naming the policies
// and rules that keep it: the placement filters that refused a candidate
// placement, the preEnqueue rules that hold a member (held), and the
// filters that refuse a member a node the built-in plugins admit
// (unschedulable).
func unplaceable(ctx context.Context, s, base *dryrun.Scheduler, g verdict.Group, now, without *verdict.GroupResult) (Finding, error) {
	policies, rules := sets.New[string](), sets.New[string]()
	for _, p := range now.Refused {
		policies.Insert(p.Policy)
		if p.Rule != "" {
			rules.Insert(p.Policy + "/placement.filters/" + p.Rule)
		}
	}
	seen := sets.New[string]() // the classes of members evaluated
	for _, pod := range g.Pods {
		if key, ok := s.Class(pod); ok {
			if seen.Has(key) {
				continue
			}
			seen.Insert(key)
		}
		var err error
		switch now.State {
		case verdict.GroupHeld:
			err = holding(ctx, s, pod, policies, rules)
		case verdict.GroupUnschedulable:
			err = filtering(ctx, s, base, pod, policies, rules)
		}
		if err != nil {
			return Finding{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	f := Finding{Kind: GroupUnplaceable, Policies: sets.List(policies), Rules: sets.List(rules), Subject: "pod group " + now.Group, Pods: len(g.Pods),
		GroupState: now.State, Placement: without.Placement, Refused: now.Refused,
		Evidence: fmt.Sprintf("with the policies, %s; without any policy, %s", now.Outcome(), without.Outcome())}
	if len(now.Refused) > 0 {
		refusals := make([]string, len(now.Refused))
		for i, p := range now.Refused {
			refusals[i] = p.Refusal
		}
		f.Evidence += "; refused: " + strings.Join(refusals, "; ")
	}
	switch now.State {
	case verdict.GroupHeld:
		f.Suggestion = "a preEnqueue rule holds its members and kube-scheduler does not try the group: if it should run now, change the rule or the pods"
	default:
		f.Suggestion = "the policies leave the group no placement for its minimum count: widen their placement filters or filters for its pods, or add nodes that meet them in one topology domain"
	}
	return f, nil
}

// holding adds the policies and preEnqueue rules (policy/preEnqueue/rule)
// that hold a pod, or that hold every pod they match (a compile or match
// error).
func holding(ctx context.Context, s *dryrun.Scheduler, pod *corev1.Pod, policies, rules sets.Set[string]) error {
	why, err := s.Why(ctx, pod, "")
	if err != nil {
		return err
	}
	for _, p := range why {
		policies.Insert(p.Name)
		for _, rule := range p.PreEnqueue {
			rules.Insert(p.Name + "/preEnqueue/" + rule.Rule)
		}
	}
	return nil
}

// filtering adds the policies whose filters refuse a pod a node the
// built-in plugins admit it on (base: no policy), and their rules false
// there (policy/filters/rule); and an enforced policy that rejects the
// pod on every node (a compile or match error).
func filtering(ctx context.Context, s, base *dryrun.Scheduler, pod *corev1.Pod, policies, rules sets.Set[string]) error {
	v, err := s.Verdicts(ctx, pod)
	if err != nil {
		return err
	}
	if v.Rejection != nil {
		policies.Insert(v.Rejection.Policy.Name)
		return nil
	}
	builtin, err := base.FeasibleOnceReleased(ctx, pod)
	if err != nil {
		return err
	}
	p, r := refusing(v, indexes(v.Nodes, builtin.Feasible))
	policies.Insert(p.UnsortedList()...)
	rules.Insert(r.UnsortedList()...)
	return nil
}
