// Package builder builds test objects shared by every package's tests, as
// kueue's wrappers and kube-scheduler's st.MakePod do:
// builder.MakePolicy("p").Filter("f", "expr").Obj(). Pods and nodes come
// from kube-scheduler's own st.MakePod and st.MakeNode where they fit.
package builder

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// PolicyWrapper builds a SchedulingPolicy for tests:
// MakePolicy("p").Filter("f", "expr").Obj().
type PolicyWrapper struct {
	p schedv1alpha1.SchedulingPolicy
}

// MakePolicy starts a policy to create: a name, Enforce and failurePolicy
// Fail. Stored gives it what the API server adds.
func MakePolicy(name string) *PolicyWrapper {
	return &PolicyWrapper{p: schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			Enforcement:   schedv1alpha1.Enforce,
			FailurePolicy: schedv1alpha1.Fail,
		},
	}}
}

// Obj returns a copy of the policy built so far.
func (b *PolicyWrapper) Obj() *schedv1alpha1.SchedulingPolicy { return b.p.DeepCopy() }

// Stored gives the policy what the API server adds when it stores it: a
// UID ("uid-NAME"), generation 1 and a resourceVersion.
func (b *PolicyWrapper) Stored() *PolicyWrapper {
	b.p.UID, b.p.Generation, b.p.ResourceVersion = ktypes.UID("uid-"+b.p.Name), 1, "1"
	return b
}

// FilterRules appends filters.
func (b *PolicyWrapper) FilterRules(rules ...schedv1alpha1.Rule) *PolicyWrapper {
	b.p.Spec.Filters = append(b.p.Spec.Filters, rules...)
	return b
}

// Generation sets the generation and resourceVersion, as an update does.
func (b *PolicyWrapper) Generation(g int64, resourceVersion string) *PolicyWrapper {
	b.p.Generation, b.p.ResourceVersion = g, resourceVersion
	return b
}

// UID sets the UID, as a re-created object gets.
func (b *PolicyWrapper) UID(uid string) *PolicyWrapper {
	b.p.UID = ktypes.UID(uid)
	return b
}

// HoldMsg appends a preEnqueue rule with a messageExpression.
func (b *PolicyWrapper) HoldMsg(name, expression, message, messageExpression string) *PolicyWrapper {
	b.p.Spec.PreEnqueue = append(b.p.Spec.PreEnqueue, schedv1alpha1.Rule{
		Name: name, Expression: expression, Message: message, MessageExpression: messageExpression,
	})
	return b
}

// Ignore sets failurePolicy Ignore.
func (b *PolicyWrapper) Ignore() *PolicyWrapper {
	b.p.Spec.FailurePolicy = schedv1alpha1.Ignore
	return b
}

// Audit sets enforcement Audit.
func (b *PolicyWrapper) Audit() *PolicyWrapper {
	b.p.Spec.Enforcement = schedv1alpha1.Audit
	return b
}

// Override appends an enforcement override for the namespaces with the
// labels.
func (b *PolicyWrapper) Override(namespaceLabels map[string]string, enforcement schedv1alpha1.EnforcementAction) *PolicyWrapper {
	b.p.Spec.EnforcementOverrides = append(b.p.Spec.EnforcementOverrides, schedv1alpha1.EnforcementOverride{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: namespaceLabels}, Enforcement: enforcement,
	})
	return b
}

// Wave appends a wave to the policy's rollout, for the namespaces with
// the labels (every namespace when nil).
func (b *PolicyWrapper) Wave(name string, namespaceLabels map[string]string, soak time.Duration) *PolicyWrapper {
	if b.p.Spec.Rollout == nil {
		b.p.Spec.Rollout = &schedv1alpha1.Rollout{}
	}
	b.p.Spec.Rollout.Waves = append(b.p.Spec.Rollout.Waves, schedv1alpha1.RolloutWave{
		Name: name, NamespaceSelector: metav1.LabelSelector{MatchLabels: namespaceLabels}, Soak: metav1.Duration{Duration: soak},
	})
	return b
}

// SchedulerNames sets the profiles that evaluate the policy.
func (b *PolicyWrapper) SchedulerNames(names ...string) *PolicyWrapper {
	b.p.Spec.SchedulerNames = names
	return b
}

func (b *PolicyWrapper) match() *schedv1alpha1.MatchResources {
	if b.p.Spec.Match == nil {
		b.p.Spec.Match = &schedv1alpha1.MatchResources{}
	}
	return b.p.Spec.Match
}

// NamespaceLabels sets a namespaceSelector matching these labels.
func (b *PolicyWrapper) NamespaceLabels(kv map[string]string) *PolicyWrapper {
	b.match().NamespaceSelector = &metav1.LabelSelector{MatchLabels: kv}
	return b
}

// PodLabels sets a podSelector matching these labels.
func (b *PolicyWrapper) PodLabels(kv map[string]string) *PolicyWrapper {
	b.match().PodSelector = &metav1.LabelSelector{MatchLabels: kv}
	return b
}

