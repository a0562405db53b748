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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
)

// +kubebuilder:rbac:groups=openreports.io,resources=reports,verbs=get;create;update

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
)

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
type ReportWriter struct {
	Client client.Client
	// Reader reads the reports (the manager's API reader: the reports are
	// not cached, so that the manager needs no informer on them), and
	// confirms that a policy missing from the cache is gone.
	Reader   client.Reader
	Log      *audit.Log
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
}

// SetupWithManager registers the writer, which runs on the leader, and
// its flush at the stop, and has the audit log collect evidence per
// namespace.
func (w *ReportWriter) SetupWithManager(mgr ctrl.Manager) error {
	w.Log.ByNamespace.Store(true)
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("schedulingpolicy-reports").
		WatchesRawSource(evidenceSource(&w.Log.Namespaces)).
		Complete(w); err != nil {
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
// namespace: now when force is set or Interval has passed since the last
// write, otherwise later (RequeueAfter). A report that cannot be written
// keeps its evidence for the next try.
func (w *ReportWriter) writePolicy(ctx context.Context, name string, force bool) (ctrl.Result, error) {
	unwritten := w.Log.Namespaces.Unwritten(name)
	if len(unwritten) == 0 {
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
		return ctrl.Result{}, nil
	}
	now := w.now()
	if wait := untilNextWrite(w.lastWrite[name], w.interval(), now); wait > 0 && !force {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	written := map[string]audit.Delta{}
	var errs []error
	ahead := false
	for _, namespace := range slices.Sorted(maps.Keys(unwritten)) {
		d := unwritten[namespace]
		switch {
		case policy.Generation > d.Generation:
			written[namespace] = d // an older spec, whose counts restarted
			continue
		case policy.Generation < d.Generation:
			ahead = true // the cache is behind the scheduler
			continue
		}
		if err := w.write(ctx, policy, namespace, &d); err != nil {
			errs = append(errs, fmt.Errorf("the report of namespace %s: %w", namespace, err))
			continue
		}
		written[namespace] = d
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

// write adds a delta to the report of a policy in a namespace, creating
// it when missing.
func (w *ReportWriter) write(ctx context.Context, policy *schedv1alpha1.SchedulingPolicy, namespace string, d *audit.Delta) error {
	name := ReportName(policy.Name)
	report := &reportsv1alpha1.Report{}
	err := w.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, report)
	switch {
	case apierrors.IsNotFound(err):
		report = w.newReport(policy, namespace, name)
		applyDelta(report, policy, d, w.now())
		return w.Client.Create(ctx, report)
	case err != nil:
		return err
	}
	applyDelta(report, policy, d, w.now())
	// The resourceVersion read is the optimistic lock: a concurrent
	// write (a previous leader's last flush) makes this one conflict.
	return w.Client.Update(ctx, report)
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
// summary counts, and the violations as the newest results; a report of an
// older generation restarts.
func applyDelta(report *reportsv1alpha1.Report, policy *schedv1alpha1.SchedulingPolicy, d *audit.Delta, now time.Time) {
	gen := strconv.FormatInt(policy.Generation, 10)
	if report.Annotations[ReportGenerationAnnotation] != gen {
		report.Summary, report.Results = reportsv1alpha1.ReportSummary{}, nil
	}
	metav1.SetMetaDataAnnotation(&report.ObjectMeta, ReportGenerationAnnotation, gen)
	report.Summary.Fail += int(d.WouldReject)
	report.Summary.Pass += int(d.Evaluated - d.WouldReject)
	results := make([]reportsv1alpha1.ReportResult, 0, len(d.Violations)+len(report.Results))
	for _, v := range d.Violations {
		results = append(results, result(policy.Name, v, now))
	}
	results = append(results, report.Results...)
	if len(results) > audit.MaxReportResults {
		results = results[:audit.MaxReportResults]
	}
	report.Results = results
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
