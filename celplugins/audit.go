package celplugins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// Metric results.
const (
	ResultAllow  = "allow"
	ResultDeny   = "deny"
	ResultError  = "error"
	ResultScored = "scored"
)

// The metrics are served with the manager's other metrics (/metrics).
var (
	evaluationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "celsched_policy_evaluations_total",
		Help: "Evaluations of SchedulingPolicy rules, by policy, rule (preEnqueue/NAME, filters/NAME, scores/NAME) and " +
			"result (allow, deny or error for preEnqueue rules and filters; scored or error for scores). Filters and scores " +
			"are evaluated once per node; rules after the first false one are not evaluated. Audit policies included.",
	}, []string{"policy", "rule", "result"})
	wouldRejectTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "celsched_policy_would_reject_total",
		Help: "Pods bound although an Audit SchedulingPolicy, enforced, would have held them (preEnqueue/NAME) or kept " +
			"them off the node they were bound to (filters/NAME), by policy and rule.",
	}, []string{"policy", "rule"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(evaluationsTotal, wouldRejectTotal)
}

// ruleCounters are one rule's evaluation counters.
type ruleCounters struct {
	name             string
	allow, deny, err prometheus.Counter
}

// policyCounters are the counters of one compiled policy version, so that
// evaluations increment counters without looking labels up.
type policyCounters struct {
	policy              *engine.CompiledPolicy
	preEnqueue, filters []ruleCounters
	scores              []ruleCounters // allow counts "scored"
}

func newPolicyCounters(p *engine.CompiledPolicy) *policyCounters {
	rules := func(kind string, names []string) []ruleCounters {
		out := make([]ruleCounters, len(names))
		for i, n := range names {
			rule := kind + "/" + n
			out[i] = ruleCounters{
				name:  n,
				allow: evaluationsTotal.WithLabelValues(p.Name, rule, ResultAllow),
				deny:  evaluationsTotal.WithLabelValues(p.Name, rule, ResultDeny),
				err:   evaluationsTotal.WithLabelValues(p.Name, rule, ResultError),
			}
		}
		return out
	}
	pc := &policyCounters{policy: p, preEnqueue: rules("preEnqueue", p.PreEnqueueRuleNames()), filters: rules("filters", p.FilterRuleNames())}
	for _, s := range p.ScoreRules() {
		rule := "scores/" + s.Name
		pc.scores = append(pc.scores, ruleCounters{
			name:  s.Name,
			allow: evaluationsTotal.WithLabelValues(p.Name, rule, ResultScored),
			err:   evaluationsTotal.WithLabelValues(p.Name, rule, ResultError),
		})
	}
	return pc
}

// counters returns the counters of a policy version.
func (rt *Runtime) counters(p *engine.CompiledPolicy) *policyCounters {
	if v, ok := rt.metrics.Load(p.Name); ok {
		if pc := v.(*policyCounters); pc.policy == p {
			return pc
		}
	}
	pc := newPolicyCounters(p)
	rt.metrics.Store(p.Name, pc)
	return pc
}

// CountPreEnqueue counts an evaluation of the policy's preEnqueue rules
// (the result of CompiledPolicy.PreEnqueue).
func (rt *Runtime) CountPreEnqueue(p *engine.CompiledPolicy, rej *engine.Rejection, err error) {
	countRules(rt.counters(p).preEnqueue, rej, err)
}

// CountFilter counts an evaluation of the policy's filters on a node (the
// result of CompiledPolicy.Filter).
func (rt *Runtime) CountFilter(p *engine.CompiledPolicy, rej *engine.Rejection, err error) {
	countRules(rt.counters(p).filters, rej, err)
}

// CountScore counts an evaluation of the policy's score rules on a node
// (the error of CompiledPolicy.Score): rules before a failing one scored.
func (rt *Runtime) CountScore(p *engine.CompiledPolicy, err error) {
	countRules(rt.counters(p).scores, nil, err)
}

