package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// +kubebuilder:rbac:groups=openreports.io,resources=reports,verbs=get;list;create;update

// What the OpenReports Reports of celsched say about themselves.
const (
	// ReportSource is the source of celsched's reports and results.
	ReportSource = "celsched"
	// ReportPolicyLabel names the policy a report is about.
	ReportPolicyLabel = "scheduling.celsched.io/policy"
	// ReportGenerationAnnotation is the policy generation the report's
	// counts are for: a new spec restarts them, as status.audit's.
	ReportGenerationAnnotation = "scheduling.celsched.io/policy-generation"
	// ReportNamePrefix begins the name of each report.
	ReportNamePrefix = "celsched-"
	// ReportDriftedAnnotation is how many of the report's fail count are
	// drifted pods (the drift results): the count of now, replaced at
	// each write, where the rest of fail adds up.
	ReportDriftedAnnotation = "scheduling.celsched.io/drifted-pods"
	// DriftCategory is the category of a drift result: a running pod on
	// a node the policy's enforced filters now refuse.
	DriftCategory = "Drift"
)

// DriftSource is the drift tracker as the report writer reads it
// (DriftController.ReportSource).
type DriftSource interface {
	policySignals
	// Drift is a policy's drift; false while its pods were not evaluated.
	Drift(policy string) (PolicyDrift, bool)
}

// ReportWriter writes the evidence of Audit policies (the evidence cache
// audit.Log.Namespaces) as OpenReports objects (openreports.io/v1alpha1
// Report): one Report per namespace and policy, named celsched-<policy>,
// owned by the policy (deleted with it). Its summary counts are exact
// (pass: pods placed that the policy would have let be; fail: pods it
// would have held or kept off their node), its results the newest
// violations, at most audit.MaxReportResults. It is a reconciler of
// policies, woken when a policy gains evidence: it writes a policy's
// reports at most once per Interval (each Report at most once), adding to
// the stored counts with an optimistic lock, and takes a namespace's
// evidence out of the cache only once its Report was written, as
// AuditStatusWriter does. It runs on the leader. When the Report kind is
// not served (the OpenReports CRDs are not installed), the evidence is
// dropped, and the writer looks again when there is more.
//
// With Drift set, a report also holds the policy's drifted pods in its
// namespace (status.drift's, by namespace): they are results of category
// Drift, ahead of the audit results, replaced at each write (they say
// what is true now; the audit results what happened), and counted in fail
// (ReportDriftedAnnotation says how many). The writer is woken when a
// policy's drift changes and writes only the namespaces whose drifted pods
// changed, at the same pace.
type ReportWriter struct {
	Client client.Client
	// Reader reads the reports (the manager's API reader: the reports are
	// not cached, so that the manager needs no informer on them), and
	// confirms that a policy missing from the cache is gone.
	Reader client.Reader
	Log    *audit.Log
	// Drift is the drift tracker; nil writes no drift results.
	Drift    DriftSource
	Interval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// mu makes one write of a policy's reports at a time.
	mu     sync.Mutex
	served bool
	// lastWrite is when each policy's reports were last written. Key:
	// policy name; bound: the policies written; an entry leaves with its
	// policy. Written under mu.
	lastWrite map[string]time.Time
	// driftWritten is, per policy, the drift last written to each
	// namespace's report (namespaceDrift.key); a policy without an entry
	// has not been written by this replica (its reports are read for the
	// drift a previous leader wrote). Key: policy, then namespace. Bound:
	// the namespaces with drifted pods written; an entry leaves with its
	// policy. Written under mu.
	driftWritten map[string]map[string]string
}

