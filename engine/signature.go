package engine

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// podReads is what a policy's expressions read of a pod and its namespace:
// a set of the pod*Read bits, found in the checked expressions
// (policyCompiler.references) and completed conservatively: a read the
// analysis does not recognise is podReadsUnkeyable, never left out.
type podReads uint16

const (
	podLabelsRead podReads = 1 << iota
	podAnnotationsRead
	podNameRead
	podOwnerReferencesRead
	podSpecRead
	// podTypeMetaRead: kind and apiVersion, which are empty on the typed
	// objects of an informer and set on others: not constants.
	podTypeMetaRead
	// podNamespaceRead: the namespace object (namespaceObject), whose
	// version goes into a memo key. The pod's namespace name is in every
	// key and signature, read or not.
	podNamespaceRead
	// podGroupRead: the pod's group (podGroup), whose value (PodGroup.Key:
	// its labels, minCount and placed members) goes into a memo key.
	podGroupRead
	// podNodeInfoPodsRead: nodeInfo.pods, which changes with every pod
	// placed: no signature captures it (a memo keys it by the NodeInfo's
	// generation).
	podNodeInfoPodsRead
	// podReadsUnkeyable: a read that neither the signature nor a memo key
	// can capture (the whole pod, its status or another metadata field).
	podReadsUnkeyable
	// podGroupMembersRead: podGroup.assignedNodes, which changes whenever
	// a member of the group is placed: a memo key holds it (podGroupRead
	// is set too), a batching signature cannot.
	podGroupMembersRead

	// podKeyReads are the reads a memo key holds.
	podKeyReads = podNodeInfoPodsRead - 1
	// podContentReads are the pod's own fields a signature holds: every
	// keyable one but its name (each pod has its own), the namespace
	// object (the same for every pod of the namespace, at any time) and
	// the group (the same for every pod that names it in its spec, which
	// a signature holds, but for its members).
	podContentReads = podKeyReads &^ (podNameRead | podNamespaceRead | podGroupRead)
	// podUnsignable are the reads that keep a pod from being signed.
	podUnsignable = podNameRead | podNodeInfoPodsRead | podReadsUnkeyable | podGroupMembersRead
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
	if refs.reads&readsPodGroup != 0 {
		*r |= podGroupRead
	}
	if refs.podGroupMembers {
		*r |= podGroupMembersRead
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
		case "metadata.namespace":
			// In every key and signature.
		case "apiVersion", "kind":
			*r |= podTypeMetaRead
		case "spec":
			*r |= podSpecRead
		default:
			*r |= podReadsUnkeyable
		}
	}
}

// podKeySpec is what a memo key holds of a pod (PodInput.key): the
// fields reads names and, when every expression that reads the pod's
// labels reads them through constant keys (pod.metadata.labels['k'] and
// the like: references.labelKeys), those labels alone. The replicas of a
// StatefulSet or a Job, whose labels name each pod, then share the results
// of rules that read another label. Immutable once compiled.
type podKeySpec struct {
	reads podReads
	// labels are the label keys read, sorted, when labelsWhole is false.
	labels      []string
	labelsWhole bool
}

// add records what an expression reads.
func (s *podKeySpec) add(refs *references) {
	s.reads.add(refs)
	if !refs.podFields["metadata.labels"] {
		return
	}
	if refs.labelsWhole || refs.podWhole {
		s.labelsWhole, s.labels = true, nil
		return
	}
	if s.labelsWhole {
		return
	}
	for k := range refs.labelKeys {
		if i, found := slices.BinarySearch(s.labels, k); !found {
			s.labels = slices.Insert(s.labels, i, k)
		}
	}
}

// merge records what another spec holds (a PolicyList's key holds what
// each of its policies' does).
func (s *podKeySpec) merge(o *podKeySpec) {
	s.reads |= o.reads
	if s.labelsWhole || o.labelsWhole {
		s.labelsWhole, s.labels = true, nil
		return
	}
	for _, k := range o.labels {
		if i, found := slices.BinarySearch(s.labels, k); !found {
			s.labels = slices.Insert(s.labels, i, k)
		}
	}
}

