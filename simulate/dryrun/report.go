package dryrun

import (
	"context"
	"errors"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
)

// Report is the outcome of a dry run. The verdict (PreEnqueue, PreFilter,
// each node's RejectedBy, Feasible, Ranking) is the one evaluator's
// (verdict.Result); Policies is the engine's detail for every policy.
type Report struct {
	Pod           string  `json:"pod"`
	SchedulerName string  `json:"schedulerName"`
	Plugins       Plugins `json:"plugins"`
	// Notes say how the input differs from what the scheduler sees (a
	// bound pod re-evaluated, draft policies).
	Notes []string `json:"notes,omitempty"`
	verdict.Result
	// Group is, for a member of a pod group, what kube-scheduler does
	// with the whole group (its pending members, all or nothing): placed
	// where, or why not, and the placements the policies refused.
	Group *verdict.GroupResult `json:"group,omitempty"`
	// Preemption is, for a pod that no node fits, what kube-scheduler's
	// preemption would do (DefaultPreemption's dry run with the victim
	// rules): which node and victims, or why not, and the victims the
	// rules protected. It reads the pod's spec.priority (as admission sets
	// it from priorityClassName) and no PodDisruptionBudget.
	Preemption *PreemptionResult `json:"preemption,omitempty"`
	Policies   []*PolicyResult   `json:"policies"`
}

// The evaluator's types, as reports show them.
type (
	Plugins    = verdict.Plugins
	Rejection  = verdict.Rejection
	NodeResult = verdict.NodeResult
	RankedNode = verdict.RankedNode
	// GroupResult is what kube-scheduler does with a pod group.
	GroupResult = verdict.GroupResult
	// PreemptionResult is what kube-scheduler's preemption would do.
	PreemptionResult = verdict.PreemptionResult
)

// PolicyResult is one policy's evaluation for the pod.
type PolicyResult struct {
	Name        string `json:"name"`
	Enforcement string `json:"enforcement"`
	// EnforcedBy is, for a policy with enforcementOverrides, the field
	// Enforcement comes from for the pod's namespace
	// (spec.enforcementOverrides[i] or spec.enforcement).
	EnforcedBy string `json:"enforcedBy,omitempty"`
	// Params is the params object the policy was evaluated with, e.g.
	// "ConfigMap team-a/placement"; a parameterized policy has one result
	// per params object found.
	Params string `json:"params,omitempty"`
	// CompileError is set when the policy does not compile.
	CompileError string `json:"compileError,omitempty"`
	Matched      bool   `json:"matched"`
	Reason       string `json:"reason"`
	// MatchError is a match condition's error.
	MatchError string                   `json:"matchError,omitempty"`
	PreEnqueue []RuleResult             `json:"preEnqueue,omitempty"`
	Filters    map[string][]RuleResult  `json:"filters,omitempty"`
	Scores     map[string][]ScoreResult `json:"scores,omitempty"`
}

// Label names the policy in a table: its name, and the params object it
// was evaluated with, if any ("tenant-zones [ConfigMap team-a/placement]").
func (p *PolicyResult) Label() string {
	if p.Params == "" {
		return p.Name
	}
	return p.Name + " [" + p.Params + "]"
}

