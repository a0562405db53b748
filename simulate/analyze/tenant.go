package analyze

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/analyze/trust"
	"github.com/celsched/celsched/simulate/dryrun"
)

// This file finds the fences a tenant can move (tenant-writable-input):
// params objects that users of their namespace may write, and rules that
// let a pod's author widen where the pod may go.

// tenantFindings returns the tenant-writable-input findings of the
// policies in force (those that compile), and notes of what was not
// checked: who may write params objects is asked of a live cluster only
// (in.Access), and not when the user may not ask.
func tenantFindings(ctx context.Context, in Input, compiled []*engine.CompiledPolicy) ([]Finding, []string, error) {
	var ok []*engine.CompiledPolicy
	for _, p := range compiled {
		if p.Err() == nil {
			ok = append(ok, p)
		}
	}
	out, err := podFieldFindings(in.Policies, ok)
	if err != nil {
		return nil, nil, err
	}
	hasParams := slices.ContainsFunc(ok, func(p *engine.CompiledPolicy) bool { return p.ParamSpec() != nil })
	if in.Access == nil {
		if !hasParams {
			return out, nil, nil
		}
		return out, []string{"who may write the params objects (tenant-writable-input) is asked of a live cluster only: run analyze against the cluster, not files"}, nil
	}
	var writable []Finding
	if hasParams {
		writable, err = paramsFindings(ctx, in, ok)
	}
	if err == nil {
		namespaces := map[string]*corev1.Namespace{}
		for _, ns := range in.Namespaces {
			namespaces[ns.Name] = ns
		}
		var labels []Finding
		labels, err = namespaceLabelFindings(ctx, in, ok, namespaces)
		writable = append(writable, labels...)
	}
	if apierrors.IsForbidden(err) {
		return out, []string{"who may write the params objects (tenant-writable-input) was not checked: it needs permission to list RoleBindings and ClusterRoleBindings and to create SubjectAccessReviews: " + err.Error()}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return append(out, writable...), nil, nil
}

// podFieldFindings are the rules of the policies that a pod's author can
// widen (trust.Widenings), one finding per rule.
func podFieldFindings(specs []*schedv1alpha1.SchedulingPolicy, compiled []*engine.CompiledPolicy) ([]Finding, error) {
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, p := range compiled {
		// The spec compiled: the last of its name, as in the snapshot.
		var spec *schedv1alpha1.SchedulingPolicy
		for _, s := range specs {
			if s.Name == p.Name {
				spec = s
			}
		}
		if spec == nil {
			continue
		}
		// Checked as the dry run compiled it (stored expressions, params
		// typed by the kinds celsched ships and the built-in ones): a
		// policy that compiled checks; one that would not is left out
		// rather than guessed at.
		checked, errs := env.Check(spec, nil)
		if len(errs) > 0 {
			continue
		}
		for _, w := range trust.Widenings(spec, checked) {
			out = append(out, widening(p.Name, w))
		}
	}
	return out, nil
}

// widening is the finding of a rule that a pod's author can widen.
func widening(policy string, w trust.Widening) Finding {
	f := Finding{Kind: TenantWritableInput, Policies: []string{policy}, Subject: w.Field, PodFields: w.PodFields}
	fields := strings.Join(w.PodFields, ", ")
	if w.Name != "" {
		f.Rules = []string{policy + "/" + w.Name}
	}
	them := "it"
	if len(w.PodFields) > 1 {
		them = "them"
	}
	switch w.Kind {
	case trust.Filter:
		f.Evidence = fmt.Sprintf("a pod whose author sets %s passes filter %s on nodes the filter refuses to a pod without %s: the author widens where the pod may go", fields, w.Name, them)
	case trust.PreEnqueue:
		f.Evidence = fmt.Sprintf("a pod whose author sets %s is released by preEnqueue rule %s, which holds a pod without %s", fields, w.Name, them)
	case trust.Condition:
		f.Evidence = fmt.Sprintf("a pod whose author sets %s makes match condition %s false: the policy, which applies to a pod without %s, no longer fences the pod", fields, w.Name, them)
	case trust.PodSelector:
		f.Evidence = fmt.Sprintf("a pod whose author sets %s is not selected by the podSelector: the policy, which applies to a pod without %s, no longer fences the pod", fields, them)
	}
	f.Suggestion = "decide by what the pod's author cannot set (its namespace, a namespace label or params the tenant cannot write, node labels); " +
		"if the pod field is a request, make setting it narrow where the pod may go, or check its values at admission (a ValidatingAdmissionPolicy on pods)"
	return f
}

// paramsFindings are the params objects that subjects bound in their
// namespace may update or patch (source.Access.Writers), of the policies
// that read them: with paramRef.namespace, for every pod they match;
// without, for the pods of the object's namespace, when the policy's
// namespaceSelector selects it.
func paramsFindings(ctx context.Context, in Input, compiled []*engine.CompiledPolicy) ([]Finding, error) {
	namespaces := map[string]*corev1.Namespace{}
	for _, ns := range in.Namespaces {
		namespaces[ns.Name] = ns
	}
	params := slices.Clone(in.Params)
	slices.SortFunc(params, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(dryrun.ParamsKeyOf(a).String(), dryrun.ParamsKeyOf(b).String())
	})
	var out []Finding
	for _, obj := range params {
		if obj.GetNamespace() == "" {
			continue // cluster-scoped: no RoleBinding grants it
		}
		var readers []string
		whose := "the pods of namespace " + obj.GetNamespace()
		for _, p := range compiled {
			spec := p.ParamSpec()
			if !dryrun.Reads(spec, dryrun.ParamsKeyOf(obj), obj.GetLabels()) {
				continue
			}
			if spec.Namespace == "" && !selectsNamespace(p, namespaces[obj.GetNamespace()]) {
				continue
			}
			if spec.Namespace != "" {
				whose = "every pod these policies match"
			}
			readers = append(readers, p.Name)
		}
		if len(readers) == 0 {
			continue
		}
		writers, err := in.Access.Writers(ctx, obj)
		if err != nil {
			return nil, err
		}
		if len(writers) == 0 {
			continue
		}
		names := make([]string, len(writers))
		described := make([]string, len(writers))
		for i, w := range writers {
			names[i] = w.String()
			described[i] = fmt.Sprintf("%s (%s; %s)", w.String(), strings.Join(w.Verbs, ", "), strings.Join(w.Bindings, ", "))
		}
		out = append(out, Finding{Kind: TenantWritableInput, Policies: readers,
			Subject: (&engine.Params{Kind: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}).String(),
			Writers: names,
			Evidence: fmt.Sprintf("subjects bound in namespace %s may write it, and so move the fence of %s: %s",
				obj.GetNamespace(), whose, strings.Join(described, "; ")),
			Suggestion: writableSuggestion})
	}
	missing, err := missingParamsFindings(ctx, in, compiled, namespaces)
	if err != nil {
		return nil, err
	}
	return append(out, missing...), nil
}

