// Package audit reports what SchedulingPolicies with enforcement Audit would
// have done: the scheduler plugins record each bound pod's would-be
// rejections here (an event on the pod, celsched_policy_would_reject_total)
// and collect them in a Log, which the status writer
// (controllers.AuditStatusWriter) adds to each policy's status.audit, the
// report writer to the OpenReports Reports and the rollout controller to
// the waves of status.rollout.
package audit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// WouldRejectTotal is served with the manager's other metrics (/metrics).
var WouldRejectTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "celsched_policy_would_reject_total",
	Help: "Pods bound although an Audit SchedulingPolicy, enforced, would have held them (preEnqueue/NAME) or kept " +
		"them off the node they were bound to (filters/NAME), by policy and rule.",
}, []string{"policy", "rule"})

// Register registers the audit metric with r (the manager calls it once
// at start-up); registering it again is not an error.
func Register(r prometheus.Registerer) error {
	if err := r.Register(WouldRejectTotal); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) && already.ExistingCollector == WouldRejectTotal {
			return nil
		}
		return err
	}
	return nil
}

// ReasonWouldReject is the reason of the event on a pod that an Audit
// policy would have held or kept off its node.
const ReasonWouldReject = "AuditWouldReject"

// maxEventNote is the longest note the events API accepts.
const maxEventNote = 1024

// Violation is what an Audit decision would have done to a bound pod. Its
// message is what the pod would have shown: for a filter, the node's
// rejection as the pod's condition folds it; for a hold or a match, the
// rule's message or the error.
func Violation(d *engine.Decision, pod *corev1.Pod, node string, now metav1.Time) schedv1alpha1.AuditViolation {
	msg := d.Message
	switch {
	case d.Point == engine.PointFilter:
		msg = d.String()
	case d.Verdict == engine.Error:
		msg = engine.ErrorMessage(d.Err)
	}
	v := schedv1alpha1.AuditViolation{
		Pod:     pod.Namespace + "/" + pod.Name,
		Node:    node,
		Rule:    d.RuleLabel(),
		Message: engine.Truncate(msg, schedv1alpha1.MaxMessageLength),
		Time:    now,
	}
	if d.Policy != nil && d.Policy.HasOverrides() {
		v.EnforcedBy = d.Policy.EnforcedBy
	}
	return v
}

// Log is the evidence cache of Audit decisions: what the scheduler's
// plugins saw, not yet written, per policy (status.audit), per namespace
// and policy (the OpenReports Reports) and per rollout wave and policy
// (status.rollout). The plugins write it (Report); each writer reads a
// policy's evidence (Unwritten), writes it, and only then subtracts what
// it wrote (Written): a write that fails leaves the evidence where it was,
// with what came since.
type Log struct {
	// ByNamespace, when set, also collects each policy's evidence per
	// namespace of the pods, for the OpenReports writer.
	ByNamespace atomic.Bool

	// Policies is the evidence per policy (the sub-key is always the
	// zero struct{}).
	Policies Evidence[struct{}]
	// Namespaces is the evidence per policy and namespace, when
	// ByNamespace is set.
	Namespaces Evidence[string]
	// Waves is the evidence per policy and rollout wave (the index in
	// spec.rollout.waves).
	Waves Evidence[int]
}

// Stranded is the evidence of a wave's pending pods, which no scheduling
// cycle reports on: those the policy, enforced, would hold or leave with
// no node (controllers.PendingPods).
type Stranded struct {
	// Count is how many; Pods names the first MaxStrandedNames of them
	// (namespace/name, in name order).
	Count int64
	Pods  []string
}

// MaxStrandedNames is how many pods Stranded names.
const MaxStrandedNames = schedv1alpha1.MaxAuditViolations

