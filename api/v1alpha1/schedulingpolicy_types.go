package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits enforced by the CRD schema. The validation markers below must use the
// same numbers; TestCRDLimitsMatchConstants checks that they do.
const (
	// MaxExpressionLength is the maximum length in bytes of a CEL expression.
	MaxExpressionLength = 5120
	// MaxMessageLength is the maximum length in bytes of a static message.
	MaxMessageLength = 1024
	// MaxRulesPerList is the maximum number of entries in each of
	// match.conditions, variables, preEnqueue, filters, scores,
	// placement.filters and placement.scores.
	MaxRulesPerList = 64
	// MaxSchedulerNames is the maximum number of entries in schedulerNames.
	MaxSchedulerNames = 16
	// MinScoreWeight and MaxScoreWeight bound a score rule's weight.
	MinScoreWeight = 1
	// MaxScoreWeight is the largest weight of a score rule.
	MaxScoreWeight = 100
)

// EnforcementAction says whether a policy's verdicts change scheduling
// decisions.
// +kubebuilder:validation:Enum=Enforce;Audit
type EnforcementAction string

const (
	// Enforce applies the policy: preEnqueue rules hold pods, filters reject
	// nodes and scores rank them.
	Enforce EnforcementAction = "Enforce"
	// Audit evaluates the policy and reports what it would have done, but never
	// changes a scheduling decision.
	Audit EnforcementAction = "Audit"
)

// FailurePolicyType says what a compile or evaluation error of a policy does.
// +kubebuilder:validation:Enum=Fail;Ignore
type FailurePolicyType string

const (
	// Fail treats an error as a rejection: the pod is held (preEnqueue) or the
	// node is infeasible (filters); a failing score rule fails the cycle.
	Fail FailurePolicyType = "Fail"
	// Ignore skips only what failed, as in ValidatingAdmissionPolicy: a
	// failing preEnqueue rule or filter is skipped and the policy's other
	// rules still apply; a failing score rule scores 0 on that node (and the
	// node takes no part in that rule's normalization); a failing match
	// condition, or a compile error, skips the policy for the pod.
	Ignore FailurePolicyType = "Ignore"
)

// ScoreNormalization says how the raw values of a score rule across the
// candidate nodes (of a placement score across the candidate placements)
// are mapped to 0..100.
// +kubebuilder:validation:Enum=MinMax;MinMaxReverse;None
type ScoreNormalization string

const (
	// MinMax maps the lowest raw value among the candidates to 0 and the
	// highest to 100, linearly.
	MinMax ScoreNormalization = "MinMax"
	// MinMaxReverse maps the lowest raw value to 100 and the highest to 0.
	MinMaxReverse ScoreNormalization = "MinMaxReverse"
	// None uses the raw value as the score, clamped to 0..100.
	None ScoreNormalization = "None"
)

// ParameterNotFoundActionType says what a parameterized policy does for a
// pod when no params object is found.
// +kubebuilder:validation:Enum=Allow;Deny
type ParameterNotFoundActionType string

const (
	// AllowAction skips the policy for the pod.
	AllowAction ParameterNotFoundActionType = "Allow"
	// DenyAction holds the pod (when the policy has preEnqueue rules) or
	// rejects it on every node, with a message naming the policy and the
	// missing params.
	DenyAction ParameterNotFoundActionType = "Deny"
)