// namespaceLabelFindings are the namespaces whose labels subjects bound in
// them may change (source.Access.LabelWriters), when a policy reads
// namespace labels: a namespaceSelector, or namespaceObject in its
// expressions. A tenant who relabels its namespace moves itself into or
// out of those policies.
func namespaceLabelFindings(ctx context.Context, in Input, compiled []*engine.CompiledPolicy, namespaces map[string]*corev1.Namespace) ([]Finding, error) {
	var readers []string
	for _, p := range compiled {
		if p.NamespaceSelector != nil || p.ReadsNamespaceObject() {
			readers = append(readers, p.Name)
		}
	}
	if len(readers) == 0 {
		return nil, nil
	}
	var out []Finding
	for _, name := range slices.Sorted(maps.Keys(namespaces)) {
		if strings.HasPrefix(name, "kube-") || name == "celsched-system" {
			continue
		}
		writers, err := in.Access.LabelWriters(ctx, name)
		if err != nil {
			return nil, err
		}
		if len(writers) == 0 {
			continue
		}
		names, described := make([]string, len(writers)), make([]string, len(writers))
		for i, w := range writers {
			names[i] = w.String()
			described[i] = fmt.Sprintf("%s (%s; %s)", w.String(), strings.Join(w.Verbs, ", "), strings.Join(w.Bindings, ", "))
		}
		out = append(out, Finding{Kind: TenantWritableInput, Policies: readers, Subject: "Namespace " + name + " (labels)", Writers: names,
			Evidence: fmt.Sprintf("these policies read namespace labels (a namespaceSelector, or namespaceObject); subjects bound in namespace %s may change its labels, and so which of them apply to its pods and what they grant: %s",
				name, strings.Join(described, "; ")),
			Suggestion: "take update and patch of namespaces (and bind, escalate, impersonate) out of the namespace's roles (the built-in edit and admin do not grant them; a tool that delegates namespaces may)"})
	}
	return out, nil
}

