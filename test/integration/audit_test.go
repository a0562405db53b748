package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/engine/metrics"
	"github.com/celsched/celsched/test/builder"
)

// TestAuditReporting: an Audit policy changes no placement, and reports
// what it would have done: an event on the pod, the would-reject and
// evaluation counters, and the summary in its status, which restarts when
// the spec changes.
func TestAuditReporting(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "audit-gold", labels: map[string]string{"tier": "gold"}},
		nodeSpec{name: "audit-plain"},
	)
	p := builder.MakePolicy("audit-gold-only").FilterRules(schedv1alpha1.Rule{Name: "gold-only", Expression: "node.metadata.?labels[?'tier'].orValue('') == 'gold'", Message: "not a gold node"}).Obj()
	p.Spec.Enforcement = schedv1alpha1.Audit
	p.Spec.PreEnqueue = []schedv1alpha1.Rule{{Name: "approved", Expression: "namespaceObject.metadata.?labels[?'approved'].orValue('') == 'true'", Message: "namespace not approved"}}
	p.Spec.Match = &schedv1alpha1.MatchResources{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"audit": "yes"}}}
	applyPolicy(t, p)

	unapproved := createNamespace(t, "audit-unapproved", nil)
	approved := createNamespace(t, "audit-approved", map[string]string{"approved": "true"})
	matched := withLabels(map[string]string{"audit": "yes"})
	violating := createPod(t, unapproved, "violating", matched, onNode("audit-plain"))
	expectNode(t, violating, "audit-plain")
	compliant := createPod(t, approved, "compliant", matched, onNode("audit-gold"))
	expectNode(t, compliant, "audit-gold")
	unmatched := createPod(t, unapproved, "unmatched", onNode("audit-plain"))
	expectNode(t, unmatched, "audit-plain")

	want := []string{"SchedulingPolicy audit-gold-only (Audit), enforced, would have held it (rule preEnqueue/approved: namespace not approved); " +
		"would have kept it off node audit-plain (rule filters/gold-only: node(s) rejected by SchedulingPolicy audit-gold-only, rule gold-only: not a gold node)"}
	if got := waitEvents(t, violating, audit.ReasonWouldReject, want...); len(got) != len(want) {
		t.Errorf("AuditWouldReject events %q, want %q", got, want)
	}
	if got := events(t, compliant, audit.ReasonWouldReject); len(got) != 0 {
		t.Errorf("events on the compliant pod: %q", got)
	}

	got := waitAudit(t, p.Name, 2)
	wantStatus := &schedv1alpha1.AuditStatus{
		ObservedGeneration: 1, Evaluated: 2, WouldReject: 1,
		LastViolations: []schedv1alpha1.AuditViolation{
			{Pod: unapproved + "/violating", Node: "audit-plain", Rule: "preEnqueue/approved", Message: "namespace not approved"},
			{Pod: unapproved + "/violating", Node: "audit-plain", Rule: "filters/gold-only", Message: "node(s) rejected by SchedulingPolicy audit-gold-only, rule gold-only: not a gold node"},
		},
	}
	ignoreTimes := cmpopts.IgnoreFields(schedv1alpha1.AuditViolation{}, "Time")
	if diff := cmp.Diff(wantStatus, got, ignoreTimes, cmpopts.IgnoreFields(schedv1alpha1.AuditStatus{}, "LastUpdateTime")); diff != "" {
		t.Errorf("status.audit (-want +got):\n%s", diff)
	}

	for _, c := range []struct {
		rule, result string
		want         float64
	}{
		{"filters/gold-only", metrics.ResultDeny, 1},
		{"filters/gold-only", metrics.ResultAllow, 1},
		{"preEnqueue/approved", metrics.ResultDeny, 1},
		{"preEnqueue/approved", metrics.ResultAllow, 1},
	} {
		if got := counter(t, "celsched_policy_evaluations_total", map[string]string{"policy": p.Name, "rule": c.rule, "result": c.result}); got != c.want {
			t.Errorf("celsched_policy_evaluations_total{rule=%q,result=%q} = %v, want %v", c.rule, c.result, got, c.want)
		}
	}
	for rule, want := range map[string]float64{"filters/gold-only": 1, "preEnqueue/approved": 1} {
		if got := counter(t, "celsched_policy_would_reject_total", map[string]string{"policy": p.Name, "rule": rule}); got != want {
			t.Errorf("celsched_policy_would_reject_total{rule=%q} = %v, want %v", rule, got, want)
		}
	}

	// A new spec restarts the summary.
	current := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: p.Name}, current); err != nil {
		t.Fatal(err)
	}
	current.Spec.Filters[0].Message = "gold nodes only"
	if err := k8sClient.Update(t.Context(), current); err != nil {
		t.Fatal(err)
	}
	waitPolicyReady(t, p.Name, metav1.ConditionTrue)
	again := createPod(t, approved, "again", matched, onNode("audit-plain"))
	expectNode(t, again, "audit-plain")
	got = waitAudit(t, p.Name, 1)
	if got.ObservedGeneration != 2 || got.Evaluated != 1 || got.WouldReject != 1 || len(got.LastViolations) != 1 ||
		got.LastViolations[0].Message != "node(s) rejected by SchedulingPolicy audit-gold-only, rule gold-only: gold nodes only" {
		t.Errorf("status.audit after the spec changed: %+v", got)
	}
}

// waitAudit waits until the policy's status.audit has counted evaluated
// pods for its current generation.
func waitAudit(t *testing.T, name string, evaluated int64) *schedv1alpha1.AuditStatus {
	t.Helper()
	return waitPolicy(t, name, fmt.Sprintf("counting %d pods in status.audit", evaluated), func(got *schedv1alpha1.SchedulingPolicy) bool {
		a := got.Status.Audit
		return a != nil && a.ObservedGeneration == got.Generation && a.Evaluated >= evaluated
	}).Status.Audit
}

// counter reads a counter of the in-process manager's metrics registry.
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}