// Delta is what one policy (in a namespace, a wave) gained since its last
// write.
type Delta struct {
	// Generation is the policy generation the counts are for.
	Generation             int64
	Evaluated, WouldReject int64
	// Violations are the newest first, at most MaxAuditViolations (per
	// namespace, MaxReportResults).
	Violations []schedv1alpha1.AuditViolation

	// added counts the violations ever added to this delta, so that
	// Written keeps those added after the copy it is given.
	added int64
}

// Report records, for one Audit policy and one bound pod, what the policy
// would have done: violations (none when it would have let the placement
// be) are counted, noted in one event on the pod with the policy as the
// related object (the events API folds events of the same pod, reason and
// related object into one series), and kept for the policy's writers.
func (l *Log) Report(recorder events.EventRecorder, p *engine.CompiledPolicy, pod *corev1.Pod, node string, violations []schedv1alpha1.AuditViolation) {
	if len(violations) > 0 {
		parts := make([]string, len(violations))
		for i, v := range violations {
			WouldRejectTotal.WithLabelValues(p.Name, v.Rule).Inc()
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
		recorder.Eventf(pod, related, corev1.EventTypeNormal, ReasonWouldReject, "Scheduling", "%s", engine.Truncate(note, maxEventNote))
	}
	l.record(p, pod.Namespace, violations)
}

// record counts one evaluated pod of a namespace for a policy.
func (l *Log) record(p *engine.CompiledPolicy, namespace string, violations []schedv1alpha1.AuditViolation) {
	l.Policies.record(p.Name, struct{}{}, p.Generation, violations, schedv1alpha1.MaxAuditViolations)
	if l.ByNamespace.Load() {
		l.Namespaces.record(p.Name, namespace, p.Generation, violations, MaxReportResults)
	}
	if wave := p.Wave(); wave >= 0 {
		l.Waves.record(p.Name, wave, p.Generation, violations, schedv1alpha1.MaxAuditViolations)
	}
}

// MaxReportResults bounds the violations kept per namespace and policy,
// and the results of an OpenReports Report.
const MaxReportResults = 50

// Evidence is the evidence not yet written of one kind, by policy and a
// sub-key S (a namespace, a wave). Key: policy, then S. Bound: one Delta
// per policy and sub-key seen since its last write, each with at most its
// kind's number of violations. Invalidated: Written subtracts what a write
// held (an entry written in full leaves); a new policy generation replaces
// an entry (its counts restart, as the status's); Drop removes a deleted
// policy's. Writers: the plugins add (Log.Report); one controller per kind
// subtracts.
//
// A policy whose evidence goes from none to some is signalled once (Wake,
// Touched): its writer is woken for it, and, until it has written all of
// it, requeues itself; so a policy is signalled at most once per write,
// whatever the rate of pods.
type Evidence[S comparable] struct {
	mu        sync.Mutex
	unwritten map[string]map[S]*Delta
	touches   Touches
}

// record counts one evaluated pod in the delta of (policy, sub), keeping
// the newest keep violations.
func (e *Evidence[S]) record(policy string, sub S, generation int64, violations []schedv1alpha1.AuditViolation, keep int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unwritten == nil {
		e.unwritten = map[string]map[S]*Delta{}
	}
	subs := e.unwritten[policy]
	if subs == nil {
		subs = map[S]*Delta{}
		e.unwritten[policy] = subs
		e.touches.Touch(policy)
	}
	d := subs[sub]
	if d == nil || d.Generation != generation {
		// A new spec restarts the counts.
		d = &Delta{Generation: generation}
		subs[sub] = d
	}
	d.Evaluated++
	if len(violations) > 0 {
		d.WouldReject++
		d.added += int64(len(violations))
		d.Violations = newestFirst(violations, d.Violations, keep)
	}
}

// Wake receives when policies were touched since the last Touched.
func (e *Evidence[S]) Wake() <-chan struct{} { return e.touches.Wake() }

// Touched returns and clears the policies that gained evidence after
// having none unwritten.
func (e *Evidence[S]) Touched() []string { return e.touches.Touched() }

// Touches is a set of policies touched since it was last read, and a
// wake-up when it gains one: how a writer learns, without polling and
// without losing one, which policies have something new to write. Bound:
// the policies touched between two reads. Safe for concurrent use; Touch
// never blocks.
type Touches struct {
	mu      sync.Mutex
	touched map[string]struct{}
	wake    chan struct{}
}

// Touch marks a policy touched and wakes the reader of Wake.
func (t *Touches) Touch(policy string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	t.touched[policy] = struct{}{}
	select {
	case t.wakeChan() <- struct{}{}:
	default: // a wake-up is pending already
	}
}

func (t *Touches) wakeChan() chan struct{} {
	if t.wake == nil {
		t.wake = make(chan struct{}, 1)
	}
	return t.wake
}

// Wake receives when policies were touched since the last Touched.
func (t *Touches) Wake() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wakeChan()
}

