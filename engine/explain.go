package engine

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
)

// This file is the engine's side of dry-run: the same evaluations as the
// scheduler's, with the detail a person needs (why a policy matches, every
// rule's verdict) rather than only the first rejection.

// MatchReason explains whether a policy applies to a pod: whether it does,
// why in words ("namespaceSelector does not match", "match condition
// requests-gpu is false", ...), and the compile or condition error when
// there is one (the policy then counts as matching, as in Snapshot.Match).
func (p *CompiledPolicy) MatchReason(ctx context.Context, in *PodInput) (bool, string, error) {
	switch {
	case p.SchedulerNames.Len() > 0 && !p.SchedulerNames.Has(in.schedulerName):
		return false, fmt.Sprintf("schedulerNames [%s] do not include %q", strings.Join(sortedNames(p), ", "), in.schedulerName), nil
	case p.podSelector != nil && !p.podSelector.Matches(in.podLabels):
		return false, fmt.Sprintf("podSelector %s does not match the pod's labels", p.podSelector), nil
	case p.namespaceSelector != nil && in.Namespace == nil:
		return false, "namespaceSelector: the pod's namespace is not known", nil
	case p.namespaceSelector != nil && !p.namespaceSelector.Matches(in.nsLabels):
		return false, fmt.Sprintf("namespaceSelector %s does not match the namespace's labels", p.namespaceSelector), nil
	}
	if err := p.Err(); err != nil {
		return true, "selectors match, but the policy does not compile", err
	}
	if len(p.conditions) == 0 {
		return true, "selectors match", nil
	}
	ev := p.newEvaluation(ctx, in, nil)
	for _, c := range p.conditions {
		ok, err := ev.evalBool(&c.expr)
		if err != nil {
			return true, fmt.Sprintf("match condition %s failed", c.name), p.evalError(c.name, &c.expr, err)
		}
		if !ok {
			return false, fmt.Sprintf("match condition %s is false", c.name), nil
		}
	}
	return true, "selectors and match conditions match", nil
}

func sortedNames(p *CompiledPolicy) []string {
	return sets.List(p.SchedulerNames)
}

// RuleVerdict is the outcome of one rule: passed, false with its message,
// or an error.
type RuleVerdict struct {
	Rule    string
	Passed  bool
	Message string
	Err     error
}

// PreEnqueueRules evaluates every preEnqueue rule, not only up to the first
// false one.
func (p *CompiledPolicy) PreEnqueueRules(ctx context.Context, in *PodInput) ([]RuleVerdict, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	return p.allRules(p.newEvaluation(ctx, in, nil), p.preEnqueue), nil
}

// FilterRules evaluates every filter on a node, not only up to the first
// false one.
func (p *CompiledPolicy) FilterRules(ctx context.Context, in *PodInput, node *NodeInput) ([]RuleVerdict, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	return p.allRules(p.newEvaluation(ctx, in, node), p.filters), nil
}

func (p *CompiledPolicy) allRules(ev *evaluation, rules []*boolRule) []RuleVerdict {
	out := make([]RuleVerdict, len(rules))
	for i, r := range rules {
		out[i].Rule = r.name
		ok, err := ev.evalBool(&r.expr)
		switch {
		case err != nil:
			out[i].Err = p.evalError(r.name, &r.expr, err)
		case ok:
			out[i].Passed = true
		default:
			out[i].Message = ev.message(r)
		}
	}
	return out
}