// SetupWithManager registers the writer, which runs on the leader, and
// its flush at the stop, and has the audit log collect evidence per
// namespace.
func (w *ReportWriter) SetupWithManager(mgr ctrl.Manager) error {
	w.Log.ByNamespace.Store(true)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("schedulingpolicy-reports").
		WatchesRawSource(evidenceSource(&w.Log.Namespaces))
	if w.Drift != nil {
		b = b.WatchesRawSource(evidenceSource(w.Drift))
	}
	if err := b.Complete(w); err != nil {
		return err
	}
	return mgr.Add(flushOnStop(w.Flush))
}

// Reconcile writes a policy's reports, or says when it may.
func (w *ReportWriter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writePolicy(ctx, req.Name, false)
}

// Flush writes the reports of every policy now, whenever they were last
// written.
func (w *ReportWriter) Flush(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range w.Log.Namespaces.Policies() {
		if _, err := w.writePolicy(ctx, name, true); err != nil {
			ctrl.LoggerFrom(ctx).WithName("reports").Info("Writing reports failed", "policy", name, "err", err)
		}
	}
}

func (w *ReportWriter) interval() time.Duration {
	if w.Interval > 0 {
		return w.Interval
	}
	return DefaultAuditStatusInterval
}

// writePolicy adds a policy's unwritten evidence to its reports, one per
// namespace, and replaces their drift results where the drift changed:
// now when force is set or Interval has passed since the last write,
// otherwise later (RequeueAfter). A report that cannot be written keeps
// its evidence (its drift) for the next try.
func (w *ReportWriter) writePolicy(ctx context.Context, name string, force bool) (ctrl.Result, error) {
	unwritten := w.Log.Namespaces.Unwritten(name)
	drift, driftKnown := PolicyDrift{}, false
	if w.Drift != nil {
		drift, driftKnown = w.Drift.Drift(name)
	}
	if len(unwritten) == 0 && !w.driftChanged(name, drift, driftKnown) {
		return ctrl.Result{}, nil
	}
	if !w.reportsServed(ctx) {
		w.Log.Namespaces.Written(name, unwritten) // dropped
		return ctrl.Result{}, nil
	}
	policy, err := livePolicy(ctx, w.Client, w.Reader, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if policy == nil {
		w.Log.Namespaces.Drop(name)
		delete(w.lastWrite, name)
		delete(w.driftWritten, name)
		return ctrl.Result{}, nil
	}
	now := w.now()
	if wait := untilNextWrite(w.lastWrite[name], w.interval(), now); wait > 0 && !force {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	// The namespaces whose drift results change: drift of the policy's
	// generation only (an older one is replaced when the tracker catches
	// up, and tells).
	drifts := map[string]*namespaceDrift{}
	if driftKnown && drift.Generation == policy.Generation {
		if drifts, err = w.driftToWrite(ctx, name, drift); err != nil {
			return ctrl.Result{}, err
		}
	}
	written := map[string]audit.Delta{}
	var errs []error
	ahead := false
	namespaces := slices.Sorted(maps.Keys(unwritten))
	for _, ns := range slices.Sorted(maps.Keys(drifts)) {
		if _, ok := unwritten[ns]; !ok {
			namespaces = append(namespaces, ns)
		}
	}
	for _, namespace := range namespaces {
		var delta *audit.Delta
		if d, ok := unwritten[namespace]; ok {
			switch {
			case policy.Generation > d.Generation:
				written[namespace] = d // an older spec, whose counts restarted
			case policy.Generation < d.Generation:
				ahead = true // the cache is behind the scheduler
			default:
				delta = &d
			}
		}
		nd := drifts[namespace]
		if delta == nil && nd == nil {
			continue
		}
		if err := w.write(ctx, policy, namespace, delta, nd); err != nil {
			errs = append(errs, fmt.Errorf("the report of namespace %s: %w", namespace, err))
			continue
		}
		if delta != nil {
			written[namespace] = *delta
		}
		if nd != nil {
			if len(nd.pods) == 0 {
				delete(w.driftWritten[name], namespace)
			} else {
				w.driftWritten[name][namespace] = nd.key
			}
		}
	}
	if w.lastWrite == nil {
		w.lastWrite = map[string]time.Time{}
	}
	w.lastWrite[name] = now
	remains := w.Log.Namespaces.Written(name, written)
	switch {
	case len(errs) > 0:
		return ctrl.Result{}, errors.Join(errs...)
	case ahead:
		return ctrl.Result{RequeueAfter: registryLag}, nil
	case remains:
		return ctrl.Result{RequeueAfter: w.interval()}, nil
	}
	return ctrl.Result{}, nil
}

// namespaceDrift is a policy's drift in one namespace, as written to its
// report.
type namespaceDrift struct {
	pods  []DriftedPodRef
	since time.Time
	// key is what decides the results (pods, nodes, messages, since).
	key string
}

// driftChanged says whether a policy's drift may differ from what this
// replica last wrote to its reports (or it wrote none yet).
func (w *ReportWriter) driftChanged(name string, drift PolicyDrift, known bool) bool {
	if !known {
		return false
	}
	written, ok := w.driftWritten[name]
	if !ok {
		return true
	}
	now := byNamespace(drift)
	if len(now) != len(written) {
		return true
	}
	for ns, nd := range now {
		if written[ns] != nd.key {
			return true
		}
	}
	return false
}

// driftToWrite are the namespaces whose reports' drift results differ
// from a policy's drift: the namespaces with drifted pods whose pods
// changed since written, and those written with some that have none now.
// The first time a replica writes a policy, the namespaces with drift
// results are read from its reports (a previous leader wrote them).
func (w *ReportWriter) driftToWrite(ctx context.Context, name string, drift PolicyDrift) (map[string]*namespaceDrift, error) {
	if w.driftWritten == nil {
		w.driftWritten = map[string]map[string]string{}
	}
	written, ok := w.driftWritten[name]
	if !ok {
		var list reportsv1alpha1.ReportList
		if err := w.Reader.List(ctx, &list, client.MatchingLabels{ReportPolicyLabel: labelValue(name)}); err != nil {
			return nil, fmt.Errorf("listing the reports of policy %s: %w", name, err)
		}
		written = map[string]string{}
		for _, r := range list.Items {
			if n := r.Annotations[ReportDriftedAnnotation]; r.Name == ReportName(name) && n != "" && n != "0" {
				written[r.Namespace] = "" // what: unknown; written again
			}
		}
		w.driftWritten[name] = written
	}
	now := byNamespace(drift)
	out := map[string]*namespaceDrift{}
	for ns, nd := range now {
		if k, ok := written[ns]; !ok || k != nd.key {
			out[ns] = nd
		}
	}
	for ns := range written {
		if _, ok := now[ns]; !ok {
			out[ns] = &namespaceDrift{since: drift.Since} // none drifted now
		}
	}
	return out, nil
}

// byNamespace is a policy's drift by namespace.
func byNamespace(drift PolicyDrift) map[string]*namespaceDrift {
	out := map[string]*namespaceDrift{}
	for _, p := range drift.Pods {
		nd := out[p.Namespace]
		if nd == nil {
			nd = &namespaceDrift{since: drift.Since}
			out[p.Namespace] = nd
		}
		nd.pods = append(nd.pods, p)
	}
	for _, nd := range out {
		var b strings.Builder
		fmt.Fprintf(&b, "%d", nd.since.Unix())
		for _, p := range nd.pods {
			fmt.Fprintf(&b, "\x00%s\x00%s\x00%s", p.Name, p.Node, p.Message)
		}
		nd.key = shortHash(b.String())
	}
	return out
}

// reportsServed says whether the API server serves the Report kind, and
// logs when that changes.
func (w *ReportWriter) reportsServed(ctx context.Context) bool {
	gk := schema.GroupKind{Group: reportsv1alpha1.GroupVersion.Group, Kind: "Report"}
	_, err := w.Client.RESTMapper().RESTMapping(gk, reportsv1alpha1.GroupVersion.Version)
	served := err == nil
	if served != w.served {
		ctrl.LoggerFrom(ctx).WithName("reports").Info("OpenReports Reports", "served", served, "err", err)
		w.served = served
	}
	return served
}

// write adds a delta to the report of a policy in a namespace and
// replaces its drift results (either may be nil), creating the report
// when missing and there is something to say.
func (w *ReportWriter) write(ctx context.Context, policy *schedv1alpha1.SchedulingPolicy, namespace string, d *audit.Delta, nd *namespaceDrift) error {
	name := ReportName(policy.Name)
	report := &reportsv1alpha1.Report{}
	err := w.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, report)
	switch {
	case apierrors.IsNotFound(err):
		if d == nil && (nd == nil || len(nd.pods) == 0) {
			return nil
		}
		report = w.newReport(policy, namespace, name)
		w.apply(report, policy, d, nd)
		return w.Client.Create(ctx, report)
	case err != nil:
		return err
	}
	before := report.DeepCopy()
	w.apply(report, policy, d, nd)
	if apiequality.Semantic.DeepEqual(before, report) {
		return nil
	}
	// The resourceVersion read is the optimistic lock: a concurrent
	// write (a previous leader's last flush) makes this one conflict.
	return w.Client.Update(ctx, report)
}

func (w *ReportWriter) apply(report *reportsv1alpha1.Report, policy *schedv1alpha1.SchedulingPolicy, d *audit.Delta, nd *namespaceDrift) {
	if d != nil {
		applyDelta(report, policy, d, w.now())
	}
	if nd != nil {
		applyDrift(report, policy.Name, nd.pods, nd.since)
	}
}

func (w *ReportWriter) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *ReportWriter) newReport(policy *schedv1alpha1.SchedulingPolicy, namespace, name string) *reportsv1alpha1.Report {
	return &reportsv1alpha1.Report{
		TypeMeta: metav1.TypeMeta{APIVersion: reportsv1alpha1.GroupVersion.String(), Kind: "Report"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": ReportSource,
				ReportPolicyLabel:              labelValue(policy.Name),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: schedv1alpha1.GroupVersion.String(), Kind: "SchedulingPolicy",
				Name: policy.Name, UID: policy.UID,
			}},
		},
		Source: ReportSource,
		Configuration: &reportsv1alpha1.ReportConfiguration{Limits: reportsv1alpha1.Limits{
			MaxResults: audit.MaxReportResults, StatusFilter: []reportsv1alpha1.StatusFilter{"fail"},
		}},
	}
}

