// Package source reads, in one way, what celsched's reports evaluate: a
// cluster (its nodes, namespaces, pods, SchedulingPolicies, the params
// objects of parameterized policies and the objects built-in plugins
// read), the scheduler configuration and draft changes, from the
// kubeconfig's cluster or from files. impact, analyze, eval and explain
// are reports over its Input; ProfilePods is their one view of the pods
// the scheduler's profiles place. Access asks the cluster read live who
// may write its objects (analyze's tenant-writable params).
package source

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

// Input is what a report evaluates.
type Input struct {
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	// Pods are the cluster's pods, pending and bound, of every scheduler:
	// live, those that have not terminated (files may hold terminated
	// ones, which ProfilePods leaves out). Read live for a Source.Pod,
	// they are the pods on nodes only: what the scheduler's cache holds.
	Pods []*corev1.Pod
	// Pod is the pod the report is about (Source.Pod); it is not among
	// Pods.
	Pod *corev1.Pod
	// GroupPods are the other pending members of Pod's pod group
	// (Source.GroupPods); they are not among Pods.
	GroupPods []*corev1.Pod
	// PodGroups are the cluster's PodGroups (scheduling.k8s.io/v1beta1):
	// the groups whose pending members kube-scheduler places all or
	// nothing. Read live only where the API server serves them.
	PodGroups []*schedulingv1beta1.PodGroup
	// Policies are the SchedulingPolicies in force.
	Policies []*schedv1alpha1.SchedulingPolicy
	// Params are the params objects in force of parameterized policies
	// (ConfigMaps, custom resources).
	Params []*unstructured.Unstructured
	// Drafts and ParamsDrafts are the SchedulingPolicies and params
	// objects of the draft files (Source.Drafts): not in force.
	Drafts       []*schedv1alpha1.SchedulingPolicy
	ParamsDrafts []*unstructured.Unstructured
	// Objects are other objects built-in plugins read: PersistentVolumeClaims,
	// PersistentVolumes, StorageClasses, CSINodes.
	Objects []runtime.Object
	// Config is the scheduler configuration, defaulted.
	Config *schedulerconfig.KubeSchedulerConfiguration
	// Notes are what reading noticed, for the report to say first.
	Notes []string
	// Access asks the cluster who may write its objects: set for a
	// cluster read live, nil for files.
	Access *Access
	// Owners reads the controllers that own pods (their pod templates,
	// which remediation judges a replacement from): set for a cluster
	// read live; nil for files, where a replacement is the pod itself.
	Owners client.Reader
}

// Source is where a command reads its Input from; its fields are the
// command's flags.
type Source struct {
	// Stdin is read for a file named "-".
	Stdin io.Reader
	// Kube are the kubectl connection flags: the cluster is the
	// kubeconfig's, unless Kube is nil or Files names a file.
	Kube *genericclioptions.ConfigFlags
	// Files are the cluster in files.
	Files Files
	// Config is a KubeSchedulerConfiguration file; empty: the manager's
	// built-in one.
	Config string
	// Drafts are files and directories of draft SchedulingPolicies and
	// params objects (-f): Input.Drafts and Input.ParamsDrafts.
	Drafts []string
	// Pod is the pod the report is about: a file offline, a name in the
	// kubeconfig's namespace live.
	Pod string
	// GroupPods are files of the other pending members of Pod's pod
	// group (offline): Input.GroupPods.
	GroupPods []string
}

// Files are a cluster in files: a dump (`kubectl get -o yaml` of every
// kind), or files of each kind.
type Files struct {
	Nodes, Pods, Namespaces []string
	// PodGroups are files of PodGroups (scheduling.k8s.io/v1beta1).
	PodGroups []string
	// Policies are the SchedulingPolicies in force (instead of those of
	// Dump); their directories may hold the CustomResourceDefinitions of
	// params kinds.
	Policies []string
	// Params are files of params objects in force (and their
	// CustomResourceDefinitions).
	Params []string
	// Dump are files of objects of every kind read, or Lists of them.
	Dump []string
	// Scenario says the files are a scenario written by hand (eval), not a
	// cluster: the params objects are taken as they are (a custom kind
	// needs no CustomResourceDefinition; kinds no policy reads are kept),
	// and no node is required.
	Scenario bool
}

