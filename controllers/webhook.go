package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// The webhook's configuration (config/webhook/manifests.yaml): failurePolicy
// Fail, so no policy is stored unchecked while the manager is down (nothing
// schedules with celsched then either); a timeout of 5 seconds, as compiling
// a policy takes milliseconds.
// +kubebuilder:webhook:path=/validate-scheduling-celsched-io-v1alpha1-schedulingpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=scheduling.celsched.io,resources=schedulingpolicies,verbs=create;update,versions=v1alpha1,name=vschedulingpolicy.celsched.io,admissionReviewVersions=v1,timeoutSeconds=5

// ValidatePath is where the manager's webhook server validates
// SchedulingPolicies (controller-runtime's path for the kind).
const ValidatePath = "/validate-scheduling-celsched-io-v1alpha1-schedulingpolicy"

// PolicyValidator is the validating admission webhook for SchedulingPolicy:
// it compiles the policy with the scheduler's compiler and denies a create
// or update that does not compile (a syntax, type, scope or cost error)
// with the field errors, each with its path and CEL line and column.
// Non-fatal findings (an expression close to the cost limit) come back as
// admission warnings. On update, expressions unchanged from the stored
// object compile against the stored-expressions environment, so that a
// policy valid under an older celsched stays updatable (upgrade ratcheting,
// as ValidatingAdmissionPolicy does).
type PolicyValidator struct {
	Compiler *engine.Compiler
}

var _ admission.Validator[*schedv1alpha1.SchedulingPolicy] = &PolicyValidator{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (v *PolicyValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &schedv1alpha1.SchedulingPolicy{}).WithValidator(v).Complete()
}

// ValidateCreate implements admission.Validator.
func (v *PolicyValidator) ValidateCreate(_ context.Context, p *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return v.validate(p, nil)
}

// ValidateUpdate implements admission.Validator.
func (v *PolicyValidator) ValidateUpdate(_ context.Context, old, p *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return v.validate(p, old)
}

// ValidateDelete implements admission.Validator; deletes are not checked.
func (v *PolicyValidator) ValidateDelete(context.Context, *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	return nil, nil
}

func (v *PolicyValidator) validate(p, previous *schedv1alpha1.SchedulingPolicy) (admission.Warnings, error) {
	compiled := v.Compiler.Compile(p, engine.CompileOptions{Previous: previous})
	var warnings admission.Warnings
	for _, w := range compiled.Warnings {
		warnings = append(warnings, w.FieldRef+": "+w.Warning)
	}
	if len(compiled.Errors) > 0 {
		return warnings, apierrors.NewInvalid(schedv1alpha1.GroupVersion.WithKind("SchedulingPolicy").GroupKind(), p.Name, compiled.Errors)
	}
	return warnings, nil
}