// applyDelta adds a delta of the policy's generation to a report: the
// summary counts, and the violations as the newest audit results (after
// the drift results); the audit counts and results of an older generation
// restart.
func applyDelta(report *reportsv1alpha1.Report, policy *schedv1alpha1.SchedulingPolicy, d *audit.Delta, now time.Time) {
	gen := strconv.FormatInt(policy.Generation, 10)
	drift, audited := splitResults(report.Results)
	if report.Annotations[ReportGenerationAnnotation] != gen {
		report.Summary, audited = reportsv1alpha1.ReportSummary{Fail: driftedCount(report)}, nil
	}
	metav1.SetMetaDataAnnotation(&report.ObjectMeta, ReportGenerationAnnotation, gen)
	report.Summary.Fail += int(d.WouldReject)
	report.Summary.Pass += int(d.Evaluated - d.WouldReject)
	results := make([]reportsv1alpha1.ReportResult, 0, len(d.Violations)+len(audited))
	for _, v := range d.Violations {
		results = append(results, result(policy.Name, v, now))
	}
	report.Results = joinResults(drift, append(results, audited...))
}

// applyDrift replaces a report's drift results with the drifted pods of
// its namespace (sorted), and their count in fail.
func applyDrift(report *reportsv1alpha1.Report, policy string, pods []DriftedPodRef, since time.Time) {
	_, audited := splitResults(report.Results)
	report.Summary.Fail += len(pods) - driftedCount(report)
	metav1.SetMetaDataAnnotation(&report.ObjectMeta, ReportDriftedAnnotation, strconv.Itoa(len(pods)))
	drift := make([]reportsv1alpha1.ReportResult, 0, min(len(pods), audit.MaxReportResults))
	for _, p := range pods[:min(len(pods), audit.MaxReportResults)] {
		drift = append(drift, reportsv1alpha1.ReportResult{
			Source:      ReportSource,
			Policy:      policy,
			Category:    DriftCategory,
			Result:      "fail",
			Timestamp:   metav1.Timestamp{Seconds: since.Unix()},
			Subjects:    []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name}},
			Description: engine.Truncate(p.Message, 1024),
			Properties:  driftProperties(p),
		})
	}
	report.Results = joinResults(drift, audited)
}

