package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// podReads is what a policy's filters, scores and variables read of a pod
// and its namespace: a set of the pod*Read bits.
type podReads uint8

const (
	podLabelsRead podReads = 1 << iota
	podAnnotationsRead
	podNameRead
	podOwnerReferencesRead
	podSpecRead
	podNamespaceRead
	// podNodeInfoPodsRead: nodeInfo.pods, which changes with every pod
	// placed: no signature captures it (a memo keys it by the NodeInfo's
	// generation).
	podNodeInfoPodsRead
	// podReadsUnkeyable: a read that neither the signature nor a memo key
	// can capture (the whole pod, its status or another metadata field).
	podReadsUnkeyable

	// podKeyReads are the reads a memo key holds.
	podKeyReads = podNodeInfoPodsRead - 1
)

func (r *podReads) add(refs *references) {
	if refs.podWhole {
		*r |= podReadsUnkeyable
	}
	if refs.nodeInfoPods {
		*r |= podNodeInfoPodsRead
	}
	if refs.reads&readsNamespace != 0 {
		*r |= podNamespaceRead
	}
	for f := range refs.podFields {
		switch f {
		case "metadata.labels":
			*r |= podLabelsRead
		case "metadata.annotations":
			*r |= podAnnotationsRead
		case "metadata.name", "metadata.generateName":
			*r |= podNameRead
		case "metadata.ownerReferences":
			*r |= podOwnerReferencesRead
		case "metadata.namespace", "apiVersion", "kind":
			// The same for every pod the signature compares (the
			// namespace is in it when read), or constant.
		case "spec":
			*r |= podSpecRead
		default:
			*r |= podReadsUnkeyable
		}
	}
}

// fill copies what r names of a pod and its namespace into sig.
func (r podReads) fill(sig *PodSignature, in *PodInput) {
	pod := in.Pod
	if r&podLabelsRead != 0 {
		sig.Labels = pod.Labels
	}
	if r&podAnnotationsRead != 0 {
		sig.Annotations = pod.Annotations
	}
	if r&podNameRead != 0 {
		sig.Name = pod.GenerateName + "|" + pod.Name
	}
	if r&podOwnerReferencesRead != 0 {
		for _, o := range pod.OwnerReferences {
			sig.OwnerReferences = append(sig.OwnerReferences, o)
		}
	}
	if r&podSpecRead != 0 {
		sig.Spec = &pod.Spec
	}
	if r&podNamespaceRead != 0 && in.Namespace != nil {
		sig.NamespaceMeta = map[string]any{"name": in.Namespace.Name, "uid": in.Namespace.UID,
			"resourceVersion": in.Namespace.ResourceVersion}
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
		if p.signs&(podReadsUnkeyable|podNodeInfoPodsRead) != 0 {
			return nil, false
		}
		reads |= p.signs
	}
	reads.fill(sig, in)
	return sig, true
}
