package celplugins

import (
	"slices"
)

// Applies names the policies that apply to the pod, in name order, once
// each: those whose decisions the match holds (they select the pod, or
// apply with an error) and those whose match was skipped under
// failurePolicy Ignore.
func (m *Match) Applies() []string {
	out := make([]string, 0, len(m.matched)+len(m.ignored))
	for _, r := range m.matched {
		out = append(out, r.Decision.Policy.Name)
	}
	for _, r := range m.ignored {
		out = append(out, r.Decision.Policy.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
