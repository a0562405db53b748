// Package audit reports what SchedulingPolicies with enforcement Audit would
// have done: the scheduler plugins record each bound pod's would-be
// rejections here (an event on the pod, celsched_policy_would_reject_total)
// and collect them in a Log, which the status writer
// (controllers.AuditStatusWriter) adds to each policy's status.audit.
package audit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// WouldRejectTotal is served with the manager's other metrics (/metrics).
var WouldRejectTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "celsched_policy_would_reject_total",
	Help: "Pods bound although an Audit SchedulingPolicy, enforced, would have held them (preEnqueue/NAME) or kept " +
		"them off the node they were bound to (filters/NAME), by policy and rule.",
}, []string{"policy", "rule"})

func init() {
	ctrlmetrics.Registry.MustRegister(WouldRejectTotal)
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

// Log collects what Audit policies would have done until the status
// writer takes it.
type Log struct {
	// ByNamespace, when set, also collects each policy's evidence per
	// namespace of the pods, for the OpenReports writer (TakeNamespaces).
	ByNamespace atomic.Bool

	mu      sync.Mutex
	pending map[string]*Delta
	// namespaces is the evidence per namespace and policy, when
	// ByNamespace is set.
	namespaces map[NamespaceKey]*Delta
	// waves is the evidence per rollout wave of a policy (TakeWaves).
	waves map[WaveKey]*Delta
}

// WaveKey names one policy's evidence in one wave of its rollout (the
// index in spec.rollout.waves).
type WaveKey struct {
	Policy string
	Wave   int
}

// NamespaceKey names one policy's evidence in one namespace.
type NamespaceKey struct {
	Namespace, Policy string
}

// Stranded is the evidence of a wave's pending pods, which no scheduling
// cycle reports on: those the policy, enforced, would hold or leave with
// no node (verdict.PendingPods).
type Stranded struct {
	// Count is how many; Pods names the first MaxStrandedNames of them
	// (namespace/name, in name order).
	Count int64
	Pods  []string
}

// MaxStrandedNames is how many pods Stranded names.
const MaxStrandedNames = schedv1alpha1.MaxAuditViolations

// Delta is what one policy gained since the last status write.
type Delta struct {
	// Generation is the policy generation the counts are for.
	Generation             int64
	Evaluated, WouldReject int64
	// Violations are the newest first, at most MaxAuditViolations.
	Violations []schedv1alpha1.AuditViolation
}

// Report records, for one Audit policy and one bound pod, what the policy
// would have done: violations (none when it would have let the placement
// be) are counted, noted in one event on the pod with the policy as the
// related object (the events API folds events of the same pod, reason and
// related object into one series), and logged for the policy's status.
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
	l.mu.Lock()
	defer l.mu.Unlock()
	record(&l.pending, p.Name, p.Generation, violations, schedv1alpha1.MaxAuditViolations)
	if l.ByNamespace.Load() {
		record(&l.namespaces, NamespaceKey{Namespace: namespace, Policy: p.Name}, p.Generation, violations, MaxReportResults)
	}
	if wave := p.Wave(); wave >= 0 {
		record(&l.waves, WaveKey{Policy: p.Name, Wave: wave}, p.Generation, violations, schedv1alpha1.MaxAuditViolations)
	}
}

// TakeWaves returns and clears the evidence collected per rollout wave.
func (l *Log) TakeWaves() map[WaveKey]*Delta { return take(l, &l.waves) }

// ReturnWave puts back a wave's delta that could not be written.
func (l *Log) ReturnWave(key WaveKey, d *Delta) {
	putBack(l, &l.waves, key, d, schedv1alpha1.MaxAuditViolations)
}

// record counts one evaluated pod in the delta of key; the caller holds
// the Log's lock.
func record[K comparable](pending *map[K]*Delta, key K, generation int64, violations []schedv1alpha1.AuditViolation, keep int) {
	if *pending == nil {
		*pending = map[K]*Delta{}
	}
	d := (*pending)[key]
	if d == nil || d.Generation != generation {
		// A new spec restarts the counts.
		d = &Delta{Generation: generation}
		(*pending)[key] = d
	}
	d.Evaluated++
	if len(violations) > 0 {
		d.WouldReject++
		d.Violations = newestFirst(violations, d.Violations, keep)
	}
}

// MaxReportResults bounds the violations kept per namespace and policy
// (TakeNamespaces), and the results of an OpenReports Report.
const MaxReportResults = 50

// Take returns and clears what was collected, by policy name.
func (l *Log) Take() map[string]*Delta { return take(l, &l.pending) }

// TakeNamespaces returns and clears what was collected per namespace and
// policy (ByNamespace).
func (l *Log) TakeNamespaces() map[NamespaceKey]*Delta { return take(l, &l.namespaces) }

// Return puts back a delta that could not be written, merged with what
// was collected since.
func (l *Log) Return(name string, d *Delta) {
	putBack(l, &l.pending, name, d, schedv1alpha1.MaxAuditViolations)
}

// ReturnNamespace puts back a namespace's delta that could not be written.
func (l *Log) ReturnNamespace(key NamespaceKey, d *Delta) {
	putBack(l, &l.namespaces, key, d, MaxReportResults)
}

// take returns and clears one of the Log's collections.
func take[K comparable](l *Log, pending *map[K]*Delta) map[K]*Delta {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := *pending
	*pending = nil
	return out
}

// putBack merges a delta that could not be written with what one of the
// Log's collections gathered since, keeping the newest keep violations.
func putBack[K comparable](l *Log, pending *map[K]*Delta, key K, d *Delta, keep int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *pending == nil {
		*pending = map[K]*Delta{}
	}
	cur := (*pending)[key]
	switch {
	case cur == nil:
		(*pending)[key] = d
	case cur.Generation == d.Generation:
		cur.Evaluated += d.Evaluated
		cur.WouldReject += d.WouldReject
		cur.Violations = newestFirst(cur.Violations, d.Violations, keep)
	}
	// Otherwise the spec changed meanwhile: the old counts are dropped.
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
