package engine

// Victim rules: spec.preemption.victims, CEL expressions over a preemptor
// (pod, namespaceObject), one running pod that preemption would evict
// (victim, victimNamespaceObject) and its node, compiled against their own
// environment and decided with the policy's failurePolicy and enforcement
// like every other rule. kube-scheduler's DefaultPreemption asks them
// through its IsEligiblePod hook (celplugins/preemption).

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

// Names of the CEL variables of victim rules, beside pod, namespaceObject
// and node.
const (
	VictimVar          = "victim"
	VictimNamespaceVar = "victimNamespaceObject"
)

// PointPreemption is the victim rules, per preemptor and candidate victim.
const PointPreemption Point = PointPlacementScore + 1

// SystemCriticalPriority is the priority of system-cluster-critical: a
// preemptor at or above it is never refused a victim (kube-scheduler asks
// that preemption customizations always let system services preempt).
const SystemCriticalPriority int32 = 2000000000

// newPreemptionEnv declares the variables of victim rules over the base
// environment: the pod, node and namespace types of the policies' own
// environment (pod, victim, node, namespaceObject, victimNamespaceObject),
// and nothing else (no params, variables, nodeInfo or podGroup).
func newPreemptionEnv(base *environment.EnvSet, pod, node, namespace *apiservercel.DeclType) (*placementEnv, error) {
	envSet, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(PodVar, pod.CelType()),
			cel.Variable(VictimVar, pod.CelType()),
			cel.Variable(NodeVar, node.CelType()),
			cel.Variable(NamespaceVar, namespace.CelType()),
			cel.Variable(VictimNamespaceVar, namespace.CelType()),
			ext.Bindings(),
		},
		DeclTypes: []*apiservercel.DeclType{pod, node, namespace},
	})
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment of victim rules: %w", err)
	}
	roots := map[string]*apiservercel.DeclType{PodVar: pod, VictimVar: pod, NodeVar: node, NamespaceVar: namespace, VictimNamespaceVar: namespace}
	return &placementEnv{
		envSet:  envSet,
		worst:   celcost.NewEstimator(roots, celcost.Vars{}, false),
		typical: celcost.NewEstimator(roots, celcost.Vars{}, true),
	}, nil
}

// HasVictimRules says whether the policy has victim rules.
func (p *Program) HasVictimRules() bool { return len(p.victimRules) > 0 }

// HasImportance says whether the policy has spec.preemption.importance.
func (p *Program) HasImportance() bool { return p.importance != nil }

// compilePreemption compiles spec.preemption: the victim rules in their
// own environment, importance in the preEnqueue rules' (pod and
// namespaceObject, variables and params that do not read a node).
func (pc *policyCompiler) compilePreemption(spec *schedv1alpha1.SchedulingPolicySpec, env *placementEnv) {
	if spec.Preemption == nil {
		return
	}
	if text := spec.Preemption.Importance; text != "" {
		pc.out.importance = pc.expression(field.NewPath("spec", "preemption", "importance"), text, outputNumber, podScope, "preemption.importance")
	}
	if len(spec.Preemption.Victims) == 0 {
		return
	}
	path := field.NewPath("spec", "preemption", "victims")
	if env == nil {
		pc.out.Errors = append(pc.out.Errors, field.InternalError(path, fmt.Errorf("no environment for victim rules")))
		return
	}
	for i, r := range spec.Preemption.Victims {
		rulePath := path.Index(i).Child("expression")
		if prg := pc.trackedProgram(env, rulePath, r.Expression, outputBool, "pods and nodes of typical size", "large pods", true); prg != nil {
			pc.out.victimRules = append(pc.out.victimRules, &placementRule{name: r.Name, path: rulePath, prg: prg, message: r.Message})
		}
	}
}

// Importance evaluates spec.preemption.importance on a pod the policy
// applies to (Match), as a candidate victim: how much it is worth keeping.
// It returns an error when the policy has none, does not compile, or the
// expression fails or does not give a finite number; the caller leaves
// such a pod at 0 (an order is a preference, never a protection).
func (p *CompiledPolicy) Importance(ctx context.Context, in *PodInput) (float64, error) {
	if err := p.Err(); err != nil {
		return 0, err
	}
	if p.importance == nil {
		return 0, fmt.Errorf("SchedulingPolicy %s has no spec.preemption.importance", p.Name)
	}
	v, err := (&lazy{ctx: ctx, policy: p, pod: in}).eval(nil, p.importance)
	if err != nil {
		return 0, err
	}
	return number(v)
}

