package celplugins

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// auditDenials are the decisions of Audit policies that would have acted
// in one scheduling cycle: at match time, and per node (Filter runs on nodes
// in parallel).
type auditDenials struct {
	// match are the decisions of the match conditions and preEnqueue
	// rules that would have acted; written in Prepare only.
	match []engine.Decision
	mu    sync.Mutex
	// byNode are the nodes' denials in the order recorded, each naming
	// its decision in decisions: a node-only Audit filter denies a
	// quarter of a cluster's nodes with one decision, which is kept once
	// (a cycle on 5000 nodes records hundreds of denials: a map of
	// decision slices cost about 40 KB per pod).
	byNode    []nodeDenial
	decisions []engine.Decision
}

// nodeDenial is a node's denial: the index of its decision.
type nodeDenial struct {
	node     string
	decision int
}

// DenyAudit records the decision of an Audit policy's filters that would
// have rejected a node; it keeps a copy of d when it holds no equal one.
func (c *Cycle) DenyAudit(node string, d *engine.Decision) {
	a := c.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.index(d)
	a.byNode = append(a.byNode, nodeDenial{node: node, decision: i})
}

// index returns the index of a decision equal to d in decisions, adding d
// when there is none. Decisions with an error are not compared (an error
// value may not be comparable), and are each kept.
func (a *auditDenials) index(d *engine.Decision) int {
	if d.Err == nil && len(d.Ignored) == 0 {
		for i := len(a.decisions) - 1; i >= 0; i-- {
			if same(&a.decisions[i], d) {
				return i
			}
		}
	}
	a.decisions = append(a.decisions, *d)
	return len(a.decisions) - 1
}

// same says whether two decisions without errors are equal (the rule's
// static message is the policy's and rule's).
func same(a, b *engine.Decision) bool {
	return a.Err == nil && len(a.Ignored) == 0 && a.Policy == b.Policy && a.Point == b.Point &&
		a.Verdict == b.Verdict && a.Rule == b.Rule && a.Message == b.Message
}

func (c *Cycle) auditDenials(node string) []engine.Decision {
	if c.audit == nil {
		return nil
	}
	a := c.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []engine.Decision
	for _, nd := range a.byNode {
		if nd.node == node {
			out = append(out, a.decisions[nd.decision])
		}
	}
	return out
}

// ReportAudit reports, once a pod is bound, what the matching Audit
// policies would have done in its cycle: for each, the decisions that would
// have rejected the pod (match), held it (preEnqueue, evaluated in Prepare)
// or kept it off its node (filters) become violations (audit.Log.Report);
// every matching Audit policy counts the pod as evaluated. It evaluates
// nothing.
func (r *Reporter) ReportAudit(ctx context.Context, c *Cycle, recorder events.EventRecorder, pod *corev1.Pod, node string) {
	if r.Dry || len(c.Audit) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	now := metav1.Now()
	denials := c.auditDenials(node)
	for _, p := range c.Audit {
		var violations []schedv1alpha1.AuditViolation
		for _, d := range c.audit.match {
			if d.Policy == p {
				violations = append(violations, audit.Violation(&d, pod, node, now))
			}
		}
		for _, d := range denials {
			if d.Policy == p {
				violations = append(violations, audit.Violation(&d, pod, node, now))
			}
		}
		if len(violations) > 0 {
			logger.V(2).Info("Audit SchedulingPolicy would have rejected the placement", "pod", klog.KObj(pod), "node", node, "policy", p.Name, "violations", len(violations))
		}
		r.AuditLog.Report(recorder, p, pod, node, violations)
	}
}
