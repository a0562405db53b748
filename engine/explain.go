package engine

import (
	"context"
)

// This file is the engine's side of dry-run: the same evaluations as the
// scheduler's, with the detail a person needs (why a policy matches, every
// rule's verdict) rather than only the first rejection. Whether a policy
// applies, and why, is CompiledPolicy.Match, as in the scheduler.

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
	return p.allRules(&lazy{ctx: ctx, policy: p, pod: in}, nil, p.preEnqueue), nil
}

// FilterRules evaluates every filter on a node, not only up to the first
// false one.
func (p *CompiledPolicy) FilterRules(ctx context.Context, in *PodInput, node *NodeInput) ([]RuleVerdict, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	return p.allRules(&lazy{ctx: ctx, policy: p, pod: in}, node, p.filters), nil
}

func (p *CompiledPolicy) allRules(ev *lazy, node *NodeInput, rules []*boolRule) []RuleVerdict {
	out := make([]RuleVerdict, len(rules))
	for i, r := range rules {
		out[i].Rule = r.name
		ok, err := ev.evalBool(node, &r.expr)
		switch {
		case err != nil:
			out[i].Err = p.evalError(r.name, &r.expr, err)
		case ok:
			out[i].Passed = true
		default:
			out[i].Message = ev.message(node, r)
		}
	}
	return out
}
