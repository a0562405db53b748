package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// TestApplyDelta: a report's summary counts add up exactly across writes,
// its results are the newest violations, at most audit.MaxReportResults,
// each naming its pod, rule, node and enforcement source; a new policy
// generation restarts both.
func TestApplyDelta(t *testing.T) {
	w := &ReportWriter{}
	policy := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-spot", UID: "uid-1", Generation: 1}}
	report := w.newReport(policy, "shop", ReportName(policy.Name))
	now := time.Unix(1000, 0)
	pods := 0
	for range 7 {
		d := &audit.Delta{Generation: 1, Evaluated: 12}
		for range 10 {
			d.Violations = append([]schedv1alpha1.AuditViolation{{Pod: fmt.Sprintf("shop/web-%d", pods), Node: "spot-1",
				Rule: "filters/not-spot", Message: "no spot", EnforcedBy: "spec.enforcement"}}, d.Violations...)
			pods++
		}
		d.WouldReject = 10
		applyDelta(report, policy, d, now)
	}
	if report.Summary.Fail != 70 || report.Summary.Pass != 14 {
		t.Errorf("summary %+v, want fail 70, pass 14", report.Summary)
	}
	if len(report.Results) != audit.MaxReportResults {
		t.Fatalf("%d results, want %d", len(report.Results), audit.MaxReportResults)
	}
	first := report.Results[0]
	if first.Subjects[0].Name != "web-69" || first.Subjects[0].Namespace != "shop" || first.Subjects[0].Kind != "Pod" ||
		first.Policy != "no-spot" || first.Rule != "filters/not-spot" || first.Result != "fail" || first.Source != ReportSource ||
		first.Properties["node"] != "spot-1" || first.Properties["enforcedBy"] != "spec.enforcement" || first.Timestamp.Seconds != 1000 {
		t.Errorf("newest result %+v", first)
	}
	if last := report.Results[len(report.Results)-1]; last.Subjects[0].Name != "web-20" {
		t.Errorf("oldest result kept is %s, want web-20", last.Subjects[0].Name)
	}
	if report.OwnerReferences[0].UID != "uid-1" || report.Labels[ReportPolicyLabel] != "no-spot" {
		t.Errorf("owner %+v, labels %v", report.OwnerReferences, report.Labels)
	}

	policy.Generation = 2
	applyDelta(report, policy, &audit.Delta{Generation: 2, Evaluated: 1}, now)
	if report.Summary != (reportsv1alpha1.ReportSummary{Pass: 1}) || len(report.Results) != 0 {
		t.Errorf("after a new generation: summary %+v, %d results", report.Summary, len(report.Results))
	}
}

// TestReportNames: a policy name too long for a report's name or a label
// value is shortened with a hash, so that two such policies differ.
func TestReportNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	other := strings.Repeat("a", 252) + "b"
	for _, n := range []string{ReportName(long), ReportName(other)} {
		if len(n) > validation.DNS1123SubdomainMaxLength || len(validation.IsDNS1123Subdomain(n)) > 0 {
			t.Errorf("report name %q is not a valid name", n)
		}
	}
	if ReportName(long) == ReportName(other) {
		t.Error("two long policy names give one report name")
	}
	if v := labelValue(long); len(validation.IsValidLabelValue(v)) > 0 || v == labelValue(other) {
		t.Errorf("label value %q", v)
	}
	if ReportName("no-spot") != "celsched-no-spot" {
		t.Errorf("ReportName(no-spot) = %q", ReportName("no-spot"))
	}
}

// TestReportsNotServed: without the OpenReports CRDs the writer drops the
// evidence (nothing accumulates) and writes nothing.
func TestReportsNotServed(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schedv1alpha1.GroupVersion.WithKind("SchedulingPolicy"), meta.RESTScopeRoot)
	policy := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(policy).Build()
	log := &audit.Log{}
	w := &ReportWriter{Client: c, Reader: c, Log: log}
	log.ByNamespace.Store(true)
	log.Report(events.NewFakeRecorder(10), &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}, "n",
		[]schedv1alpha1.AuditViolation{{Pod: "ns/x", Rule: "filters/f"}})
	if _, err := w.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	if left := log.Namespaces.Policies(); len(left) != 0 {
		t.Errorf("evidence kept while reports are not served: %v", left)
	}
}