// countRules counts rules evaluated in order up to the first false one or
// the first error. A compile error evaluates nothing.
func countRules(rules []ruleCounters, rej *engine.Rejection, err error) {
	stop := -1
	switch {
	case err != nil:
		stop = failedRule(rules, err)
		if stop < 0 {
			return
		}
	case rej != nil:
		stop = slices.IndexFunc(rules, func(r ruleCounters) bool { return r.name == rej.Rule })
	}
	if stop < 0 {
		stop = len(rules)
	}
	for i := range stop {
		rules[i].allow.Inc()
	}
	if stop < len(rules) {
		if err != nil {
			rules[stop].err.Inc()
		} else {
			rules[stop].deny.Inc()
		}
	}
}

// failedRule is the index of the rule an evaluation error is about, or -1.
func failedRule(rules []ruleCounters, err error) int {
	var ee *engine.EvalError
	if !errors.As(err, &ee) {
		return -1
	}
	return slices.IndexFunc(rules, func(r ruleCounters) bool { return r.name == ee.Rule })
}

// auditDenials are the filters of Audit policies that were false (or
// failed with failurePolicy Fail) per node in one scheduling cycle; Filter
// runs on nodes in parallel.
type auditDenials struct {
	mu     sync.Mutex
	byNode map[string][]denial
}

type denial struct {
	policy, rule, message string
}

// DenyAudit records that an Audit policy's filter would reject a node.
func (c *Cycle) DenyAudit(node, policy, rule, message string) {
	c.audit.mu.Lock()
	defer c.audit.mu.Unlock()
	c.audit.byNode[node] = append(c.audit.byNode[node], denial{policy: policy, rule: rule, message: message})
}

func (c *Cycle) auditDenials(node string) []denial {
	if c.audit == nil {
		return nil
	}
	c.audit.mu.Lock()
	defer c.audit.mu.Unlock()
	return c.audit.byNode[node]
}

// ReportAudit reports, once a pod is bound, what the matching Audit
// policies would have done: for each policy that would have held the pod
// or kept it off the node, the would-reject counter, an event on the pod,
// and the status summary; every matching Audit policy counts the pod as
// evaluated.
func (rt *Runtime) ReportAudit(ctx context.Context, c *Cycle, recorder events.EventRecorder, pod *corev1.Pod, node string) {
	if len(c.Audit) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	now := metav1.Now()
	denials := c.auditDenials(node)
	for _, p := range c.Audit {
		var violations []schedv1alpha1.AuditViolation
		add := func(rule, message string) {
			violations = append(violations, schedv1alpha1.AuditViolation{
				Pod: pod.Namespace + "/" + pod.Name, Node: node, Rule: rule, Message: Truncate(message, schedv1alpha1.MaxMessageLength), Time: now,
			})
		}
		if p.HasPreEnqueue() {
			rej, err := p.PreEnqueue(ctx, c.Pod)
			switch {
			case err != nil && p.FailClosed():
				add("preEnqueue/"+RuleOf(err), ErrorMessage(err))
			case rej != nil:
				add("preEnqueue/"+rej.Rule, rej.Message)
			}
		}
		for _, d := range denials {
			if d.policy == p.Name {
				add("filters/"+d.rule, d.message)
			}
		}
		if len(violations) > 0 {
			reportViolations(recorder, p, pod, node, violations)
			logger.V(2).Info("Audit SchedulingPolicy would have rejected the placement", "pod", klog.KObj(pod), "node", node, "policy", p.Name, "violations", len(violations))
		}
		rt.AuditLog.record(p, violations)
	}
}

// reportViolations counts the violations and records one event on the pod
// per policy, with the policy as the related object: the events API folds
// events of the same pod, reason and related object into one series
// whatever their notes.
func reportViolations(recorder events.EventRecorder, p *engine.CompiledPolicy, pod *corev1.Pod, node string, violations []schedv1alpha1.AuditViolation) {
	parts := make([]string, len(violations))
	for i, v := range violations {
		wouldRejectTotal.WithLabelValues(p.Name, v.Rule).Inc()
		what := "kept it off node " + node
		if strings.HasPrefix(v.Rule, "preEnqueue/") {
			what = "held it"
		}
		parts[i] = fmt.Sprintf("would have %s (rule %s: %s)", what, v.Rule, v.Message)
	}
	related := &schedv1alpha1.SchedulingPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedv1alpha1.GroupVersion.String(), Kind: "SchedulingPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
	}
	note := fmt.Sprintf("SchedulingPolicy %s (Audit), enforced, %s", p.Name, strings.Join(parts, "; "))
	recorder.Eventf(pod, related, corev1.EventTypeNormal, ReasonAuditWouldReject, "Scheduling", "%s", Truncate(note, maxEventNote))
}

