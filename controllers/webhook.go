package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// The webhook's configuration (config/webhook/manifests.yaml): failurePolicy
// Fail, so no policy is stored unchecked while the manager is down (nothing
// schedules with celsched then either); a timeout of 5 seconds, as compiling
// a policy takes milliseconds (the largest, 64 rules of 5,120 characters of
// errors each, about 0.3 s).
// +kubebuilder:webhook:path=/validate-scheduling-celsched-io-v1alpha1-schedulingpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=scheduling.celsched.io,resources=schedulingpolicies,verbs=create;update,versions=v1alpha1,name=vschedulingpolicy.celsched.io,admissionReviewVersions=v1,timeoutSeconds=5

// Defaults of PolicyValidator's limits.
const (
	// DefaultMaxConcurrentCompiles: the webhook runs in the scheduler's
	// process, and compiles one policy at a time, so that it takes at most
	// one CPU from the scheduler however many requests come.
	DefaultMaxConcurrentCompiles = 1
	// DefaultCompileTimeout is how long one request may wait and compile,
	// under the webhook's timeout of 5 seconds, so that a slow request is
	// denied with a reason rather than abandoned by the API server.
	DefaultCompileTimeout = 4 * time.Second
	// MaxDenialErrors is how many field errors a denial lists; the last
	// says that there are more. With engine.MaxIssuesPerExpression,
	// engine.MaxSnippetWidth and engine.MaxQuotedExpression this keeps a
	// denial under about 12 KiB, however large the policy.
	MaxDenialErrors = 10
)

// PolicyValidator is the validating admission webhook for SchedulingPolicy:
// it compiles the policy with the scheduler's compiler and denies a create
// or update that does not compile (a syntax, type, scope or cost error)
// with the field errors, each with its path and CEL line and column.
// Non-fatal findings (an expression close to the cost limit, params that
// the pod's namespace can write: tenantWritableParams) come back as
// admission warnings. On update, expressions unchanged from the stored
// object compile against the stored-expressions environment, so that a
// policy valid under an older celsched stays updatable (upgrade ratcheting,
// as ValidatingAdmissionPolicy does).
//
// It shares the scheduler's process, so it answers fast and small: at most
// MaxConcurrentCompiles compiles run at once (a request waits for its turn
// as long as its context allows), a compile stops when the request's
// context is done or CompileTimeout has passed, and a denial lists at most
// MaxDenialErrors errors, each of bounded length.
type PolicyValidator struct {
	Compiler *engine.Compiler
	// ParamTypes, when set, types the params of custom param kinds
	// (LiveParamTypes: from their CRDs).
	ParamTypes engine.ParamTypes
	// MaxConcurrentCompiles bounds the compiles running at once;
	// DefaultMaxConcurrentCompiles when zero.
	MaxConcurrentCompiles int
	// CompileTimeout bounds one request's wait and compile;
	// DefaultCompileTimeout when zero.
	CompileTimeout time.Duration

	semOnce sync.Once
	sem     chan struct{}
}

var _ admission.Validator[*schedv1alpha1.SchedulingPolicy] = &PolicyValidator{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (v *PolicyValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &schedv1alpha1.SchedulingPolicy{}).WithValidator(v).Complete()
}

// ValidateCreate implements admission.Validator.
func (v *PolicyValidator) ValidateCreate(ctx context.Context, p *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return v.validate(ctx, p, nil)
}

// ValidateUpdate implements admission.Validator.
func (v *PolicyValidator) ValidateUpdate(ctx context.Context, old, p *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return v.validate(ctx, p, old)
}

// ValidateDelete implements admission.Validator; deletes are not checked.
func (v *PolicyValidator) ValidateDelete(context.Context, *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return nil, nil
}

func (v *PolicyValidator) validate(ctx context.Context, p, previous *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	timeout := v.CompileTimeout
	if timeout <= 0 {
		timeout = DefaultCompileTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the webhook's compile timeout of %v passed", timeout))
	defer cancel()
	release, err := v.acquire(ctx)
	if err != nil {
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("SchedulingPolicy %s was not compiled: %v", p.Name, err), 1)
	}
	opts := engine.CompileOptions{Previous: previous, MaxErrors: MaxDenialErrors}
	if v.ParamTypes != nil {
		opts.ParamTypes = v.ParamTypes
	}
	compiled := v.Compiler.CompileContext(ctx, p, opts)
	release()
	var warnings admission.Warnings
	for _, w := range compiled.Warnings {
		warnings = append(warnings, w.FieldRef+": "+w.Warning)
	}
	if w := tenantWritableParams(p); w != "" {
		warnings = append(warnings, w)
	}
	if len(compiled.Errors) > 0 {
		return warnings, apierrors.NewInvalid(schedv1alpha1.GroupVersion.WithKind("SchedulingPolicy").GroupKind(), p.Name, compiled.Errors)
	}
	return warnings, nil
}