// driftProperties are a drift result's properties: the enforcement, the
// node, and placedBy for a pod no profile placed.
func driftProperties(p DriftedPodRef) map[string]string {
	props := map[string]string{"enforcement": string(schedv1alpha1.Enforce), "node": p.Node}
	if p.PlacedBy == schedv1alpha1.PlacedByOtherScheduler {
		props["placedBy"] = string(p.PlacedBy)
	}
	return props
}

// splitResults are a report's drift results and its audit results.
func splitResults(results []reportsv1alpha1.ReportResult) (drift, audited []reportsv1alpha1.ReportResult) {
	for _, r := range results {
		if r.Category == DriftCategory {
			drift = append(drift, r)
		} else {
			audited = append(audited, r)
		}
	}
	return drift, audited
}

// joinResults are the drift results, then the newest audit results, at
// most audit.MaxReportResults in all.
func joinResults(drift, audited []reportsv1alpha1.ReportResult) []reportsv1alpha1.ReportResult {
	out := append(slices.Clip(drift), audited...)
	if len(out) > audit.MaxReportResults {
		out = out[:audit.MaxReportResults]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// driftedCount is how many of a report's fail count are drifted pods.
func driftedCount(report *reportsv1alpha1.Report) int {
	n, _ := strconv.Atoi(report.Annotations[ReportDriftedAnnotation])
	return n
}

// result is one violation as an OpenReports result: the pod as its
// subject, the rule and message, and the node and enforcement source as
// properties.
func result(policy string, v schedv1alpha1.AuditViolation, now time.Time) reportsv1alpha1.ReportResult {
	namespace, name, _ := strings.Cut(v.Pod, "/")
	when := v.Time.Time
	if when.IsZero() {
		when = now
	}
	props := map[string]string{"enforcement": string(schedv1alpha1.Audit)}
	if v.Node != "" {
		props["node"] = v.Node
	}
	if v.EnforcedBy != "" {
		props["enforcedBy"] = v.EnforcedBy
	}
	return reportsv1alpha1.ReportResult{
		Source:      ReportSource,
		Policy:      policy,
		Rule:        v.Rule,
		Result:      "fail",
		Timestamp:   metav1.Timestamp{Seconds: when.Unix()},
		Subjects:    []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name}},
		Description: v.Message,
		Properties:  props,
	}
}

// ReportName is the name of a policy's reports: celsched-<policy>, or,
// when that is too long for a name, its first part and a hash.
func ReportName(policy string) string {
	name := ReportNamePrefix + policy
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	return strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-17], "-.") + "-" + shortHash(policy)
}

// labelValue is a policy name as a label value: itself, or, when longer
// than a label value may be, its first part and a hash.
func labelValue(policy string) string {
	if len(policy) <= validation.LabelValueMaxLength {
		return policy
	}
	return strings.TrimRight(policy[:validation.LabelValueMaxLength-17], "-.") + "-" + shortHash(policy)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
