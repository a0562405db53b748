package verdict

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Template is what a bound pod's controller creates its replacement
// from: the controller (kind and name, for messages) and its pod
// template.
type Template struct {
	Kind, Name string
	// Generation is the controller's metadata.generation when read: a
	// change of the template changes it.
	Generation int64
	Spec       *corev1.PodTemplateSpec
}

// OwnerTemplate reads the pod template of the pod's controller
// (ReplicaSet, StatefulSet, Job, ReplicationController) with reader: the
// template its replacement is created from. It returns nil, nil for a pod
// whose controller is none of those (Replaced is false), and an error
// when the controller cannot be read (gone: its pods are not replaced).
func OwnerTemplate(ctx context.Context, reader client.Reader, pod *corev1.Pod) (*Template, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || !Replaced(pod) {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}
	var obj client.Object
	var spec func() *corev1.PodTemplateSpec
	switch owner.Kind {
	case "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		obj, spec = rs, func() *corev1.PodTemplateSpec { return &rs.Spec.Template }
	case "StatefulSet":
		ss := &appsv1.StatefulSet{}
		obj, spec = ss, func() *corev1.PodTemplateSpec { return &ss.Spec.Template }
	case "Job":
		job := &batchv1.Job{}
		obj, spec = job, func() *corev1.PodTemplateSpec { return &job.Spec.Template }
	case "ReplicationController":
		rc := &corev1.ReplicationController{}
		obj, spec = rc, func() *corev1.PodTemplateSpec { return rc.Spec.Template }
	default:
		return nil, nil
	}
	if err := reader.Get(ctx, key, obj); err != nil {
		return nil, fmt.Errorf("reading the %s %s that owns pod %s/%s: %w", owner.Kind, key, pod.Namespace, pod.Name, err)
	}
	if obj.GetUID() != owner.UID {
		return nil, fmt.Errorf("reading the %s %s that owns pod %s/%s: %w", owner.Kind, key, pod.Namespace, pod.Name,
			apierrors.NewNotFound(corev1.Resource(owner.Kind), owner.Name))
	}
	t := &Template{Kind: owner.Kind, Name: owner.Name, Generation: obj.GetGeneration(), Spec: spec()}
	if t.Spec == nil {
		return nil, fmt.Errorf("the %s %s that owns pod %s/%s has no pod template", owner.Kind, key, pod.Namespace, pod.Name)
	}
	return t, nil
}