// writableSuggestion is the suggestion of a params object tenants may
// write.
const writableSuggestion = "keep the params in a kind these subjects cannot write (celsched's TenantPlacement, written by celsched-tenantplacement-editor), " +
	"or take update, patch, create and delete of it (and bind, escalate, impersonate) out of their roles"

// missingParamsFindings are the params objects a policy would read in a
// namespace it selects (paramRef without a namespace) where none exists,
// that subjects bound there may create (source.Access.Creators): the
// first who does sets the namespace's fence.
func missingParamsFindings(ctx context.Context, in Input, compiled []*engine.CompiledPolicy, namespaces map[string]*corev1.Namespace) ([]Finding, error) {
	var out []Finding
	names := slices.Sorted(maps.Keys(namespaces))
	for _, p := range compiled {
		spec := p.ParamSpec()
		if spec == nil || spec.Namespace != "" {
			continue
		}
		for _, name := range names {
			ns := namespaces[name]
			if !selectsNamespace(p, ns) || strings.HasPrefix(name, "kube-") || name == "celsched-system" {
				continue
			}
			if slices.ContainsFunc(in.Params, func(obj *unstructured.Unstructured) bool {
				return obj.GetNamespace() == name && dryrun.Reads(spec, dryrun.ParamsKeyOf(obj), obj.GetLabels())
			}) {
				continue
			}
			creators, err := in.Access.Creators(ctx, spec.Kind, name, spec.Name)
			if err != nil {
				return nil, err
			}
			if len(creators) == 0 {
				continue
			}
			what := spec.Kind.Kind + " " + name + "/" + spec.Name
			if spec.Name == "" {
				what = fmt.Sprintf("a %s of namespace %s with labels %s", spec.Kind.Kind, name, spec.Selector)
			}
			names, described := make([]string, len(creators)), make([]string, len(creators))
			for i, w := range creators {
				names[i] = w.String()
				described[i] = fmt.Sprintf("%s (%s; %s)", w.String(), strings.Join(w.Verbs, ", "), strings.Join(w.Bindings, ", "))
			}
			out = append(out, Finding{Kind: TenantWritableInput, Policies: []string{p.Name}, Subject: what + " (missing)", Writers: names,
				Evidence: fmt.Sprintf("policy %s reads %s, which does not exist; subjects bound in namespace %s may create it with the values they choose, and so set the fence of its pods: %s",
					p.Name, what, name, strings.Join(described, "; ")),
				Suggestion: "create the params object before the namespace's users can (a platform team's GitOps), in a kind they cannot create (celsched's TenantPlacement); " + writableSuggestion})
		}
	}
	return out, nil
}

// selectsNamespace says whether the policy's namespaceSelector selects
// the namespace (an unknown namespace: only without a selector).
func selectsNamespace(p *engine.CompiledPolicy, ns *corev1.Namespace) bool {
	if p.NamespaceSelector == nil {
		return true
	}
	return ns != nil && p.NamespaceSelector.Matches(labels.Set(ns.Labels))
}