// TestReportWriterFailedWrites: a Report whose create or update fails
// keeps its evidence, and the next write adds it once: the counts end
// exact, as if no write had failed.
func TestReportWriterFailedWrites(t *testing.T) {
	policy := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1, UID: "p"}}
	failCreates, failUpdates := 0, 0
	c := reportsClient(t, policy).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*reportsv1alpha1.Report); ok && fail(&failCreates) {
					return errInjected
				}
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*reportsv1alpha1.Report); ok && fail(&failUpdates) {
					return errInjected
				}
				return c.Update(ctx, obj, opts...)
			},
		}).Build()
	clock := time.Unix(1000, 0)
	log := &audit.Log{}
	log.ByNamespace.Store(true)
	w := &ReportWriter{Client: c, Reader: c, Log: log, Interval: 10 * time.Second, Now: func() time.Time { return clock }}
	compiled := &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}
	reconcile := func(wantErr bool) {
		t.Helper()
		clock = clock.Add(10 * time.Second)
		_, err := w.Reconcile(t.Context(), policyRequest("p"))
		if (err != nil) != wantErr {
			t.Fatalf("at %d: error %v, want an error: %v", clock.Unix(), err, wantErr)
		}
	}
	summary := func() reportsv1alpha1.ReportSummary {
		t.Helper()
		report := &reportsv1alpha1.Report{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: ReportName("p")}, report); err != nil {
			t.Fatal(err)
		}
		return report.Summary
	}

	bind(log, compiled, 3, 2) // 1 pass, 2 fail
	failCreates = 1
	reconcile(true)
	if left := log.Namespaces.Policies(); len(left) != 1 {
		t.Fatalf("the evidence of a failed create was not kept: %v", left)
	}
	bind(log, compiled, 2, 1) // 1 pass, 1 fail, while the write failed
	reconcile(false)
	if s := summary(); s.Pass != 2 || s.Fail != 3 {
		t.Errorf("after the create's retry: %+v, want pass 2, fail 3", s)
	}
	bind(log, compiled, 4, 0)
	failUpdates = 1
	reconcile(true)
	if s := summary(); s.Pass != 2 || s.Fail != 3 {
		t.Errorf("a failed update changed the report: %+v", s)
	}
	reconcile(false)
	if s := summary(); s.Pass != 6 || s.Fail != 3 {
		t.Errorf("after the update's retry: %+v, want pass 6, fail 3", s)
	}
	if left := log.Namespaces.Policies(); len(left) != 0 {
		t.Errorf("evidence left once written: %v", left)
	}
	reconcile(false)
	if s := summary(); s.Pass != 6 || s.Fail != 3 {
		t.Errorf("a write with nothing new changed the report: %+v", s)
	}
}

// reportsClient is a fake API server that serves policies and
// OpenReports Reports, holding objs.
func reportsClient(t *testing.T, objs ...client.Object) *fake.ClientBuilder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{schedv1alpha1.AddToScheme, reportsv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schedv1alpha1.GroupVersion.WithKind("SchedulingPolicy"), meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: reportsv1alpha1.GroupVersion.Group, Version: reportsv1alpha1.GroupVersion.Version, Kind: "Report"}, meta.RESTScopeNamespace)
	return fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(objs...)
}

// fakeDrift is a DriftSource holding one drift per policy.
type fakeDrift struct {
	audit.Touches
	drift map[string]PolicyDrift
}

func (f *fakeDrift) Policies() []string { return nil }
func (f *fakeDrift) Drift(policy string) (PolicyDrift, bool) {
	d, ok := f.drift[policy]
	return d, ok
}

