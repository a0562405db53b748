// Package metrics counts what SchedulingPolicy rules decide, for the
// manager's /metrics: celsched_policy_evaluations_total by policy, rule and
// result. The scheduler plugins count decisions here; the engine's
// Decision says which rules were evaluated and how each ended.
package metrics

import (
	"errors"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/celsched/celsched/engine"
)

// Results of an evaluation.
const (
	ResultAllow  = "allow"
	ResultDeny   = "deny"
	ResultError  = "error"
	ResultScored = "scored"
)

// EvaluationsTotal is served with the manager's other metrics (/metrics).
var EvaluationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "celsched_policy_evaluations_total",
	Help: "Evaluations of SchedulingPolicy rules, by policy, rule (preEnqueue/NAME, filters/NAME, scores/NAME) and " +
		"result (allow, deny or error for preEnqueue rules and filters; scored or error for scores). Filters and scores " +
		"are evaluated once per node; rules after the first false one are not evaluated. Audit policies included.",
}, []string{"policy", "rule", "result"})

func init() {
	ctrlmetrics.Registry.MustRegister(EvaluationsTotal)
}

// Counters hold the counters of each compiled policy version, so that
// counting a decision looks no label up. Safe for concurrent use.
type Counters struct {
	byName sync.Map // policy name -> *policyCounters
}

// ruleCounters are one rule's evaluation counters.
type ruleCounters struct {
	name             string
	allow, deny, err prometheus.Counter
}

// policyCounters are the counters of one compiled policy version.
type policyCounters struct {
	policy              *engine.CompiledPolicy
	preEnqueue, filters []ruleCounters
	scores              []ruleCounters // allow counts "scored"
}

func newPolicyCounters(p *engine.CompiledPolicy) *policyCounters {
	rules := func(kind string, names []string, allow string) []ruleCounters {
		out := make([]ruleCounters, len(names))
		for i, n := range names {
			rule := kind + "/" + n
			out[i] = ruleCounters{
				name:  n,
				allow: EvaluationsTotal.WithLabelValues(p.Name, rule, allow),
				err:   EvaluationsTotal.WithLabelValues(p.Name, rule, ResultError),
			}
			if allow == ResultAllow {
				out[i].deny = EvaluationsTotal.WithLabelValues(p.Name, rule, ResultDeny)
			}
		}
		return out
	}
	scores := make([]string, 0, len(p.ScoreRules()))
	for _, s := range p.ScoreRules() {
		scores = append(scores, s.Name)
	}
	return &policyCounters{
		policy:     p,
		preEnqueue: rules("preEnqueue", p.PreEnqueueRuleNames(), ResultAllow),
		filters:    rules("filters", p.FilterRuleNames(), ResultAllow),
		scores:     rules("scores", scores, ResultScored),
	}
}

func (c *Counters) of(p *engine.CompiledPolicy) *policyCounters {
	if v, ok := c.byName.Load(p.Name); ok {
		if pc := v.(*policyCounters); pc.policy == p {
			return pc
		}
	}
	pc := newPolicyCounters(p)
	c.byName.Store(p.Name, pc)
	return pc
}

// Count counts the rules a decision evaluated: in order, each rule before
// the one that decided is counted allow (scored), or error when it failed
// and was ignored; the deciding rule deny (Reject, Hold) or error (Error).
// A compile error and match decisions count nothing.
func (c *Counters) Count(d *engine.Decision) {
	if d.Policy == nil || d.Policy.Err() != nil {
		return
	}
	pc := c.of(d.Policy)
	var rules []ruleCounters
	switch d.Point {
	case engine.PointPreEnqueue:
		rules = pc.preEnqueue
	case engine.PointFilter:
		rules = pc.filters
	case engine.PointScore:
		rules = pc.scores
	default:
		return
	}
	stop := len(rules)
	if d.Verdict != engine.Pass {
		stop = slices.IndexFunc(rules, func(r ruleCounters) bool { return r.name == d.Rule })
		if stop < 0 {
			return // not a rule's decision (e.g. a variable's error without a rule)
		}
	}
	for i := range stop {
		if ignored(d, rules[i].name) {
			rules[i].err.Inc()
		} else {
			rules[i].allow.Inc()
		}
	}
	switch {
	case stop == len(rules):
	case d.Verdict == engine.Error:
		rules[stop].err.Inc()
	case rules[stop].deny != nil:
		rules[stop].deny.Inc()
	}
}

// ignored says whether the decision skipped an error of the rule.
func ignored(d *engine.Decision, rule string) bool {
	for _, err := range d.Ignored {
		var ee *engine.EvalError
		if errors.As(err, &ee) && ee.Rule == rule {
			return true
		}
	}
	return false
}
