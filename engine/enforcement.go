package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

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
	// overrides are spec.enforcementOverrides' copies, then
	// spec.rollout's waves'; numOverrides counts the former.
	overrides    []enforcementOverride
	numOverrides int
	spec         *CompiledPolicy
	unknown      *CompiledPolicy
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

// compileWaves parses spec.rollout's waves: their selectors (nil for an
// empty one, which selects every namespace), or nil and the errors.
// Waves with the same selector, and an empty selector before the last
// wave, are errors: the later waves would have no namespace.
func compileWaves(spec *schedv1alpha1.SchedulingPolicySpec) ([]labels.Selector, field.ErrorList) {
	if spec.Rollout == nil {
		return nil, nil
	}
	var errs field.ErrorList
	waves := spec.Rollout.Waves
	sels := make([]labels.Selector, len(waves))
	seen := map[string]int{}
	for i := range waves {
		path := field.NewPath("spec", "rollout", "waves").Index(i).Child("namespaceSelector")
		sel, err := metav1.LabelSelectorAsSelector(&waves[i].NamespaceSelector)
		if err != nil {
			errs = append(errs, field.Invalid(path, waves[i].NamespaceSelector, err.Error()))
			continue
		}
		if first, ok := seen[sel.String()]; ok {
			errs = append(errs, field.Duplicate(path, fmt.Sprintf("%s (the namespaces of spec.rollout.waves[%d]: this wave would have none)", sel.String(), first)))
			continue
		}
		seen[sel.String()] = i
		if sel.Empty() {
			if i < len(waves)-1 {
				errs = append(errs, field.Invalid(path, "{}", "selects every namespace: only the last wave may, the waves after it would have none"))
			}
			continue
		}
		sels[i] = sel
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sels, nil
}

// EnforcedWaves are the waves of a policy's rollout that its status says
// are enforced (by name), none when the rollout is aborted.
func EnforcedWaves(policy *schedv1alpha1.SchedulingPolicy) map[string]bool {
	st := policy.Status.Rollout
	if policy.Spec.Rollout == nil || st == nil || st.Phase == schedv1alpha1.RolloutAborted {
		return nil
	}
	out := map[string]bool{}
	for _, w := range st.Waves {
		if w.Phase == schedv1alpha1.WaveEnforced {
			out[w.Name] = true
		}
	}
	return out
}

// rolloutKey is what a policy's enforcement takes from its status: the
// enforced waves, in spec order.
func rolloutKey(waves []string, enforced map[string]bool) string {
	var b strings.Builder
	for _, w := range waves {
		if enforced[w] {
			b.WriteString(w)
			b.WriteByte(',')
		}
	}
	return b.String()
}

// RolloutKey is what a policy's enforcement takes from its status (the
// enforced waves, in spec order): when it changes and the spec does not,
// the registry re-resolves the enforcement (WithRollout) and compiles
// nothing.
func RolloutKey(policy *schedv1alpha1.SchedulingPolicy) string {
	if policy.Spec.Rollout == nil {
		return ""
	}
	names := make([]string, len(policy.Spec.Rollout.Waves))
	for i, w := range policy.Spec.Rollout.Waves {
		names[i] = w.Name
	}
	return rolloutKey(names, EnforcedWaves(policy))
}

// enforcementRules are what a policy's enforcement is decided from apart
// from its status: spec.enforcement, the overrides and the rollout's waves
// with their namespace selectors. Made once per compiled generation and
// shared by every rollout state of it (WithRollout).
type enforcementRules struct {
	enforcement schedv1alpha1.EnforcementAction
	overrides   []schedv1alpha1.EnforcementOverride
	// waves are spec.rollout's wave names, in order.
	waves []string
	// overrideSels and waveSels are the compiled selectors (nil selects
	// every namespace); invalid: an override or a wave did not compile,
	// so no namespace can be told apart.
	overrideSels, waveSels []labels.Selector
	invalid                bool
}

// finishViews keeps the enforcement rules of a compiled policy with
// overrides or a rollout, and makes its enforcement views for the waves
// its status enforces.
func (p *CompiledPolicy) finishViews(policy *schedv1alpha1.SchedulingPolicy, sels, waveSels []labels.Selector) {
	spec := &policy.Spec
	if len(spec.EnforcementOverrides) == 0 && spec.Rollout == nil {
		return
	}
	p.overridden = true
	rules := &enforcementRules{
		enforcement:  p.Enforcement,
		overrides:    slices.Clone(spec.EnforcementOverrides),
		overrideSels: sels,
		waveSels:     waveSels,
		invalid:      (len(spec.EnforcementOverrides) > 0 && sels == nil) || (spec.Rollout != nil && waveSels == nil),
	}
	if spec.Rollout != nil {
		for _, w := range spec.Rollout.Waves {
			rules.waves = append(rules.waves, w.Name)
		}
	}
	p.rules = rules
	p.resolve(EnforcedWaves(policy))
}

// resolve sets the policy's enforcement and views for the enforced
// waves (by name). When an override or a wave does not compile, no
// namespace can be told apart: the policy (which does not compile either)
// is enforced if any of its settings says Enforce.
func (p *CompiledPolicy) resolve(enforced map[string]bool) {
	rules := p.rules
	p.Enforcement, p.EnforcedBy, p.views = rules.enforcement, EnforcedBySpec, nil
	p.rolloutKey = rolloutKey(rules.waves, enforced)
	p.enforcedWaves = enforced
	if rules.invalid {
		p.EnforcedBy = EnforcedByInvalidOverrides
		for _, o := range rules.overrides {
			if o.Enforcement == schedv1alpha1.Enforce {
				p.Enforcement = schedv1alpha1.Enforce
			}
		}
		if len(enforced) > 0 {
			p.Enforcement = schedv1alpha1.Enforce
		}
		return
	}
	views := &enforcementViews{numOverrides: len(rules.overrideSels)}
	view := func(enforcement schedv1alpha1.EnforcementAction, by string, index int) *CompiledPolicy {
		c := *p
		c.Enforcement, c.EnforcedBy, c.view, c.views = enforcement, by, index, nil
		c.origin = p
		return &c
	}
	strictest := p.Enforcement
	for i, o := range rules.overrides {
		views.overrides = append(views.overrides, enforcementOverride{
			selector: rules.overrideSels[i],
			view:     view(o.Enforcement, fmt.Sprintf("spec.enforcementOverrides[%d]", i), len(views.overrides)+1),
		})
		if o.Enforcement == schedv1alpha1.Enforce {
			strictest = schedv1alpha1.Enforce
		}
	}
	for i, w := range rules.waves {
		enforcement := schedv1alpha1.Audit
		if enforced[w] {
			enforcement, strictest = schedv1alpha1.Enforce, schedv1alpha1.Enforce
		}
		v := view(enforcement, fmt.Sprintf("spec.rollout.waves[%d]", i), len(views.overrides)+1)
		v.wave = i + 1
		views.overrides = append(views.overrides, enforcementOverride{selector: rules.waveSels[i], view: v})
	}
	n := len(views.overrides)
	views.spec = view(p.Enforcement, EnforcedBySpec, n+1)
	views.unknown = view(strictest, EnforcedByUnknownNamespace, n+2)
	p.views = views
}

// WithRollout returns the policy as a version of the same generation
// (a status update) enforces it: itself when the waves its status enforces
// are the ones it has, otherwise a copy with the enforcement resolved
// again. The copy shares the compiled program, its expressions and the
// results they remember: a status change compiles nothing.
func (p *CompiledPolicy) WithRollout(policy *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	if p.rules == nil || p.rolloutKey == RolloutKey(policy) {
		return p
	}
	return p.withWaves(EnforcedWaves(policy), policy.ResourceVersion)
}

// WithWaveEnforced returns the policy with wave (an index in
// spec.rollout.waves) enforced besides the waves it enforces: what the
// policy would do once the wave is promoted. It compiles nothing; it
// returns the policy itself when it has no such wave or already enforces
// it.
func (p *CompiledPolicy) WithWaveEnforced(wave int) *CompiledPolicy {
	if p.rules == nil || wave < 0 || wave >= len(p.rules.waves) || p.enforcedWaves[p.rules.waves[wave]] {
		return p
	}
	enforced := maps.Clone(p.enforcedWaves)
	if enforced == nil {
		enforced = map[string]bool{}
	}
	enforced[p.rules.waves[wave]] = true
	return p.withWaves(enforced, p.ResourceVersion)
}

// withWaves is a copy of the policy (its top level, not a view or a bound
// copy) with the enforced waves given.
func (p *CompiledPolicy) withWaves(enforced map[string]bool, resourceVersion string) *CompiledPolicy {
	c := *p
	c.ResourceVersion = resourceVersion
	c.resolve(enforced)
	return &c
}

// Wave returns the index in spec.rollout.waves of the wave a copy of the
// policy (ForNamespace) is for, or -1.
func (p *CompiledPolicy) Wave() int { return p.wave - 1 }

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
	return p.views.numOverrides
}

// HasOverrides says whether the policy's enforcement depends on the pod's
// namespace.
func (p *Program) HasOverrides() bool { return p.overridden }