// ParamKind is the kind of the objects that hold a policy's parameters, as
// in ValidatingAdmissionPolicy.
type ParamKind struct {
	// apiVersion is the group/version of the kind, e.g. v1 or
	// example.com/v1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	APIVersion string `json:"apiVersion"`

	// kind is the kind, e.g. ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// ParamRef says which objects of the paramKind a policy reads as params for
// a pod, as in ValidatingAdmissionPolicyBinding.
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name or selector must be set"
type ParamRef struct {
	// name is the name of the params object. Exactly one of name and
	// selector is set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// selector selects params objects by label; the policy is applied once
	// per object found (every filter and preEnqueue rule must pass for each;
	// the score rules' values are averaged over the objects). An empty
	// selector selects every object of the namespace (or cluster).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// namespace is the namespace of the params objects when paramKind is
	// namespaced. When omitted, the pod's namespace is used: one policy,
	// per-namespace values. It must be omitted for a cluster-scoped
	// paramKind.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// parameterNotFoundAction says what happens when no params object is
	// found for a pod: Deny holds or rejects the pod, with a message naming
	// the policy and the missing params; Allow skips the policy for the
	// pod. Defaults to Deny.
	// +optional
	// +kubebuilder:default=Deny
	ParameterNotFoundAction ParameterNotFoundActionType `json:"parameterNotFoundAction,omitempty"`
}

// EnforcementOverride sets a policy's enforcement for the pods of the
// namespaces it selects.
type EnforcementOverride struct {
	// namespaceSelector selects the namespaces, by label. An empty
	// selector selects every namespace.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// enforcement is the policy's enforcement for the pods of those
	// namespaces.
	// +required
	Enforcement EnforcementAction `json:"enforcement"`
}

// Rollout is the ordered waves in which a policy is enforced.
type Rollout struct {
	// waves are promoted in order; a namespace belongs to the first wave
	// whose namespaceSelector selects it.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Waves []RolloutWave `json:"waves"`
}

// RolloutWave is one wave of a rollout.
type RolloutWave struct {
	// name names the wave in status, events and the CLI.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// namespaceSelector selects the wave's namespaces, by label. An empty
	// selector selects every namespace: only the last wave may have one.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// soak is how long the wave is audited before it may be promoted
	// (e.g. 30m, 24h).
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="soak must be longer than 0s: a wave is promoted on the evidence of its soak (enforce a namespace at once with enforcementOverrides)"
	Soak metav1.Duration `json:"soak"`

	// maxWouldReject is the gate: the most pods of the wave's namespaces
	// that the policy may have held or kept off their node during the
	// soak for the wave to be promoted. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxWouldReject *int32 `json:"maxWouldReject,omitempty"`
}

// Gate is the wave's maxWouldReject, 0 when unset.
func (w *RolloutWave) Gate() int64 {
	if w.MaxWouldReject != nil {
		return int64(*w.MaxWouldReject)
	}
	return 0
}

// SchedulingPolicySpec holds the placement rules of a policy.
// +kubebuilder:validation:XValidation:rule="!has(self.rollout) || self.enforcement == 'Audit'",message="spec.enforcement must be Audit with spec.rollout: the waves decide where the policy is enforced",fieldPath=".enforcement"
// +kubebuilder:validation:XValidation:rule="(has(self.preEnqueue) && size(self.preEnqueue) > 0) || (has(self.filters) && size(self.filters) > 0) || (has(self.scores) && size(self.scores) > 0) || (has(self.placement) && ((has(self.placement.filters) && size(self.placement.filters) > 0) || (has(self.placement.scores) && size(self.placement.scores) > 0))) || has(self.preemption)",message="at least one of preEnqueue, filters, scores, placement.filters, placement.scores, preemption.victims or preemption.importance must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.paramRef) || has(self.paramKind)",message="paramRef requires paramKind"
// +kubebuilder:validation:XValidation:rule="!has(self.paramKind) || has(self.paramRef)",message="paramKind requires paramRef"
type SchedulingPolicySpec struct {
	// schedulerNames lists the scheduler profiles (pod.spec.schedulerName)
	// that evaluate this policy. Empty means every profile that enables the
	// celsched plugins.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	SchedulerNames []string `json:"schedulerNames,omitempty"`

	// enforcement says whether the policy changes scheduling decisions
	// (Enforce) or is only evaluated and reported (Audit). Defaults to Enforce.
	// +optional
	// +kubebuilder:default=Enforce
	Enforcement EnforcementAction `json:"enforcement,omitempty"`

	// enforcementOverrides set the enforcement for the pods of some
	// namespaces: the first override whose namespaceSelector selects the
	// pod's namespace applies, and enforcement applies to the pods of the
	// namespaces none selects. So a policy introduced in Audit can be
	// enforced namespace by namespace (or the other way round) without
	// being cloned. While a pod's namespace is not known yet, the policy is
	// enforced if enforcement or any override says Enforce.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	EnforcementOverrides []EnforcementOverride `json:"enforcementOverrides,omitempty"`

	// rollout enforces the policy wave by wave: each wave's namespaces
	// are audited for the wave's soak, and the wave is promoted to Enforce
	// when the pods the policy would have held or kept off their node
	// during the soak are within its gate; otherwise the rollout pauses.
	// spec.enforcement must be Audit (it applies to the namespaces of no
	// wave); enforcementOverrides come first. See status.rollout.
	// +optional
	Rollout *Rollout `json:"rollout,omitempty"`

	// remediation evicts the running pods that the policy's enforced
	// filters refuse on their node (status.drift), within budgets; off
	// when unset. See Remediation.
	// +optional
	Remediation *Remediation `json:"remediation,omitempty"`

	// driftScope says which running pods status.drift, the policy's
	// Reports and `celsched analyze` (running-in-violation) evaluate:
	// AllPods (the default) evaluates every running pod the policy
	// matches, whoever placed it (another scheduler, or a pod created
	// with spec.nodeName), as celsched's first profile would; ProfilePods
	// only the pods whose schedulerName is one of the scheduler's
	// profiles.
	// +optional
	// +kubebuilder:validation:Enum=AllPods;ProfilePods
	DriftScope DriftScope `json:"driftScope,omitempty"`

	// failurePolicy says what a compile or evaluation error does: Fail rejects
	// (holds the pod, marks the node infeasible); Ignore skips only the rule
	// that failed (a score rule scores 0 on that node) and the policy's other
	// rules still apply, while a failing match condition or a compile error
	// skips the policy for the pod. Defaults to Fail.
	// +optional
	// +kubebuilder:default=Fail
	FailurePolicy FailurePolicyType `json:"failurePolicy,omitempty"`

	// paramKind is the kind of the objects holding the policy's parameters,
	// which its expressions read as params (e.g. v1 ConfigMap). Without it,
	// params is null.
	// +optional
	ParamKind *ParamKind `json:"paramKind,omitempty"`

	// paramRef says which objects of paramKind are the params for a pod.
	// Required with paramKind.
	// +optional
	ParamRef *ParamRef `json:"paramRef,omitempty"`

	// match selects the pods the policy applies to. All given parts must
	// match. When omitted, the policy applies to every pod of the profiles in
	// schedulerNames.
	// +optional
	Match *MatchResources `json:"match,omitempty"`

	// variables are named CEL expressions, usable in the other expressions as
	// variables.<name>. Each is evaluated lazily, at most once per pod and
	// node. A variable may use earlier variables. A variable that reads node
	// or nodeInfo may only be used by filters and scores.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Variables []Variable `json:"variables,omitempty"`

	// preEnqueue rules are CEL expressions over pod, namespaceObject (the
	// pod's namespace) and variables that use only those. A pod enters the scheduling queue only when every
	// rule of every matching policy is true; otherwise it is held, with the
	// rule's message on the pod.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	PreEnqueue []Rule `json:"preEnqueue,omitempty"`

	// filters are CEL expressions over pod, node, nodeInfo, namespaceObject
	// and variables. A node is feasible for a matching pod only when every filter
	// of every matching policy is true.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Filters []Rule `json:"filters,omitempty"`

	// scores are CEL expressions that compute a number (int, uint or double)
	// per feasible node. Each rule's values are normalized to 0..100 across
	// the nodes and combined as a weighted mean.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Scores []ScoreRule `json:"scores,omitempty"`

	// placement holds the rules over a pod group's candidate placements,
	// evaluated once per placement in the group's scheduling cycle (the
	// workload feature gates must be on). They apply to the groups whose
	// member pods the policy matches.
	// +optional
	Placement *PlacementRules `json:"placement,omitempty"`

	// preemption holds the rules over whom the pods the policy matches may
	// preempt. kube-scheduler's DefaultPreemption considers a running pod
	// of lower priority as a victim only if every preemption rule of every
	// enforced policy that matches the preemptor admits it. Preemptors at
	// or above system-cluster-critical's priority (2000000000) are never
	// refused a victim.
	// +optional
	Preemption *PreemptionRules `json:"preemption,omitempty"`
}

// PreemptionRules are the rules of a policy over whom its pods may
// preempt.
// +kubebuilder:validation:XValidation:rule="has(self.victims) || has(self.importance)",message="set victims, importance or both"
type PreemptionRules struct {
	// victims are CEL expressions over pod (the preemptor),
	// namespaceObject (its namespace), victim (a running pod of lower
	// priority that preemption would evict; for a pod group, each of its
	// pods), victimNamespaceObject (the victim's namespace) and node (the
	// node the victim runs on). A victim is eligible only when every rule
	// is true; a false rule protects it, and its message says why.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Victims []VictimRule `json:"victims,omitempty"`

	// importance is a CEL expression over pod and namespaceObject, like a
	// preEnqueue rule's, that evaluates to a number: how much the pods
	// this policy applies to are worth keeping when they are candidate
	// victims. Among the candidate victims of equal priority on a node,
	// kube-scheduler's DefaultPreemption spares the most important first
	// (MoreImportantVictim), so the least important are evicted; priority
	// still comes first, and after importance DefaultPreemption's own
	// order (pod groups before pods, then the longest running). A pod has
	// the highest importance that the enforced policies applying to it
	// give (0 when none does, or when the expression fails: an order is a
	// preference, never a protection; protect with victims).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Importance string `json:"importance,omitempty"`
}

// VictimRule is a named CEL expression over a preemptor and one candidate
// victim.
type VictimRule struct {
	// name identifies the rule in messages and events: lowercase letters,
	// digits and '-', at most 63 characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to a bool; true lets
	// the preemptor evict the victim.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`

	// message says why a victim is protected when the rule is false. When
	// omitted, the message is "expression is false".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// PlacementRules are the rules of a policy over a pod group's candidate
// placements.
type PlacementRules struct {
	// filters are CEL expressions over placement (placement.nodes: the
	// candidate placement's nodes, each with metadata.name and
	// metadata.labels; placement.count: how many) and podGroup
	// (metadata.name, metadata.namespace, metadata.labels, minCount). A
	// placement is a candidate for a matching group only when every
	// placement filter of every matching policy is true.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Filters []PlacementFilter `json:"filters,omitempty"`

	// scores are CEL expressions that compute a number (int, uint or
	// double) per candidate placement that a matching group fits, over
	// placement (as for filters, plus placement.assignedNodes: the node
	// proposed for each of the group's pods in this placement, with
	// metadata.name and metadata.labels) and podGroup. Each rule's values
	// are normalized to 0..100 across the placements that kube-scheduler
	// scores for the group, as a score rule's are across the nodes, and a
	// placement's score is the weighted mean of the rules of every enforced
	// matching policy, which kube-scheduler weighs against its own
	// placement scores.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Scores []PlacementScore `json:"scores,omitempty"`
}

// PlacementScore is a named CEL expression over a candidate placement of a
// pod group that evaluates to a number, with its weight.
type PlacementScore struct {
	// name identifies the rule: lowercase letters, digits and '-', at most
	// 63 characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to an int, uint or
	// double: the rule's raw value for a placement.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`

	// weight is the rule's weight in the weighted mean of the placement
	// scores of all the enforced policies that match the group's pods, 1
	// to 100. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`

	// normalization maps the raw values across the placements that
	// kube-scheduler scores for the group to 0..100, as a score rule's
	// across the nodes: MinMax (lowest 0, highest 100), MinMaxReverse
	// (lowest 100, highest 0) or None (the raw value clamped to 0..100).
	// Defaults to MinMax.
	// +optional
	// +kubebuilder:default=MinMax
	Normalization ScoreNormalization `json:"normalization,omitempty"`
}

// PlacementFilter is a named CEL expression over a candidate placement of a
// pod group that evaluates to a bool, with the message shown when it is
// false.
type PlacementFilter struct {
	// name identifies the rule in messages, events and status: lowercase
	// letters, digits and '-', at most 63 characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to a bool; true keeps
	// the placement.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`

	// message is shown when the rule is false. When omitted, the message
	// is "expression is false".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MatchResources selects the pods a policy applies to.
type MatchResources struct {
	// namespaceSelector selects pods by the labels of their namespace. When
	// omitted, pods of every namespace match.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// podSelector selects pods by their labels. When omitted, every pod
	// matches.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// conditions are CEL expressions over pod, namespaceObject and variables
	// that use only those, like a ValidatingAdmissionPolicy's matchConditions. The
	// pod matches only when every condition is true.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Conditions []MatchCondition `json:"conditions,omitempty"`
}

// MatchCondition is a named CEL expression that must be true for a pod to
// match.
type MatchCondition struct {
	// name identifies the condition in messages and status: lowercase letters,
	// digits and '-', at most 63 characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to a bool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`
}

// Variable is a named CEL expression whose value other expressions read as
// variables.<name>.
type Variable struct {
	// name is the variable's name, a CEL identifier (letters, digits and '_',
	// not starting with a digit), unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	Name string `json:"name"`

	// expression is a CEL expression of any type.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`
}

// Rule is a named CEL expression that evaluates to a bool, with the message
// shown when it is false.
type Rule struct {
	// name identifies the rule in messages, events and status: lowercase
	// letters, digits and '-', at most 63 characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to a bool; true passes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`

	// message is shown when the rule is false. When both message and
	// messageExpression are omitted, the message is "expression is false".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// messageExpression is a CEL expression that evaluates to a string,
	// shown when the rule is false. It takes precedence over message; if it
	// fails or yields an empty string, message is used instead.
	// +optional
	// +kubebuilder:validation:MaxLength=5120
	MessageExpression string `json:"messageExpression,omitempty"`
}

// ScoreRule is a named CEL expression that computes a number per node.
type ScoreRule struct {
	// name identifies the rule: lowercase letters, digits and '-', at most 63
	// characters, unique within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to an int, uint or double:
	// the rule's raw value for a node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5120
	Expression string `json:"expression"`

	// weight is the rule's weight in the weighted mean of the normalized
	// scores of all the score rules of the enforced policies that match the
	// pod, 1 to 100. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`

	// normalization maps the raw values across the candidate nodes to
	// 0..100: MinMax (lowest 0, highest 100), MinMaxReverse (lowest 100,
	// highest 0) or None (the raw value clamped to 0..100). Defaults to
	// MinMax.
	// +optional
	// +kubebuilder:default=MinMax
	Normalization ScoreNormalization `json:"normalization,omitempty"`
}

// ExpressionWarning is a non-fatal finding about one expression of a policy,
// such as a high estimated cost.
type ExpressionWarning struct {
	// fieldRef is the path of the expression, e.g.
	// spec.filters[0].expression.
	// +required
	FieldRef string `json:"fieldRef"`

	// warning is the human-readable finding.
	// +required
	Warning string `json:"warning"`
}

// Condition types and reasons of SchedulingPolicy status. They follow
// kstatus (sigs.k8s.io/cli-utils/pkg/kstatus), which Flux, Argo CD and
// `kubectl wait` read: Ready is a normal-true condition; Stalled is
// abnormal-true and present only while the policy cannot progress without
// a change to its spec. There is no Reconciling condition: a policy is
// compiled as soon as the manager sees it, so the only in-progress state is
// status.observedGeneration lagging metadata.generation.
const (
	// ConditionReady is True when the policy compiled and is active.
	ConditionReady = "Ready"
	// ConditionStalled is True, with reason CompileError and the same
	// message as Ready, while an expression does not compile.
	ConditionStalled = "Stalled"
	// ReasonCompiled is Ready's reason when every expression compiled.
	ReasonCompiled = "Compiled"
	// ReasonCompileError is Ready's reason when an expression did not
	// compile; the message lists the field errors.
	ReasonCompileError = "CompileError"
	// ReasonParamKindNotFound is Ready's reason when the policy compiled but
	// its paramKind is not served by the API server (a missing CRD): the
	// policy follows its failurePolicy for every pod it matches.
	ReasonParamKindNotFound = "ParamKindNotFound"
	// ReasonParamsNotReadable is Ready's reason when the policy's paramKind
	// is served but the manager cannot list its objects (it was not
	// granted them): the policy rejects or holds the pods it matches until
	// it can.
	ReasonParamsNotReadable = "ParamsNotReadable"
	// ReasonParamsListing is Ready's reason (status False) while the
	// scheduler lists the objects of the policy's paramKind for the first
	// time: until then the policy follows its failurePolicy for the pods it
	// matches, so it is not ready yet.
	ReasonParamsListing = "ParamsListing"
	// ConditionSlow is True, with reason TimeBudgetExceeded, when a rule of
	// the policy's current generation was cut off by the CEL time budget of
	// a pod's scheduling cycle: the message names the rule. It is removed
	// when the spec changes. kstatus does not read it.
	ConditionSlow = "Slow"
	// ReasonTimeBudgetExceeded is Slow's reason.
	ReasonTimeBudgetExceeded = "TimeBudgetExceeded"
	// ConditionEvaluationError is True, with reason RuleFailed, when a rule
	// of the policy's current generation failed to evaluate in the
	// scheduler: the message has the rule and the full error, which pods do
	// not see. It is removed when the spec changes. kstatus does not read it.
	ConditionEvaluationError = "EvaluationError"
	// ReasonRuleFailed is EvaluationError's reason.
	ReasonRuleFailed = "RuleFailed"
	// ConditionRolloutPaused is True while the policy's rollout
	// (spec.rollout) is paused; its reason is status.rollout.pauseReason
	// (GateExceeded, with a message naming the wave, the count and the
	// last pods, or PausedByRequest). kstatus does not read it.
	ConditionRolloutPaused = "RolloutPaused"
	// ReasonGateExceeded is RolloutPaused's reason when a wave's soak
	// ended with more pods it would have rejected than its gate allows.
	ReasonGateExceeded = string(PauseGateExceeded)
	// ReasonPausedByRequest is RolloutPaused's reason after `celsched
	// rollout pause`.
	ReasonPausedByRequest = string(PauseByRequest)
)

// SchedulingPolicyStatus is the observed state of a policy.
type SchedulingPolicyStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// enforcement is where the policy is enforced now, for people
	// (`kubectl get schedpol`): spec.enforcement, with the number of
	// enforcementOverrides; with spec.rollout, "Enforce in <k>/<n> waves"
	// once a wave of this generation is Enforced, "Audit" before.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Enforcement string `json:"enforcement,omitempty"`

	// conditions describe the policy's state. Ready is True when every
	// expression compiled and the policy is active in the scheduler;
	// Stalled is True while an expression does not compile (kstatus).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// expressionWarnings are non-fatal findings about the policy's
	// expressions, with their field paths.
	// +optional
	// +listType=atomic
	ExpressionWarnings []ExpressionWarning `json:"expressionWarnings,omitempty"`

	// audit summarizes what the policy would have done while its
	// enforcement is Audit: the evidence for switching it to Enforce. The
	// scheduler writes it at most once per interval (the manager's
	// --audit-status-interval); it stays when the policy is switched to
	// Enforce.
	// +optional
	Audit *AuditStatus `json:"audit,omitempty"`

	// rollout is the state of spec.rollout, written by the leader.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// drift is what the leader keeps of the running pods that the
	// policy's enforced filters refuse on their node, written at most once
	// per --audit-status-interval.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`
}

// RolloutPhase is the state of a rollout.
type RolloutPhase string

// The phases of a rollout.
const (
	RolloutProgressing RolloutPhase = "Progressing"
	RolloutPaused      RolloutPhase = "Paused"
	RolloutCompleted   RolloutPhase = "Completed"
	RolloutAborted     RolloutPhase = "Aborted"
)

// WavePhase is the state of one wave.
type WavePhase string

// The phases of a wave.
const (
	WavePending  WavePhase = "Pending"
	WaveSoaking  WavePhase = "Soaking"
	WavePaused   WavePhase = "Paused"
	WaveEnforced WavePhase = "Enforced"
)

// RolloutPauseReason says why a rollout is Paused.
// +kubebuilder:validation:Enum=GateExceeded;PausedByRequest
type RolloutPauseReason string

// The reasons of a Paused rollout.
const (
	// PauseGateExceeded: the current wave's evidence exceeds its gate
	// (maxWouldReject). The leader counts the wave's pending pods again
	// while it is paused, and promotes it without a person once the
	// evidence is within the gate.
	PauseGateExceeded RolloutPauseReason = "GateExceeded"
	// PauseByRequest: a person paused it (`celsched rollout pause`); it
	// stays paused until a person acts.
	PauseByRequest RolloutPauseReason = "PausedByRequest"
)

// RolloutActionOutcome is what a requested rollout action did.
// +kubebuilder:validation:Enum=Applied;NoOp
type RolloutActionOutcome string

// The outcomes of a rollout action.
const (
	// ActionApplied: the action changed the rollout.
	ActionApplied RolloutActionOutcome = "Applied"
	// ActionNoOp: the rollout's phase left the action nothing to do (a
	// promote of a completed rollout, a pause of a paused one).
	ActionNoOp RolloutActionOutcome = "NoOp"
)

// MaxRolloutMessage bounds status.rollout.message.
const MaxRolloutMessage = 1024

// RolloutStatus is the state of a policy's rollout.
// +kubebuilder:validation:XValidation:rule="!has(self.phase) || self.phase != 'Paused' || has(self.pauseReason)",message="a Paused rollout has a pauseReason"
type RolloutStatus struct {
	// observedGeneration is the spec generation the rollout's state was
	// computed for. A new spec restarts the rollout from the first wave
	// that is not Enforced; the restart and the new observedGeneration
	// are one write, so a restart happens once per generation.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase is Progressing, Paused (see pauseReason), Completed or
	// Aborted. An Aborted rollout audits every wave (no wave is Enforced)
	// until it is resumed, which starts it again from the first wave.
	Phase RolloutPhase `json:"phase,omitempty"`
	// pauseReason says why a Paused rollout is paused: GateExceeded or
	// PausedByRequest. It is empty in every other phase.
	// +optional
	PauseReason RolloutPauseReason `json:"pauseReason,omitempty"`
	// message says, for people, why the rollout is paused or aborted, or
	// why the current wave waits.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// lastAction is the last action requested with the annotation
	// scheduling.celsched.io/rollout-action that the leader took,
	// recorded in the same write that applied it: an annotation that
	// carries this id is removed, never applied again.
	// +optional
	LastAction *RolloutActionRecord `json:"lastAction,omitempty"`
	// waves are the waves' states, in the order of spec.rollout.waves.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Waves []WaveStatus `json:"waves,omitempty"`
}

// RolloutActionRecord is an action requested with the annotation
// scheduling.celsched.io/rollout-action, as the leader took it.
type RolloutActionRecord struct {
	// id is the request's identity, the annotation's value
	// "<action>/<id>" (an id of at most 64 letters, digits, '.', '_' or
	// '-'). A bare "<action>" written by hand gets the id
	// "rv-<resourceVersion>", the policy's resourceVersion when the
	// leader first saw it, written into the annotation before the action
	// is applied.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=80
	ID string `json:"id"`
	// action is pause, resume, promote or abort.
	// +required
	// +kubebuilder:validation:Enum=pause;resume;promote;abort
	Action string `json:"action"`
	// outcome is Applied, or NoOp when the rollout's phase left the
	// action nothing to do.
	// +required
	Outcome RolloutActionOutcome `json:"outcome"`
	// time is when the leader took the action (its clock).
	// +required
	Time metav1.Time `json:"time"`
}

// WaveStatus is the state of one wave. A wave is Pending until the waves
// before it are Enforced, then Soaking, then Enforced or Paused; abort
// returns every wave to Pending.
type WaveStatus struct {
	// +kubebuilder:validation:MaxLength=63
	Name  string    `json:"name"`
	Phase WavePhase `json:"phase"`
	// startTime is when the wave's soak started (the leader's clock).
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// promotedTime is when the wave was promoted to Enforce.
	// +optional
	PromotedTime *metav1.Time `json:"promotedTime,omitempty"`
	// evaluated and wouldReject count, since startTime, the pods of the
	// wave's namespaces that the policy applied to when they were bound,
	// and those it would have held or kept off their node.
	Evaluated   int64 `json:"evaluated"`
	WouldReject int64 `json:"wouldReject"`
	// lastViolations are the newest pods it would have rejected
	// (namespace/name), at most 5.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	LastViolations []string `json:"lastViolations,omitempty"`
	// pendingWouldReject counts the pods of the wave's namespaces that were
	// pending (not bound) when the leader last looked, at the end of the
	// soak and then while the wave is paused, and that the policy, enforced,
	// would hold or leave with no node the pod's own constraints admit;
	// pendingViolations names at most 5 of them. The gate adds them to
	// wouldReject.
	// +optional
	PendingWouldReject int64 `json:"pendingWouldReject,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	PendingViolations []string `json:"pendingViolations,omitempty"`
}

// MaxAuditViolations is how many recent violations status.audit keeps.
const MaxAuditViolations = 5

// AuditStatus counts the placements of pods an Audit policy matched.
type AuditStatus struct {
	// observedGeneration is the metadata.generation the counts are for:
	// they restart when the spec changes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// evaluated counts the pods the policy matched that the scheduler
	// bound.
	// +optional
	Evaluated int64 `json:"evaluated"`

	// wouldReject counts those of them the policy, enforced, would have
	// held (a preEnqueue rule is false) or kept off the node they were
	// bound to (a filter is false there or fails with failurePolicy Fail).
	// +optional
	WouldReject int64 `json:"wouldReject"`

	// lastViolations are the most recent would-be rejections, newest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	LastViolations []AuditViolation `json:"lastViolations,omitempty"`

	// lastUpdateTime is when the scheduler last wrote the summary.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// AuditViolation is one placement an Audit policy would have rejected.
type AuditViolation struct {
	// pod is namespace/name of the pod.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Pod string `json:"pod"`

	// node is the node the pod was bound to.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// rule is the rule that would have rejected it, as
	// preEnqueue/NAME or filters/NAME.
	// +required
	// +kubebuilder:validation:MaxLength=80
	Rule string `json:"rule"`

	// message is the rule's message.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// enforcedBy is, for a policy with enforcementOverrides, the field
	// that made the policy Audit for the pod's namespace:
	// spec.enforcementOverrides[i] or spec.enforcement.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	EnforcedBy string `json:"enforcedBy,omitempty"`

	// time is when the pod was bound.
	// +required
	Time metav1.Time `json:"time"`
}

// SchedulingPolicy holds CEL placement rules that the celsched scheduler
// evaluates at its PreEnqueue, Filter and Score extension points for the pods
// the policy matches.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=schedpol,categories=celsched
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.status.enforcement`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Drifted",type=integer,JSONPath=`.status.drift.count`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Evaluated",type=integer,JSONPath=`.status.audit.evaluated`,priority=1
// +kubebuilder:printcolumn:name="Would-Reject",type=integer,JSONPath=`.status.audit.wouldReject`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SchedulingPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the policy's rules.
	// +required
	Spec SchedulingPolicySpec `json:"spec"`

	// status is the policy's observed state, written by the celsched manager.
	// +optional
	Status SchedulingPolicyStatus `json:"status,omitempty"`
}

// SchedulingPolicyList is a list of SchedulingPolicy objects.
//
// +kubebuilder:object:root=true
type SchedulingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the policies.
	Items []SchedulingPolicy `json:"items"`
}