// ReplacementPod is the pod a bound pod's controller would create in its
// place, as far as placement goes: the bound pod (its labels, volumes and
// requests as its controller made them) with what decides where a pod
// goes taken from the controller's template: nodeName, nodeSelector,
// affinity, tolerations and schedulerName. Without a template (nil) it is
// the pod itself, unbound. It has no status.
func ReplacementPod(bound *corev1.Pod, t *Template) *corev1.Pod {
	again := bound.DeepCopy()
	again.Spec.NodeName, again.Status = "", corev1.PodStatus{}
	if t == nil || t.Spec == nil {
		return again
	}
	tmpl := t.Spec.Spec.DeepCopy()
	again.Spec.NodeName = tmpl.NodeName
	again.Spec.NodeSelector = tmpl.NodeSelector
	again.Spec.Affinity = tmpl.Affinity
	again.Spec.Tolerations = tmpl.Tolerations
	again.Spec.SchedulerName = tmpl.SchedulerName
	if again.Spec.SchedulerName == "" {
		again.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	return again
}

// ReplacementVerdict is whether evicting a drifted pod moves it: the node
// its replacement would get, or why evicting it would not help.
type ReplacementVerdict struct {
	// Node is a node the replacement would get (the first feasible one, or
	// the node its template pins it to); empty when Blocked is set.
	Node string
	// Blocked says why the pod is not evicted: its replacement would be
	// pinned to a node the policy refuses, would be placed by a scheduler
	// that does not enforce the policy, or would find no feasible node.
	Blocked schedv1alpha1.RemediationBlockReason
	// Message says so in words, naming the node or scheduler.
	Message string
}

// Replace judges the replacement of a bound pod that the policy refuses
// on its node, from the template its controller creates it from (nil:
// the pod itself), against the cluster with the pod evicted. A
// replacement pinned by nodeName to a node the policy refuses, or
// scheduled by a scheduler that is not one of profiles (the profiles
// that enforce the policy), is blocked: evicting the pod would only bring
// it back. Otherwise the scheduler's framework must find it a node.
func (e *Evaluator) Replace(ctx context.Context, bound *corev1.Pod, t *Template, policy string, profiles []string) (ReplacementVerdict, error) {
	again := ReplacementPod(bound, t)
	if node := again.Spec.NodeName; node != "" {
		refusals, err := e.Refusals(ctx, again)
		if err != nil {
			return ReplacementVerdict{Blocked: schedv1alpha1.BlockedReplacementPinned,
				Message: fmt.Sprintf("its replacement would be created with nodeName %s (%v)", node, err)}, nil
		}
		if slices.ContainsFunc(refusals, func(r Refusal) bool { return r.Policy == policy }) {
			return ReplacementVerdict{Blocked: schedv1alpha1.BlockedReplacementPinned,
				Message: fmt.Sprintf("its replacement would be created with nodeName %s, which the policy refuses: no scheduler places it", node)}, nil
		}
		return ReplacementVerdict{Node: node}, nil
	}
	if !slices.Contains(profiles, again.Spec.SchedulerName) {
		return ReplacementVerdict{Blocked: schedv1alpha1.BlockedOtherScheduler,
			Message: fmt.Sprintf("its replacement would be placed by scheduler %q, which does not enforce the policy", again.Spec.SchedulerName)}, nil
	}
	r, err := e.run(ctx, again, bound, anyNode)
	if err != nil {
		return ReplacementVerdict{}, err
	}
	if len(r.Feasible) == 0 {
		return ReplacementVerdict{Blocked: schedv1alpha1.BlockedNoFeasibleNode,
			Message: "the scheduler's framework finds its replacement no node under the policies in force"}, nil
	}
	return ReplacementVerdict{Node: r.Feasible[0]}, nil
}

// EnforcingProfiles are the profiles of the Evaluator's configuration
// that evaluate the policy: its schedulerNames, or every profile.
func (e *Evaluator) EnforcingProfiles(p *schedv1alpha1.SchedulingPolicy) []string {
	return EnforcingProfiles(e.cfg, p)
}

// EnforcingProfiles are the profiles of cfg that evaluate the policy:
// those its schedulerNames list, or every profile when it lists none.
func EnforcingProfiles(cfg *schedulerconfig.KubeSchedulerConfiguration, p *schedv1alpha1.SchedulingPolicy) []string {
	var out []string
	for _, prof := range cfg.Profiles {
		if len(p.Spec.SchedulerNames) == 0 || slices.Contains(p.Spec.SchedulerNames, prof.SchedulerName) {
			out = append(out, prof.SchedulerName)
		}
	}
	return out
}

// AsProfile is the pod as the scheduler's profiles judge it: the pod
// itself when its schedulerName is one of profiles; else (another
// scheduler placed it, or it was created with spec.nodeName) a copy with
// the first profile's name, as that profile would judge it. Drift,
// remediation and analyze judge running pods with it.
func AsProfile(pod *corev1.Pod, profiles []string) (judged *corev1.Pod, foreign bool) {
	name := pod.Spec.SchedulerName
	if name == "" && len(profiles) > 0 {
		return pod, false // not defaulted (files): the first profile's
	}
	if len(profiles) == 0 || slices.Contains(profiles, name) {
		return pod, false
	}
	judged = pod.DeepCopy()
	judged.Spec.SchedulerName = profiles[0]
	return judged, true
}