// TestReportDrift: a policy's drifted pods are results of category Drift
// in their namespace's report, ahead of the audit results and counted in
// fail beside the audit counts, which they never disturb; a change of the
// drift rewrites only the namespaces it touches (the others keep their
// resourceVersion), drift gone leaves the audit part alone, drift of
// another generation than the policy's is not written, and a new leader
// (a new writer) takes out the drift a previous one wrote and that is no
// longer true.
func TestReportDrift(t *testing.T) {
	policy := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1, UID: "p"}}
	c := reportsClient(t, policy).Build()
	clock := time.Unix(1000, 0)
	log := &audit.Log{}
	log.ByNamespace.Store(true)
	drift := &fakeDrift{drift: map[string]PolicyDrift{}}
	w := &ReportWriter{Client: c, Reader: c, Log: log, Drift: drift, Interval: 10 * time.Second, Now: func() time.Time { return clock }}
	since := time.Unix(900, 0)
	pod := func(ns, name, node string) DriftedPodRef {
		return DriftedPodRef{Namespace: ns, Name: name, Node: node, Message: "refused: " + node}
	}
	reconcile := func() {
		t.Helper()
		clock = clock.Add(10 * time.Second)
		if _, err := w.Reconcile(t.Context(), policyRequest("p")); err != nil {
			t.Fatal(err)
		}
	}
	report := func(ns string) *reportsv1alpha1.Report {
		t.Helper()
		r := &reportsv1alpha1.Report{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: ReportName("p")}, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	subjects := func(r *reportsv1alpha1.Report) string {
		var out []string
		for _, res := range r.Results {
			out = append(out, res.Category+":"+res.Subjects[0].Name)
		}
		return strings.Join(out, ",")
	}

	// Drift of another generation than the policy's: nothing written.
	drift.drift["p"] = PolicyDrift{Generation: 2, Since: since, Pods: []DriftedPodRef{pod("ns", "a", "n1")}}
	reconcile()
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: ReportName("p")}, &reportsv1alpha1.Report{}); err == nil {
		t.Error("drift of generation 2 written for a policy of generation 1")
	}

	drift.drift["p"] = PolicyDrift{Generation: 1, Since: since, Pods: []DriftedPodRef{pod("ns", "a", "n1"), pod("ns", "b", "n2"), pod("other", "c", "n1")}}
	reconcile()
	ns := report("ns")
	if ns.Summary.Fail != 2 || ns.Annotations[ReportDriftedAnnotation] != "2" || subjects(ns) != "Drift:a,Drift:b" {
		t.Errorf("report of ns: summary %+v, annotations %v, results %s", ns.Summary, ns.Annotations, subjects(ns))
	}
	if r := ns.Results[0]; r.Result != "fail" || r.Policy != "p" || r.Properties["node"] != "n1" || r.Properties["enforcement"] != "Enforce" ||
		r.Description != "refused: n1" || r.Timestamp.Seconds != since.Unix() {
		t.Errorf("drift result %+v", r)
	}
	if other := report("other"); other.Summary.Fail != 1 || subjects(other) != "Drift:c" {
		t.Errorf("report of other: summary %+v, results %s", other.Summary, subjects(other))
	}

	// Audit evidence in ns adds to its counts, after the drift results.
	bind(log, &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}, 3, 2)
	reconcile()
	if ns := report("ns"); ns.Summary.Fail != 4 || ns.Summary.Pass != 1 || subjects(ns) != "Drift:a,Drift:b,:pod-b,:pod-a" {
		t.Errorf("report of ns with evidence: summary %+v, results %s", ns.Summary, subjects(ns))
	}

	// a leaves: ns is rewritten, other is not.
	otherVersion := report("other").ResourceVersion
	drift.drift["p"] = PolicyDrift{Generation: 1, Since: since, Pods: []DriftedPodRef{pod("ns", "b", "n2"), pod("other", "c", "n1")}}
	drift.Touch("p")
	reconcile()
	if ns := report("ns"); ns.Summary.Fail != 3 || ns.Summary.Pass != 1 || subjects(ns) != "Drift:b,:pod-b,:pod-a" {
		t.Errorf("report of ns after a left: summary %+v, results %s", ns.Summary, subjects(ns))
	}
	if v := report("other").ResourceVersion; v != otherVersion {
		t.Errorf("the report of other was written (%s, was %s) while its drift did not change", v, otherVersion)
	}

	// A drift unchanged writes nothing.
	nsVersion := report("ns").ResourceVersion
	reconcile()
	if v := report("ns").ResourceVersion; v != nsVersion {
		t.Errorf("a write with nothing new changed the report of ns (%s, was %s)", v, nsVersion)
	}

	// A new leader, whose drift says c left other, while the reports say
	// what the previous leader wrote.
	drift.drift["p"] = PolicyDrift{Generation: 1, Since: since, Pods: []DriftedPodRef{pod("ns", "b", "n2")}}
	w = &ReportWriter{Client: c, Reader: c, Log: log, Drift: drift, Interval: 10 * time.Second, Now: func() time.Time { return clock }}
	reconcile()
	if other := report("other"); other.Summary.Fail != 0 || len(other.Results) != 0 || other.Annotations[ReportDriftedAnnotation] != "0" {
		t.Errorf("report of other after its drift left: summary %+v, annotations %v, results %s", other.Summary, other.Annotations, subjects(other))
	}
	if v := report("ns").ResourceVersion; v != nsVersion {
		t.Errorf("the new leader rewrote ns's report, whose drift it holds unchanged (%s, was %s)", v, nsVersion)
	}

	// No drift at all: the audit counts and results stay.
	drift.drift["p"] = PolicyDrift{Generation: 1, Since: since}
	reconcile()
	if ns := report("ns"); ns.Summary.Fail != 2 || ns.Summary.Pass != 1 || subjects(ns) != ":pod-b,:pod-a" {
		t.Errorf("report of ns without drift: summary %+v, results %s", ns.Summary, subjects(ns))
	}
}
