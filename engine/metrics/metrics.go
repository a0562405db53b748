// Package metrics counts what SchedulingPolicy rules decide, for the
// manager's /metrics: celsched_policy_evaluations_total by policy, rule and
// result, and the rules cut off by a cycle's time budget (also kept in a
// SlowLog for the policies' status). The scheduler plugins count decisions
// here; the engine's Decision says which rules were evaluated and how each
// ended.
package metrics

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// EnforcementTotal counts, for the policies with enforcementOverrides, the
// scheduling cycles of the pods each applied to, by the enforcement it had
// for the pod's namespace and the field that enforcement came from.
var EnforcementTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "celsched_policy_enforcement_total",
	Help: "Scheduling cycles of pods that a SchedulingPolicy with enforcementOverrides applied to, by policy, " +
		"the enforcement it had for the pod's namespace (Enforce or Audit) and the field it came from " +
		"(enforced_by: spec.enforcementOverrides[i], spec.enforcement, or the namespace not known yet).",
}, []string{"policy", "enforcement", "enforced_by"})

// Register registers the engine's metrics (evaluations, enforcement,
// cycle durations, time budget cut-offs) with r: the manager calls it
// once at start-up (ctrlmetrics.Registry); the CLI, which serves no
// metrics, does not. Registering them again is not an error.
func Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{EvaluationsTotal, EnforcementTotal, CycleDuration, TimeBudgetExceededTotal} {
		if err := registerOnce(r, c); err != nil {
			return err
		}
	}
	return nil
}

// registerOnce registers c with r; c registered already is not an error.
func registerOnce(r prometheus.Registerer, c prometheus.Collector) error {
	if err := r.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) && already.ExistingCollector == c {
			return nil
		}
		return err
	}
	return nil
}

// CountEnforcement counts a cycle of a pod that a policy with
// enforcementOverrides applied to (EnforcementTotal); other policies count
// nothing.
func CountEnforcement(p *engine.CompiledPolicy) {
	if p != nil && p.HasOverrides() {
		EnforcementTotal.WithLabelValues(p.Name, string(p.Enforcement), p.EnforcedBy).Inc()
	}
}

// Counters hold the counters of each compiled policy version, so that
// counting a decision looks no label up. Safe for concurrent use.
type Counters struct {
	byName sync.Map // policy name -> *policyCounters
	// cycles counts the tallies made per point, to time one in
	// TimingSample.
	cycles [4]atomic.Uint64
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
	p = p.Base() // the copies bound to params objects count as their policy
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

// TimeBudgetExceededTotal counts the evaluations cut off by a scheduling
// cycle's CEL time budget, by the policy and rule that were running.
var TimeBudgetExceededTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "celsched_policy_time_budget_exceeded_total",
	Help: "Evaluations cut off because the CEL time budget of a pod's scheduling cycle (CELFilter's evaluationBudget) " +
		"was spent while they ran, by policy and rule (filters/NAME, scores/NAME, match/NAME): the slow rules. " +
		"Rules not evaluated because the budget was already spent are not counted here.",
}, []string{"policy", "rule"})

// CutOff returns the error of a decision that a cycle's time budget cut
// off while it ran (not one that was not evaluated because the budget was
// already spent), if any.
func CutOff(d *engine.Decision) error {
	for _, err := range append([]error{d.Err}, d.Ignored...) {
		if errors.Is(err, engine.ErrTimeBudgetExceeded) && !errors.Is(err, engine.ErrNotEvaluated) {
			return err
		}
	}
	return nil
}

// SlowReport is the last time a policy's rule was cut off by a cycle's time
// budget, and how often that happened for the policy's generation.
type SlowReport struct {
	Generation int64
	Rule       string
	Pod, Node  string
	Budget     time.Duration
	Time       time.Time
	Count      int64
}

// SlowLog keeps a SlowReport per policy, for its status (written by
// controllers.StatusReconciler). Safe for concurrent use.
type SlowLog struct {
	mu      sync.Mutex
	reports map[string]SlowReport
}

// Record notes a decision cut off by the time budget (err, from CutOff):
// the metric, and the policy's report (restarted when the policy's
// generation changed).
func (l *SlowLog) Record(d *engine.Decision, err error, pod, node string, budget time.Duration, now time.Time) {
	// The rule that was cut off: the decision's, or under Ignore (where the
	// decision may be another rule's, or none) the error's.
	cut := *d
	var ee *engine.EvalError
	if errors.As(err, &ee) {
		cut.Rule = ee.Rule
	}
	rule := cut.RuleLabel()
	TimeBudgetExceededTotal.WithLabelValues(d.Policy.Name, rule).Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reports == nil {
		l.reports = map[string]SlowReport{}
	}
	r := l.reports[d.Policy.Name]
	if r.Generation != d.Policy.Generation {
		r = SlowReport{Generation: d.Policy.Generation}
	}
	r.Rule, r.Pod, r.Node, r.Budget, r.Time = rule, pod, node, budget, now
	r.Count++
	l.reports[d.Policy.Name] = r
}

// Get returns a policy's report, if any.
func (l *SlowLog) Get(name string) (SlowReport, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.reports[name]
	return r, ok
}

// ErrorReport is the last evaluation error of a policy's rule (its full
// text, which pods do not see: see engine.Decision.String).
type ErrorReport struct {
	Generation int64
	Rule       string
	Error      string
	Time       time.Time
}

// errorNotifyInterval is how often at most a policy's new evaluation
// errors ask for a status write.
const errorNotifyInterval = 10 * time.Second

// ErrorLog keeps the last evaluation error per policy, for its status.
// Safe for concurrent use.
type ErrorLog struct {
	mu       sync.Mutex
	reports  map[string]ErrorReport
	notified map[string]time.Time
}

// Record notes the first evaluation error of a decision (d.Err, or the
// first one ignored), and says whether the policy's status should be
// written: the first error of a generation, then at most once per
// errorNotifyInterval, so that a rule failing on every node of every cycle
// does not write the status per pod.
func (l *ErrorLog) Record(d *engine.Decision, now time.Time) bool {
	err := d.Err
	if err == nil && len(d.Ignored) > 0 {
		err = d.Ignored[0]
	}
	var ee *engine.EvalError
	if !errors.As(err, &ee) || errors.Is(err, engine.ErrNotEvaluated) {
		return false
	}
	cut := *d
	cut.Rule = ee.Rule
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reports == nil {
		l.reports, l.notified = map[string]ErrorReport{}, map[string]time.Time{}
	}
	name := d.Policy.Name
	old, had := l.reports[name]
	l.reports[name] = ErrorReport{Generation: d.Policy.Generation, Rule: cut.RuleLabel(), Error: err.Error(), Time: now}
	if had && old.Generation == d.Policy.Generation && now.Sub(l.notified[name]) < errorNotifyInterval {
		return false
	}
	l.notified[name] = now
	return true
}

// Get returns a policy's last error, if any.
func (l *ErrorLog) Get(name string) (ErrorReport, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.reports[name]
	return r, ok
}
