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
	match  []engine.Decision
	mu     sync.Mutex
	byNode map[string][]engine.Decision
}

// DenyAudit records the decision of an Audit policy's filters that would
// have rejected a node.
func (c *Cycle) DenyAudit(node string, d engine.Decision) {
	c.audit.mu.Lock()
	defer c.audit.mu.Unlock()
	c.audit.byNode[node] = append(c.audit.byNode[node], d)
}

func (c *Cycle) auditDenials(node string) []engine.Decision {
	if c.audit == nil {
		return nil
	}
	c.audit.mu.Lock()
	defer c.audit.mu.Unlock()
	return c.audit.byNode[node]
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
