package dryrun

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// What a draft does to a live policy (PolicyChange.Change).
const (
	PolicyAdded     = "added"
	PolicyChanged   = "changed"
	PolicyDeleted   = "deleted"
	PolicyUnchanged = "unchanged"
)

// PolicyChange is what a draft does to one policy.
type PolicyChange struct {
	Name   string `json:"name"`
	Change string `json:"change"`
}

// ApplyDrafts returns the live policies with the drafts applied: a draft
// replaces the live policy of its name, or is added; the policies named in
// deletions are removed (each must be live). It also says what changed,
// per policy, in the order of the drafts and then of the deletions.
func ApplyDrafts(live, drafts []*schedv1alpha1.SchedulingPolicy, deletions []string) ([]*schedv1alpha1.SchedulingPolicy, []PolicyChange, error) {
	out := slices.Clone(live)
	var changes []PolicyChange
	for _, d := range drafts {
		i := slices.IndexFunc(out, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == d.Name })
		switch {
		case i < 0:
			out = append(out, d)
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyAdded})
		case equality.Semantic.DeepEqual(out[i].Spec, d.Spec):
			out[i] = d
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyUnchanged})
		default:
			out[i] = d
			changes = append(changes, PolicyChange{Name: d.Name, Change: PolicyChanged})
		}
	}
	for _, name := range deletions {
		if slices.ContainsFunc(drafts, func(d *schedv1alpha1.SchedulingPolicy) bool { return d.Name == name }) {
			return nil, nil, fmt.Errorf("--delete %s: a draft of that name is given too", name)
		}
		i := slices.IndexFunc(out, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == name })
		if i < 0 {
			return nil, nil, fmt.Errorf("--delete %s: no live SchedulingPolicy of that name", name)
		}
		out = slices.Delete(out, i, i+1)
		changes = append(changes, PolicyChange{Name: name, Change: PolicyDeleted})
	}
	return out, changes, nil
}