// acquire waits for a compile slot, as long as ctx allows; release gives
// it back.
func (v *PolicyValidator) acquire(ctx context.Context) (release func(), err error) {
	v.semOnce.Do(func() {
		n := v.MaxConcurrentCompiles
		if n <= 0 {
			n = DefaultMaxConcurrentCompiles
		}
		v.sem = make(chan struct{}, n)
	})
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("the request is done: %w", err)
	}
	select {
	case v.sem <- struct{}{}:
		return func() { <-v.sem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another compile to end: %w", context.Cause(ctx))
	}
}

// editWritableKinds are the namespaced kinds that the built-in edit role
// (and so admin, which aggregates it) lets a namespace's users create and
// update, by group and kind, with their resource: the writable resources
// of kube-apiserver's system:aggregate-to-edit ClusterRole, at its default
// feature gates (TestEditWritableKinds compares them). A policy whose
// params are objects of these kinds in the pod's namespace takes its
// values from the namespace's users: they can move their own fence.
var editWritableKinds = map[schema.GroupKind]string{
	{Kind: "ConfigMap"}:                                       "configmaps",
	{Kind: "Secret"}:                                          "secrets",
	{Kind: "Pod"}:                                             "pods",
	{Kind: "Service"}:                                         "services",
	{Kind: "ServiceAccount"}:                                  "serviceaccounts",
	{Kind: "PersistentVolumeClaim"}:                           "persistentvolumeclaims",
	{Kind: "ReplicationController"}:                           "replicationcontrollers",
	{Kind: "Event"}:                                           "events",
	{Group: "events.k8s.io", Kind: "Event"}:                   "events",
	{Group: "apps", Kind: "Deployment"}:                       "deployments",
	{Group: "apps", Kind: "StatefulSet"}:                      "statefulsets",
	{Group: "apps", Kind: "DaemonSet"}:                        "daemonsets",
	{Group: "apps", Kind: "ReplicaSet"}:                       "replicasets",
	{Group: "batch", Kind: "Job"}:                             "jobs",
	{Group: "batch", Kind: "CronJob"}:                         "cronjobs",
	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}:   "horizontalpodautoscalers",
	{Group: "policy", Kind: "PodDisruptionBudget"}:            "poddisruptionbudgets",
	{Group: "networking.k8s.io", Kind: "Ingress"}:             "ingresses",
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:       "networkpolicies",
	{Group: "coordination.k8s.io", Kind: "Lease"}:             "leases",
	{Group: "resource.k8s.io", Kind: "ResourceClaim"}:         "resourceclaims",
	{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}: "resourceclaimtemplates",
}

// tenantWritableParams returns the warning for a policy whose params are
// read in the pod's own namespace (a paramRef without a namespace) from a
// kind that the built-in edit role lets that namespace's users write: an
// admission warning, not a denial, as single-team clusters may want it.
// It returns "" for any other policy.
func tenantWritableParams(p *schedv1alpha1.SchedulingPolicy) string {
	kind, ref := p.Spec.ParamKind, p.Spec.ParamRef
	if kind == nil || ref == nil || ref.Namespace != "" {
		return ""
	}
	gv, err := schema.ParseGroupVersion(kind.APIVersion)
	if err != nil {
		return "" // the compile error says why
	}
	if _, ok := editWritableKinds[gv.WithKind(kind.Kind).GroupKind()]; !ok {
		return ""
	}
	return fmt.Sprintf("spec.paramRef: the params are %s objects of the pod's own namespace, which users with the built-in edit or admin role there can write, "+
		"so they can change where their own pods may run; for per-tenant params use TenantPlacement (scheduling.celsched.io/v1alpha1), "+
		"which they cannot write, or set paramRef.namespace (docs/security.md)", kind.Kind)
}