// Touched returns and clears the policies touched, sorted.
func (t *Touches) Touched() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Sorted(maps.Keys(t.touched))
	t.touched = nil
	return out
}

// Unwritten returns a copy of a policy's evidence not yet written, by
// sub-key; nil when there is none.
func (e *Evidence[S]) Unwritten(policy string) map[S]Delta {
	e.mu.Lock()
	defer e.mu.Unlock()
	subs := e.unwritten[policy]
	if len(subs) == 0 {
		return nil
	}
	out := make(map[S]Delta, len(subs))
	for k, d := range subs {
		c := *d
		c.Violations = slices.Clone(d.Violations)
		out[k] = c
	}
	return out
}

// Written subtracts from a policy's evidence what a write held (a copy
// Unwritten returned, or part of it): its counts, and the violations
// added before that copy. What was added since stays; an entry whose
// generation changed since stays whole. It says whether any evidence of
// the policy remains unwritten.
func (e *Evidence[S]) Written(policy string, written map[S]Delta) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	subs := e.unwritten[policy]
	for k, w := range written {
		cur := subs[k]
		if cur == nil || cur.Generation != w.Generation {
			continue
		}
		cur.Evaluated -= w.Evaluated
		cur.WouldReject -= w.WouldReject
		if newer := cur.added - w.added; newer < int64(len(cur.Violations)) {
			cur.Violations = cur.Violations[:newer]
		}
		if cur.Evaluated <= 0 {
			delete(subs, k)
		}
	}
	if len(subs) == 0 {
		delete(e.unwritten, policy)
		return false
	}
	return true
}

// Drop forgets a policy's evidence: the policy is gone.
func (e *Evidence[S]) Drop(policy string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.unwritten, policy)
}

// Policies returns the policies with evidence not yet written.
func (e *Evidence[S]) Policies() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.unwritten))
	for p := range e.unwritten {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Apply adds the delta to a policy's audit status and returns the result;
// counts of an older generation restart.
func (d *Delta) Apply(status *schedv1alpha1.AuditStatus, now time.Time) *schedv1alpha1.AuditStatus {
	out := &schedv1alpha1.AuditStatus{ObservedGeneration: d.Generation}
	if status != nil && status.ObservedGeneration == d.Generation {
		out.Evaluated, out.WouldReject, out.LastViolations = status.Evaluated, status.WouldReject, status.LastViolations
	}
	out.Evaluated += d.Evaluated
	out.WouldReject += d.WouldReject
	out.LastViolations = newestFirst(d.Violations, out.LastViolations, schedv1alpha1.MaxAuditViolations)
	t := metav1.NewTime(now)
	out.LastUpdateTime = &t
	return out
}

// newestFirst puts newer before older, keeping the first keep.
func newestFirst(newer, older []schedv1alpha1.AuditViolation, keep int) []schedv1alpha1.AuditViolation {
	out := append(slices.Clone(newer), older...)
	if len(out) > keep {
		out = out[:keep]
	}
	return out
}
