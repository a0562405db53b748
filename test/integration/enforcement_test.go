package integration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestEnforcementOverrides: one policy, Audit by default and enforced in
// the namespaces labelled env=production. The scheduler keeps the
// production pod off the spot node and places the other there; relabelling
// the production namespace requeues its pending pod, which is then placed
// (Audit), with the override named in the audit violation; the metric
// counts the cycles per enforcement.
func TestEnforcementOverrides(t *testing.T) {
	prod := createNamespace(t, "enf-prod", map[string]string{"env": "production"})
	dev := createNamespace(t, "enf-dev", map[string]string{"env": "dev"})
	createNodes(t, nodeSpec{name: "enf-spot", labels: map[string]string{"capacity": "spot"}})
	p := builder.MakePolicy("enf-no-spot").Audit().Override(map[string]string{"env": "production"}, schedv1alpha1.Enforce).
		PodLabels(map[string]string{"app": "enf-web"}).
		FilterMsg("not-spot", "node.metadata.labels[?'capacity'].orValue('') != 'spot'", "no spot for production", "").Obj()
	applyPolicy(t, p)
	web := withLabels(map[string]string{"app": "enf-web"})

	expectNode(t, createPod(t, dev, "web", web, onNode("enf-spot")), "enf-spot")
	held := createPod(t, prod, "web", web, onNode("enf-spot"))
	waitPending(t, held, corev1.PodReasonUnschedulable, "no spot for production")

	// The production namespace is now dev: its pending pod is retried and
	// placed, audited under spec.enforcement.
	setNamespaceLabel(t, prod, "env", "dev")
	expectNode(t, held, "enf-spot")

	audit := waitAudit(t, p.Name, 2)
	var byEnforcement []string
	for _, v := range audit.LastViolations {
		byEnforcement = append(byEnforcement, v.Pod+" "+v.EnforcedBy)
	}
	want := map[string]bool{dev + "/web spec.enforcement": true, prod + "/web spec.enforcement": true}
	for _, got := range byEnforcement {
		delete(want, got)
	}
	if len(want) > 0 {
		t.Errorf("audit violations %v lack %v", byEnforcement, want)
	}
	if got := counter(t, "celsched_policy_enforcement_total", map[string]string{"policy": p.Name, "enforcement": "Enforce", "enforced_by": "spec.enforcementOverrides[0]"}); got < 1 {
		t.Errorf("celsched_policy_enforcement_total{enforcement=Enforce} = %v, want the production pod's cycles (>= 1)", got)
	}
	if got := counter(t, "celsched_policy_enforcement_total", map[string]string{"policy": p.Name, "enforcement": "Audit", "enforced_by": "spec.enforcement"}); got < 2 {
		t.Errorf("celsched_policy_enforcement_total{enforcement=Audit} = %v, want the two placed pods' cycles (>= 2)", got)
	}
}