// VictimInput is a preemptor and one candidate victim on its node, as
// victim rules read them: the activation of their evaluation. Build it
// once per victim and node (Converter.Victim) and decide every matching
// policy's rules on it, from one goroutine. The victim is converted when
// it is built; its namespace and node only when a rule first reads them
// (a rule over namespaces alone, the common tenant rule, costs no node
// or namespace lookup per candidate victim).
type VictimInput struct {
	// Victim is the candidate victim.
	Victim *corev1.Pod
	c      *Converter
	in     *PodInput
	victim ref.Val
	ns     *corev1.Namespace
	node   *corev1.Node
	// nsVal and nodeVal are the namespace's and node's values, nil until
	// read.
	nsVal, nodeVal ref.Val
}

var _ interpreter.Activation = (*VictimInput)(nil)

// Victim converts a candidate victim of the preemptor (in: its input,
// whose namespace is the preemptor's), with the victim's namespace (nil
// when unknown: rules reading it fail) and the victim's node, which are
// converted when a rule reads them (a conversion that fails is that
// rule's error).
func (c *Converter) Victim(in *PodInput, victim *corev1.Pod, victimNS *corev1.Namespace, node *corev1.Node) (*VictimInput, error) {
	victimVal, err := c.cached(c.victims, victim.Namespace+"/"+victim.Name, victim.UID, victim.ResourceVersion, victim, c.env.podValues)
	if err != nil {
		return nil, fmt.Errorf("converting pod %s/%s: %w", victim.Namespace, victim.Name, err)
	}
	return &VictimInput{Victim: victim, c: c, in: in, victim: victimVal, ns: victimNS, node: node}, nil
}

// ResolveName implements interpreter.Activation.
func (v *VictimInput) ResolveName(name string) (any, bool) {
	switch name {
	case PodVar:
		return v.in.podValue(podTable().every), true
	case NamespaceVar:
		if v.in.namespace == nil {
			return types.NewErr("the pod's namespace %q is not known", v.in.Pod.Namespace), true
		}
		return v.in.namespace, true
	case VictimVar:
		return v.victim, true
	case VictimNamespaceVar:
		if v.nsVal == nil {
			v.nsVal = v.namespaceValue()
		}
		return v.nsVal, true
	case NodeVar:
		if v.nodeVal == nil {
			val, err := v.c.NodeValue(v.node)
			if err != nil {
				val = types.WrapErr(fmt.Errorf("converting node %s: %w", v.node.Name, err))
			}
			v.nodeVal = val
		}
		return v.nodeVal, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (v *VictimInput) Parent() interpreter.Activation { return nil }

func (v *VictimInput) namespaceValue() ref.Val {
	if v.ns == nil {
		return types.NewErr("the victim's namespace %q is not known", v.Victim.Namespace)
	}
	val, err := v.c.cached(v.c.namespaces, v.ns.Name, v.ns.UID, v.ns.ResourceVersion, v.ns, v.c.env.namespaceValues)
	if err != nil {
		return types.WrapErr(fmt.Errorf("converting namespace %s: %w", v.ns.Name, err))
	}
	return val
}

// Victim decides the victim rules on one candidate victim: Reject (the
// victim is protected) at the first false rule, Error at the first error
// under Fail (which protects it too, when enforced). Under Ignore a failing
// rule is skipped and the rules after it still apply. The policy must
// apply to the preemptor (Match); the caller acts on the decision (Acts:
// the victim is not eligible) or reports it (WouldAct).
func (p *CompiledPolicy) Victim(ctx context.Context, in *VictimInput) Decision {
	return p.decideBoolRules(ctx, PointPreemption, p.victimRules, in)
}

// Protection is a victim rule's decision as the preemptor's owner reads
// it, on one line and at most MaxMessageLength bytes: which victim, which
// policy and rule, and the rule's message (or the error).
func Protection(victim *corev1.Pod, d *Decision) string {
	switch d.Verdict {
	case Reject:
		return Truncate(fmt.Sprintf("pod %s/%s protected by SchedulingPolicy %s, rule preemption.victims/%s: %s", victim.Namespace, victim.Name, d.Policy.Name, d.Rule, oneLine(d.Message)), MaxMessageLength)
	case Error:
		return Truncate(fmt.Sprintf("pod %s/%s protected: %s", victim.Namespace, victim.Name, podErrorMessage(d.Err)), MaxMessageLength)
	}
	return ""
}