// Condition appends a match condition.
func (b *PolicyWrapper) Condition(name, expression string) *PolicyWrapper {
	b.match().Conditions = append(b.match().Conditions, schedv1alpha1.MatchCondition{Name: name, Expression: expression})
	return b
}

// Variable appends a variable.
func (b *PolicyWrapper) Variable(name, expression string) *PolicyWrapper {
	b.p.Spec.Variables = append(b.p.Spec.Variables, schedv1alpha1.Variable{Name: name, Expression: expression})
	return b
}

// PreEnqueue appends a preEnqueue rule.
func (b *PolicyWrapper) PreEnqueue(name, expression, message string) *PolicyWrapper {
	b.p.Spec.PreEnqueue = append(b.p.Spec.PreEnqueue, schedv1alpha1.Rule{Name: name, Expression: expression, Message: message})
	return b
}

// Filter appends a filter.
func (b *PolicyWrapper) Filter(name, expression string) *PolicyWrapper {
	b.p.Spec.Filters = append(b.p.Spec.Filters, schedv1alpha1.Rule{Name: name, Expression: expression})
	return b
}

// FilterMsg appends a filter with a message and a messageExpression.
func (b *PolicyWrapper) FilterMsg(name, expression, message, messageExpression string) *PolicyWrapper {
	b.p.Spec.Filters = append(b.p.Spec.Filters, schedv1alpha1.Rule{
		Name: name, Expression: expression, Message: message, MessageExpression: messageExpression,
	})
	return b
}

// Victim appends a victim rule (spec.preemption.victims).
func (b *PolicyWrapper) Victim(name, expression, message string) *PolicyWrapper {
	if b.p.Spec.Preemption == nil {
		b.p.Spec.Preemption = &schedv1alpha1.PreemptionRules{}
	}
	b.p.Spec.Preemption.Victims = append(b.p.Spec.Preemption.Victims, schedv1alpha1.VictimRule{Name: name, Expression: expression, Message: message})
	return b
}

// Importance sets spec.preemption.importance.
func (b *PolicyWrapper) Importance(expression string) *PolicyWrapper {
	if b.p.Spec.Preemption == nil {
		b.p.Spec.Preemption = &schedv1alpha1.PreemptionRules{}
	}
	b.p.Spec.Preemption.Importance = expression
	return b
}

// PlacementFilter appends a placement filter (spec.placement.filters).
func (b *PolicyWrapper) PlacementFilter(name, expression, message string) *PolicyWrapper {
	b.placement().Filters = append(b.placement().Filters, schedv1alpha1.PlacementFilter{Name: name, Expression: expression, Message: message})
	return b
}

// PlacementScore appends a placement score (spec.placement.scores); an
// empty normalization is the default, MinMax.
func (b *PolicyWrapper) PlacementScore(name, expression string, weight int32, n schedv1alpha1.ScoreNormalization) *PolicyWrapper {
	b.placement().Scores = append(b.placement().Scores, schedv1alpha1.PlacementScore{Name: name, Expression: expression, Weight: weight, Normalization: n})
	return b
}

func (b *PolicyWrapper) placement() *schedv1alpha1.PlacementRules {
	if b.p.Spec.Placement == nil {
		b.p.Spec.Placement = &schedv1alpha1.PlacementRules{}
	}
	return b.p.Spec.Placement
}

// Score appends a score rule.
func (b *PolicyWrapper) Score(name, expression string, weight int32, n schedv1alpha1.ScoreNormalization) *PolicyWrapper {
	b.p.Spec.Scores = append(b.p.Spec.Scores, schedv1alpha1.ScoreRule{Name: name, Expression: expression, Weight: weight, Normalization: n})
	return b
}

// ParamKind sets spec.paramKind.
func (b *PolicyWrapper) ParamKind(apiVersion, kind string) *PolicyWrapper {
	b.p.Spec.ParamKind = &schedv1alpha1.ParamKind{APIVersion: apiVersion, Kind: kind}
	return b
}

// ParamRef sets spec.paramRef to the object named name (in the pod's
// namespace for a namespaced kind, when namespace is empty), with the given
// parameterNotFoundAction.
func (b *PolicyWrapper) ParamRef(name, namespace string, notFound schedv1alpha1.ParameterNotFoundActionType) *PolicyWrapper {
	b.p.Spec.ParamRef = &schedv1alpha1.ParamRef{Name: name, Namespace: namespace, ParameterNotFoundAction: notFound}
	return b
}

// ParamSelector sets spec.paramRef to the objects whose labels match
// matchLabels, with the given parameterNotFoundAction.
func (b *PolicyWrapper) ParamSelector(matchLabels map[string]string, namespace string, notFound schedv1alpha1.ParameterNotFoundActionType) *PolicyWrapper {
	b.p.Spec.ParamRef = &schedv1alpha1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: matchLabels},
		Namespace: namespace, ParameterNotFoundAction: notFound}
	return b
}