// RuleResult is one preEnqueue or filter rule's verdict.
type RuleResult struct {
	Rule    string `json:"rule"`
	Passed  bool   `json:"passed"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Why are the values of the rule's sub-expressions, when it is false
	// or fails and they were asked for (Input.Why).
	Why []engine.Step `json:"why,omitempty"`
}

// ScoreResult is one score rule's value on a node: raw, and normalized
// across the feasible nodes (unset on infeasible nodes).
type ScoreResult struct {
	Rule       string  `json:"rule"`
	Raw        float64 `json:"raw"`
	Normalized *int64  `json:"normalized,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// explain fills Policies with every policy's detail: whether it applies
// and why (its match), its preEnqueue rules, and, per node, what the CEL
// plugins decided in the run that gave the verdict (rec): each filter
// rule's verdict with the false ones' sub-expressions when why is set, and
// the score rules' values on the nodes scored.
func (r *Report) explain(ctx context.Context, rt *celplugins.Runtime, policies []*engine.CompiledPolicy, pod *corev1.Pod, rec *celplugins.Record, why *engine.Why) error {
	in, err := rt.Inputs.PodInput(pod)
	if err != nil {
		return err
	}
	for _, base := range policies {
		matches := base.MatchAll(ctx, in)
		for i := range matches {
			if err := r.explainPolicy(ctx, &matches[i], in, rec, why); err != nil {
				return err
			}
		}
	}
	return nil
}

// explainPolicy adds one policy's detail (of a parameterized one, with
// one params object).
func (r *Report) explainPolicy(ctx context.Context, m *engine.MatchResult, in *engine.PodInput, rec *celplugins.Record, why *engine.Why) error {
	p := m.Decision.Policy
	pr := &PolicyResult{Name: p.Name, Enforcement: string(p.Enforcement)}
	if p.HasOverrides() {
		pr.EnforcedBy = p.EnforcedBy
	}
	if params := p.Params(); params != nil {
		pr.Params = params.String()
	}
	r.Policies = append(r.Policies, pr)
	pr.Matched, pr.Reason = m.Matches, m.Reason()
	var ce *engine.CompileError
	switch err := p.Err(); {
	case errors.As(err, &ce):
		pr.CompileError = engine.ErrorMessage(err)
		return nil
	case m.Decision.Verdict == engine.Error:
		pr.MatchError = m.Decision.Err.Error()
		return nil
	case m.Decision.Verdict == engine.Reject: // no params found, Deny
		pr.MatchError = m.Decision.Message
		return nil
	case len(m.Decision.Ignored) > 0:
		pr.MatchError = m.Decision.Ignored[0].Error() + " (failurePolicy Ignore: the policy is skipped)"
		return nil
	case !m.Matches:
		return nil
	}
	if p.HasPreEnqueue() {
		verdicts, _ := p.PreEnqueueRules(ctx, in)
		pr.PreEnqueue = ruleResults(verdicts)
		if err := explainFalse(pr.PreEnqueue, func(rule string) ([]engine.Step, error) {
			return why.PreEnqueue(ctx, p, in, rule)
		}, why); err != nil {
			return err
		}
	}
	if p.HasFilters() {
		pr.Filters = map[string][]RuleResult{}
	}
	if p.HasScores() {
		pr.Scores = map[string][]ScoreResult{}
	}
	for _, n := range r.Nodes {
		if p.HasFilters() {
			if o := outcomeOf(rec.Filters(n.Name), pr, func(o *celplugins.FilterOutcome) *engine.Decision { return &o.Decision }); o != nil {
				pr.Filters[n.Name] = filterResults(o)
			}
		}
		if p.HasScores() {
			if o := outcomeOf(rec.Scores(n.Name), pr, func(o *celplugins.ScoreOutcome) *engine.Decision { return &o.Decision }); o != nil {
				pr.Scores[n.Name] = scoreResults(p, o)
			}
		}
	}
	if p.HasScores() {
		normalize(pr, p, r.Feasible)
	}
	return nil
}

// outcomeOf returns the outcome, among a node's, of the policy (with the
// params object) that pr reports, or nil when the plugins did not
// evaluate it there.
func outcomeOf[T any](outcomes []T, pr *PolicyResult, decision func(*T) *engine.Decision) *T {
	for i := range outcomes {
		d := decision(&outcomes[i])
		if d.Policy == nil || d.Policy.Name != pr.Name {
			continue
		}
		params := ""
		if ps := d.Policy.Params(); ps != nil {
			params = ps.String()
		}
		if params == pr.Params {
			return &outcomes[i]
		}
	}
	return nil
}

// filterResults are a filter policy's rules on a node as the plugin
// recorded them, with the sub-expressions of those that are false.
func filterResults(o *celplugins.FilterOutcome) []RuleResult {
	out := ruleResults(o.Rules)
	for i := range out {
		if !out[i].Passed {
			out[i].Why = o.Why[out[i].Rule]
		}
	}
	return out
}

// explainFalse adds the sub-expressions' values to the rules that are
// false or failed, when why is set.
func explainFalse(results []RuleResult, explain func(rule string) ([]engine.Step, error), why *engine.Why) error {
	if why == nil {
		return nil
	}
	for i := range results {
		if results[i].Passed {
			continue
		}
		steps, err := explain(results[i].Rule)
		if err != nil {
			return err
		}
		results[i].Why = steps
	}
	return nil
}

func ruleResults(verdicts []engine.RuleVerdict) []RuleResult {
	out := make([]RuleResult, len(verdicts))
	for i, v := range verdicts {
		out[i] = RuleResult{Rule: v.Rule, Passed: v.Passed, Message: v.Message}
		if v.Err != nil {
			out[i].Error = v.Err.Error()
		}
	}
	return out
}

// scoreResults are a score policy's rules on a node as CELScore recorded
// them: each rule's raw value, or why it has none.
func scoreResults(p *engine.CompiledPolicy, o *celplugins.ScoreOutcome) []ScoreResult {
	rules := p.ScoreRules()
	out := make([]ScoreResult, len(rules))
	d := &o.Decision
	failed := map[string]error{}
	for _, err := range d.Ignored {
		failed[ruleOf(err)] = err
	}
	stopped := false
	for i, rule := range rules {
		out[i].Rule = rule.Name
		switch {
		case stopped:
			out[i].Error = "not evaluated: an earlier rule failed (failurePolicy Fail)"
		case d.Verdict == engine.Error && d.Rule == rule.Name:
			out[i].Error = d.Err.Error()
			stopped = true
		case failed[rule.Name] != nil:
			out[i].Error = failed[rule.Name].Error() + " (failurePolicy Ignore: scores 0)"
		default:
			out[i].Raw = o.Raw[i]
		}
	}
	return out
}

// ruleOf names the rule an evaluation error is about.
func ruleOf(err error) string {
	var ee *engine.EvalError
	if errors.As(err, &ee) {
		return ee.Rule
	}
	return ""
}

// normalize sets each score rule's normalized value on the feasible nodes
// where the rule evaluated, with the score plugin's normalization: nodes
// where it failed take no part.
func normalize(pr *PolicyResult, p *engine.CompiledPolicy, feasible []string) {
	for i, rule := range p.ScoreRules() {
		raw := make([]float64, len(feasible))
		for j, n := range feasible {
			raw[j] = math.NaN()
			if s := pr.Scores[n]; s[i].Error == "" {
				raw[j] = s[i].Raw
			}
		}
		for j, v := range engine.NormalizeScores(raw, rule.Normalization) {
			if s := pr.Scores[feasible[j]]; s[i].Error == "" {
				s[i].Normalized = &v
			}
		}
	}
}