// maxEventNote is the longest note the events API accepts.
const maxEventNote = 1024

// ReasonAuditWouldReject is the reason of the event on a pod that an Audit
// policy would have held or kept off its node.
const ReasonAuditWouldReject = "AuditWouldReject"

// RuleOf names the rule an evaluation error is about ("-" for none).
func RuleOf(err error) string {
	var ee *engine.EvalError
	if errors.As(err, &ee) && ee.Rule != "" {
		return ee.Rule
	}
	return "-"
}

// Truncate shortens s to at most n bytes, ending with "..." when cut, and
// never in the middle of a UTF-8 character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-3]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// AuditLog collects what Audit policies would have done until the status
// writer (controllers.AuditStatusWriter) takes it.
type AuditLog struct {
	mu      sync.Mutex
	pending map[string]*AuditDelta
}

// AuditDelta is what one policy gained since the last status write.
type AuditDelta struct {
	// Generation is the policy generation the counts are for.
	Generation             int64
	Evaluated, WouldReject int64
	// Violations are the newest first, at most MaxAuditViolations.
	Violations []schedv1alpha1.AuditViolation
}

func (l *AuditLog) record(p *engine.CompiledPolicy, violations []schedv1alpha1.AuditViolation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[string]*AuditDelta{}
	}
	d := l.pending[p.Name]
	if d == nil || d.Generation != p.Generation {
		// A new spec restarts the counts.
		d = &AuditDelta{Generation: p.Generation}
		l.pending[p.Name] = d
	}
	d.Evaluated++
	if len(violations) > 0 {
		d.WouldReject++
		d.Violations = newestFirst(violations, d.Violations)
	}
}

// Take returns and clears what was collected, by policy name.
func (l *AuditLog) Take() map[string]*AuditDelta {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.pending
	l.pending = nil
	return out
}

// Return puts back a delta that could not be written, merged with what
// was collected since.
func (l *AuditLog) Return(name string, d *AuditDelta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[string]*AuditDelta{}
	}
	cur := l.pending[name]
	switch {
	case cur == nil:
		l.pending[name] = d
	case cur.Generation == d.Generation:
		cur.Evaluated += d.Evaluated
		cur.WouldReject += d.WouldReject
		cur.Violations = newestFirst(cur.Violations, d.Violations)
	}
	// Otherwise the spec changed meanwhile: the old counts are dropped.
}

// Apply adds the delta to a policy's audit status and returns the result;
// counts of an older generation restart.
func (d *AuditDelta) Apply(status *schedv1alpha1.AuditStatus, now time.Time) *schedv1alpha1.AuditStatus {
	out := &schedv1alpha1.AuditStatus{ObservedGeneration: d.Generation}
	if status != nil && status.ObservedGeneration == d.Generation {
		out.Evaluated, out.WouldReject, out.LastViolations = status.Evaluated, status.WouldReject, status.LastViolations
	}
	out.Evaluated += d.Evaluated
	out.WouldReject += d.WouldReject
	out.LastViolations = newestFirst(d.Violations, out.LastViolations)
	t := metav1.NewTime(now)
	out.LastUpdateTime = &t
	return out
}

// newestFirst puts newer before older, keeping MaxAuditViolations.
func newestFirst(newer, older []schedv1alpha1.AuditViolation) []schedv1alpha1.AuditViolation {
	out := append(slices.Clone(newer), older...)
	if len(out) > schedv1alpha1.MaxAuditViolations {
		out = out[:schedv1alpha1.MaxAuditViolations]
	}
	return out
}
