package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// podReads is what a policy's filters, scores and variables read of a pod
// and its namespace.
type podReads struct {
	labels, annotations, name, ownerReferences, spec bool
	namespace                                        bool
	// unsignable: a read the signature cannot capture (the whole pod, its
	// status or another metadata field, nodeInfo.pods, which changes with
	// every pod placed).
	unsignable bool
}

func (r *podReads) add(refs *references) {
	if refs.podWhole || refs.nodeInfoPods {
		r.unsignable = true
	}
	if refs.reads&readsNamespace != 0 {
		r.namespace = true
	}
	for f := range refs.podFields {
		switch f {
		case "metadata.labels":
			r.labels = true
		case "metadata.annotations":
			r.annotations = true
		case "metadata.name", "metadata.generateName":
			r.name = true
		case "metadata.ownerReferences":
			r.ownerReferences = true
		case "metadata.namespace", "apiVersion", "kind":
			// The same for every pod the signature compares (the
			// namespace is in it when read), or constant.
		case "spec":
			r.spec = true
		default:
			r.unsignable = true
		}
	}
}

// PodSignature is what decides the CEL plugins' verdicts on every node for
// a pod: the policies that apply to it (and how their matching ended), and
// the parts of the pod and its namespace that their filters, scores and
// variables read. Two pods with equal signatures get the same verdicts and
// scores on the same nodes, so kube-scheduler may reuse one's results for
// the other (opportunistic batching). It is JSON-marshallable.
type PodSignature struct {
	Policies        []string          `json:"policies"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	Name            string            `json:"name,omitempty"`
	OwnerReferences []any             `json:"ownerReferences,omitempty"`
	Spec            *corev1.PodSpec   `json:"spec,omitempty"`
	NamespaceMeta   map[string]any    `json:"namespace,omitempty"`
}

// Signature returns a pod's PodSignature, or false when none is correct:
// a policy that applies reads what changes with every placement
// (nodeInfo.pods) or what a signature cannot capture.
func (s *Snapshot) Signature(ctx context.Context, in *PodInput) (*PodSignature, bool) {
	sig := &PodSignature{}
	var reads podReads
	matches := s.Match(ctx, in, nil)
	for i := range matches {
		m := &matches[i]
		p := m.Decision.Policy
		entry := fmt.Sprintf("%s/%s/%d/%s", p.Name, p.UID, p.Generation, m.Decision.Verdict)
		switch params := p.Params(); {
		case params != nil:
			// The rules that read params depend on its version.
			entry += "/params=" + params.Key()
		case m.Decision.Rule == ParamsRule:
			// Rejected for missing params: the message names where
			// they were looked for.
			entry += "/missing=" + m.Decision.Message
		}
		sig.Policies = append(sig.Policies, entry)
		if m.Decision.Verdict != Pass {
			continue // rejects on every node, whatever the pod
		}
		r := p.signs
		reads.labels = reads.labels || r.labels
		reads.annotations = reads.annotations || r.annotations
		reads.name = reads.name || r.name
		reads.ownerReferences = reads.ownerReferences || r.ownerReferences
		reads.spec = reads.spec || r.spec
		reads.namespace = reads.namespace || r.namespace
		if r.unsignable {
			return nil, false
		}
	}
	pod := in.Pod
	if reads.labels {
		sig.Labels = pod.Labels
	}
	if reads.annotations {
		sig.Annotations = pod.Annotations
	}
	if reads.name {
		sig.Name = pod.GenerateName + "|" + pod.Name
	}
	if reads.ownerReferences {
		for _, o := range pod.OwnerReferences {
			sig.OwnerReferences = append(sig.OwnerReferences, o)
		}
	}
	if reads.spec {
		sig.Spec = &pod.Spec
	}
	if reads.namespace && in.Namespace != nil {
		sig.NamespaceMeta = map[string]any{"name": in.Namespace.Name, "uid": in.Namespace.UID,
			"resourceVersion": in.Namespace.ResourceVersion}
	}
	return sig, true
}