func (f *Files) any() bool {
	return len(f.Nodes)+len(f.Pods)+len(f.Namespaces)+len(f.PodGroups)+len(f.Policies)+len(f.Params)+len(f.Dump) > 0
}

// Read reads the input: the configuration, the drafts, and the cluster
// from the files, or from the kubeconfig's cluster when there are none.
// Unreadable input (a missing or malformed file, a pod that is not there)
// is an InputError.
func (s *Source) Read(ctx context.Context) (*Input, error) {
	in := &Input{}
	var err error
	if in.Config, err = defaultconfig.Load(s.Config); err != nil {
		return nil, inputError(err)
	}
	drafts, err := s.readDrafts(in)
	if err != nil {
		return nil, err
	}
	if s.Kube == nil || s.Files.any() {
		err = s.readFiles(in, drafts)
	} else {
		err = s.readLive(ctx, in, drafts)
	}
	if err != nil {
		return nil, err
	}
	return in, nil
}

// InputError is input that cannot be read: a missing or malformed file,
// an unknown field, a pod that is not there.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

func (e *InputError) Unwrap() error { return e.Err }

func inputError(err error) error { return &InputError{Err: err} }

// ProfilePods are an input's pods as the configuration's profiles see
// them (celplugins.ProfilePod).
type ProfilePods struct {
	// Placed are the pods the profiles place, pending and bound to one of
	// the input's nodes, in the input's order.
	Placed []*corev1.Pod
	// OnNodes are the pods that take room on the input's nodes
	// (celplugins.OnNode): of every scheduler, being deleted included.
	OnNodes []*corev1.Pod
	// Pending and Bound count Placed.
	Pending, Bound int
	// OtherSchedulers counts the pods, neither terminated nor being
	// deleted, of schedulers that are not profiles of the configuration.
	OtherSchedulers int
	// OffNodes counts the pods bound to nodes that are not in the input:
	// they are left out.
	OffNodes int
}

// ProfilePods sorts the input's pods for a report. Each pod of Placed and
// OnNodes has a UID and its schedulerName set (on a copy when it had
// none, as a pod written by hand may not), so that the dry run's profile
// is the pod's own.
func (in *Input) ProfilePods() *ProfilePods {
	profiles := make([]string, len(in.Config.Profiles))
	for i, p := range in.Config.Profiles {
		profiles[i] = p.SchedulerName
	}
	nodes := sets.New[string]()
	for _, n := range in.Nodes {
		nodes.Insert(n.Name)
	}
	out := &ProfilePods{}
	for i, p := range in.Pods {
		state, onNode := celplugins.ProfilePod(p, profiles), celplugins.OnNode(p)
		switch {
		case onNode && !nodes.Has(p.Spec.NodeName):
			out.OffNodes++
			continue
		case state == celplugins.PodPending:
			out.Pending++
		case state == celplugins.PodBound:
			out.Bound++
		case state == celplugins.PodOtherScheduler:
			out.OtherSchedulers++
		}
		if !onNode && !state.Placed() {
			continue
		}
		if p.UID == "" || p.Spec.SchedulerName == "" {
			p = p.DeepCopy()
			if p.UID == "" {
				p.UID = ktypes.UID(fmt.Sprintf("celsched-pod-%d", i))
			}
			p.Spec.SchedulerName = celplugins.SchedulerName(p)
		}
		if onNode {
			out.OnNodes = append(out.OnNodes, p)
		}
		if state.Placed() {
			out.Placed = append(out.Placed, p)
		}
	}
	return out
}

// Notes say what the report leaves out.
func (p *ProfilePods) Notes() []string {
	if p.OffNodes == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d pod(s) bound to nodes that are not in the input are left out", p.OffNodes)}
}