// someLabels says whether the key holds some of the pod's labels rather
// than all of them.
func (s *podKeySpec) someLabels() bool {
	return s.reads&podLabelsRead != 0 && !s.labelsWhole
}

// PodSignature is what the CEL plugins' verdicts on a pod depend on, as
// far as the pod itself goes: its namespace and the values of the fields
// named by a podReads. As a memo key (PodInput.key) it holds what a
// policy's expressions read, and the namespace object's version when they
// read it; as a batching signature (Snapshot.Signature) it holds every
// field any policy may read but the name, so that it stays true whatever
// policies, params objects and namespace labels are in force when the pod
// is scheduled. It is JSON-marshallable.
type PodSignature struct {
	Namespace       string                  `json:"namespace"`
	NamespaceObject *NamespaceVersion       `json:"namespaceObject,omitempty"`
	PodGroup        *PodGroup               `json:"podGroup,omitempty"`
	Kind            string                  `json:"kind,omitempty"`
	APIVersion      string                  `json:"apiVersion,omitempty"`
	Labels          map[string]string       `json:"labels,omitempty"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	Name            string                  `json:"name,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Spec            *corev1.PodSpec         `json:"spec,omitempty"`
}

// NamespaceVersion identifies the version of the namespace object an
// evaluation read; Unknown when the namespace was not known (expressions
// reading it then fail with an error naming the namespace).
type NamespaceVersion struct {
	UID             ktypes.UID `json:"uid,omitempty"`
	ResourceVersion string     `json:"resourceVersion,omitempty"`
	Unknown         bool       `json:"unknown,omitempty"`
}

// fill copies the pod's namespace and what r names of the pod, its
// namespace object and its group (nil: NoPodGroup) into sig: all of the
// pod's labels when r reads them.
func (r podReads) fill(sig *PodSignature, pod *corev1.Pod, ns *corev1.Namespace, group *PodGroup) {
	sig.Namespace = pod.Namespace
	if r&podTypeMetaRead != 0 {
		sig.Kind, sig.APIVersion = pod.Kind, pod.APIVersion
	}
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
		sig.OwnerReferences = pod.OwnerReferences
	}
	if r&podSpecRead != 0 {
		sig.Spec = &pod.Spec
	}
	if r&podNamespaceRead != 0 {
		if ns == nil {
			sig.NamespaceObject = &NamespaceVersion{Unknown: true}
		} else {
			sig.NamespaceObject = &NamespaceVersion{UID: ns.UID, ResourceVersion: ns.ResourceVersion}
		}
	}
	if r&podGroupRead != 0 {
		if group == nil {
			group = NoPodGroup
		}
		sig.PodGroup = group
	}
}

// Signature returns a pod's batching signature (kube-scheduler's
// opportunistic batching reuses one pod's ranking of the nodes for the
// next pod with an equal signature), or false when the pod cannot be
// signed.
//
// kube-scheduler signs a pod when it is queued and keeps the signature
// across retries, so a signature must stay true while policies, params
// objects and namespaces change. It therefore holds the pod's content
// (PodSignature: the namespace and every field a keyable expression may
// read) rather than what today's policies read or decide: two pods with
// equal content in one namespace get the same verdicts and scores from
// any set of policies that does not read the pod's name, its status or
// nodeInfo.pods. The pod is not signed when a policy whose schedulerNames
// and podSelector select it (whatever its namespace selector and match
// conditions say, which can change while the pod waits) reads those. A
// policy created after the pod was queued is not seen here: if it reads
// the name, two pods may share a ranking for the 500 ms a batch lives;
// every node is still filtered with the policies in force.
func (s *Snapshot) Signature(pod *corev1.Pod) (*PodSignature, bool) {
	for _, p := range s.policies {
		if p.reads&podUnsignable == 0 {
			continue
		}
		if p.SchedulerNames.Len() > 0 && !p.SchedulerNames.Has(pod.Spec.SchedulerName) {
			continue
		}
		if p.miss(pod, nil) == missPodSelector {
			continue
		}
		return nil, false
	}
	sig := &PodSignature{}
	podContentReads.fill(sig, pod, nil, nil)
	return sig, true
}
