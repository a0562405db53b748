package engine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Where a policy's enforcement for a pod comes from (CompiledPolicy.EnforcedBy).
const (
	// EnforcedBySpec: spec.enforcement, for a policy without overrides or
	// a namespace no override selects.
	EnforcedBySpec = "spec.enforcement"
	// EnforcedByUnknownNamespace: the pod's namespace is not known yet, and
	// the policy is enforced where any of its settings says Enforce.
	EnforcedByUnknownNamespace = "spec.enforcementOverrides (the pod's namespace is not known yet)"
	// EnforcedByInvalidOverrides: an override does not compile, so no
	// namespace can be told apart; the policy (which does not compile
	// either) is enforced where any of its settings says Enforce.
	EnforcedByInvalidOverrides = "spec.enforcementOverrides (an override does not compile)"
)

// enforcementViews are the copies of a policy with enforcementOverrides,
// one per enforcement a pod may get: the first override whose selector
// selects the pod's namespace, spec.enforcement when none does, and the
// strictest when the namespace is not known. Each copy shares the compiled
// expressions (and so their remembered results) and differs only in
// Enforcement and EnforcedBy.
type enforcementViews struct {
	overrides []enforcementOverride
	spec      *CompiledPolicy
	unknown   *CompiledPolicy
}

type enforcementOverride struct {
	// selector selects the namespaces; nil selects every namespace.
	selector labels.Selector
	view     *CompiledPolicy
}

// compileOverrides parses spec.enforcementOverrides, and warns of the
// overrides that never apply (after one that selects every namespace). The
// views are made by finishViews, once the policy is compiled.
func compileOverrides(spec *schedv1alpha1.SchedulingPolicySpec) ([]labels.Selector, field.ErrorList, []schedv1alpha1.ExpressionWarning) {
	var errs field.ErrorList
	var warnings []schedv1alpha1.ExpressionWarning
	sels := make([]labels.Selector, len(spec.EnforcementOverrides))
	all := -1 // the first override that selects every namespace
	for i := range spec.EnforcementOverrides {
		o := &spec.EnforcementOverrides[i]
		path := field.NewPath("spec", "enforcementOverrides").Index(i)
		if all >= 0 {
			warnings = append(warnings, schedv1alpha1.ExpressionWarning{FieldRef: path.String(),
				Warning: fmt.Sprintf("never applies: spec.enforcementOverrides[%d] selects every namespace", all)})
		}
		switch o.Enforcement {
		case schedv1alpha1.Enforce, schedv1alpha1.Audit:
		default:
			errs = append(errs, field.NotSupported(path.Child("enforcement"), o.Enforcement, []string{string(schedv1alpha1.Enforce), string(schedv1alpha1.Audit)}))
		}
		sel, err := metav1.LabelSelectorAsSelector(&o.NamespaceSelector)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("namespaceSelector"), o.NamespaceSelector, err.Error()))
			continue
		}
		if !sel.Empty() {
			sels[i] = sel
		} else if all < 0 {
			all = i
		}
	}
	if len(errs) > 0 {
		sels = nil
	}
	return sels, errs, warnings
}

// finishViews makes the enforcement views of a compiled policy with
// overrides. When an override does not compile (sels is nil), no
// namespace can be told apart: the policy (which does not compile either)
// is enforced if any of its settings says Enforce.
func (p *CompiledPolicy) finishViews(spec *schedv1alpha1.SchedulingPolicySpec, sels []labels.Selector) {
	if len(spec.EnforcementOverrides) == 0 {
		return
	}
	p.overridden = true
	if sels == nil {
		p.EnforcedBy = EnforcedByInvalidOverrides
		for _, o := range spec.EnforcementOverrides {
			if o.Enforcement == schedv1alpha1.Enforce {
				p.Enforcement = schedv1alpha1.Enforce
			}
		}
		return
	}
	views := &enforcementViews{}
	view := func(enforcement schedv1alpha1.EnforcementAction, by string, index int) *CompiledPolicy {
		c := *p
		c.Enforcement, c.EnforcedBy, c.view, c.views = enforcement, by, index, nil
		c.origin = p
		return &c
	}
	strictest := p.Enforcement
	for i, o := range spec.EnforcementOverrides {
		views.overrides = append(views.overrides, enforcementOverride{
			selector: sels[i],
			view:     view(o.Enforcement, fmt.Sprintf("spec.enforcementOverrides[%d]", i), i+1),
		})
		if o.Enforcement == schedv1alpha1.Enforce {
			strictest = schedv1alpha1.Enforce
		}
	}
	views.spec = view(p.Enforcement, EnforcedBySpec, len(sels)+1)
	views.unknown = view(strictest, EnforcedByUnknownNamespace, len(sels)+2)
	p.views = views
}

// ForNamespace returns the policy as it applies to the pods of a namespace
// (nil when not known): itself without enforcementOverrides, otherwise the
// copy whose Enforcement is the first override's that selects the
// namespace, or spec.enforcement's.
func (p *CompiledPolicy) ForNamespace(ns *corev1.Namespace) *CompiledPolicy {
	v := p.views
	if v == nil {
		return p
	}
	if ns == nil {
		return v.unknown
	}
	for i := range v.overrides {
		if o := &v.overrides[i]; o.selector == nil || o.selector.Matches(labels.Set(ns.Labels)) {
			return o.view
		}
	}
	return v.spec
}

// NumOverrides is the number of enforcementOverrides that compiled (0
// when one did not).
func (p *CompiledPolicy) NumOverrides() int {
	if p.views == nil {
		return 0
	}
	return len(p.views.overrides)
}

// HasOverrides says whether the policy's enforcement depends on the pod's
// namespace.
func (p *CompiledPolicy) HasOverrides() bool { return p.overridden }
