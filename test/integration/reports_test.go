package integration

import (
	"context"
	"testing"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/test/builder"
)

// TestOpenReports: an Audit policy's evidence becomes one OpenReports
// Report per namespace, owned by the policy, whose summary counts the
// namespace's evaluated pods exactly (fail: would have been kept off their
// node; pass: the others) and whose results name the violating pods; the
// pods of a namespace where an override enforces the policy are not
// evidence (the policy decided for them).
func TestOpenReports(t *testing.T) {
	createNodes(t, nodeSpec{name: "rep-plain"})
	a := createNamespace(t, "rep-a", nil)
	b := createNamespace(t, "rep-b", nil)
	enforced := createNamespace(t, "rep-enforced", map[string]string{"enforce": "yes"})
	p := builder.MakePolicy("rep-compliant-only").Audit().Override(map[string]string{"enforce": "yes"}, schedv1alpha1.Enforce).
		PodLabels(map[string]string{"app": "rep-web"}).
		FilterMsg("compliant", "pod.metadata.labels[?'compliant'].orValue('') == 'true'", "the pod is not compliant", "").Obj()
	applyPolicy(t, p)
	web := withLabels(map[string]string{"app": "rep-web"})
	compliant := withLabels(map[string]string{"app": "rep-web", "compliant": "true"})
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		expectNode(t, createPod(t, a, name, web, onNode("rep-plain")), "rep-plain")
	}
	expectNode(t, createPod(t, b, "web-1", web, onNode("rep-plain")), "rep-plain")
	expectNode(t, createPod(t, b, "ok", compliant, onNode("rep-plain")), "rep-plain")
	expectNode(t, createPod(t, enforced, "ok", compliant, onNode("rep-plain")), "rep-plain")

	ra := waitReport(t, a, p.Name, reportsv1alpha1.ReportSummary{Fail: 3})
	rb := waitReport(t, b, p.Name, reportsv1alpha1.ReportSummary{Fail: 1, Pass: 1})
	if len(ra.Results) != 3 || len(rb.Results) != 1 {
		t.Fatalf("results: %d in %s, %d in %s; want 3 and 1", len(ra.Results), a, len(rb.Results), b)
	}
	seen := map[string]bool{}
	for _, r := range ra.Results {
		s := r.Subjects[0]
		if s.Kind != "Pod" || s.Namespace != a || r.Policy != p.Name || r.Rule != "filters/compliant" || r.Result != "fail" ||
			r.Source != controllers.ReportSource || r.Properties["node"] != "rep-plain" || r.Properties["enforcedBy"] != "spec.enforcement" {
			t.Errorf("result %+v", r)
		}
		seen[s.Name] = true
	}
	if len(seen) != 3 {
		t.Errorf("results name pods %v, want web-1, web-2, web-3", seen)
	}
	if o := ra.OwnerReferences; len(o) != 1 || o[0].Kind != "SchedulingPolicy" || o[0].Name != p.Name {
		t.Errorf("owner references %+v", o)
	}
	// The enforced namespace's pod was decided by the policy, not audited.
	var none reportsv1alpha1.Report
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: enforced, Name: controllers.ReportName(p.Name)}, &none); err == nil {
		t.Errorf("a report in the namespace where the policy is enforced: %+v", none.Summary)
	}
}

// waitReport waits until the report of a policy in a namespace has the
// summary.
func waitReport(t *testing.T, namespace, policy string, want reportsv1alpha1.ReportSummary) *reportsv1alpha1.Report {
	t.Helper()
	got := &reportsv1alpha1.Report{}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controllers.ReportName(policy)}, got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return got.Summary == want, nil
	})
	if err != nil {
		t.Fatalf("report of %s in %s: %v; summary %+v, want %+v", policy, namespace, err, got.Summary, want)
	}
	return got
}
