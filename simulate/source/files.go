package source

import (
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/celsched/celsched/api/manifest"
	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// readDrafts reads the draft files into in.Drafts, and returns their other
// objects (params objects, CustomResourceDefinitions, and what else they
// hold) for draftObjects, once the params kinds are known.
func (s *Source) readDrafts(in *Input) ([]*unstructured.Unstructured, error) {
	if len(s.Drafts) == 0 {
		return nil, nil
	}
	// Documents without a kind (a kustomization.yaml) are skipped.
	policies, others, err := readPolicies(s.Stdin, s.Drafts, func(d *manifest.Document) bool {
		apiVersion, kind := d.Kind()
		return apiVersion != "" && kind != ""
	})
	if err != nil {
		return nil, inputError(err)
	}
	if len(policies)+len(others) == 0 {
		return nil, inputError(fmt.Errorf("no SchedulingPolicy or params object in %s", strings.Join(s.Drafts, ", ")))
	}
	in.Drafts = policies
	return others, nil
}

// draftObjects keeps, of the draft files' other objects, the params
// objects of the kinds that a policy in force or drafted names
// (in.ParamsDrafts); it returns the CustomResourceDefinitions, and leaves
// the rest out with a note.
func draftObjects(in *Input, objs []*unstructured.Unstructured) (crds []*unstructured.Unstructured) {
	params, crds, other := paramObjectsIn(objs, paramKinds(in.Policies, in.Drafts))
	in.ParamsDrafts = params
	if len(other) > 0 {
		in.Notes = append(in.Notes, "-f: objects of kinds that are neither SchedulingPolicies nor the paramKind of a policy are left out: "+joinKinds(other))
	}
	return crds
}

// readFiles reads the cluster from files.
func (s *Source) readFiles(in *Input, drafts []*unstructured.Unstructured) error {
	f := &s.Files
	var err error
	if s.Pod != "" {
		if in.Pod, err = readPod(s.Stdin, s.Pod); err != nil {
			return inputError(err)
		}
	}
	if in.GroupPods, err = readGroupPods(s.Stdin, s.GroupPods, in.Pod); err != nil {
		return inputError(err)
	}
	if in.PodGroups, err = manifest.ReadObjects[*schedulingv1beta1.PodGroup](s.Stdin, f.PodGroups, "PodGroup"); err != nil {
		return inputError(err)
	}
	if in.Pod != nil { // a scenario's PodGroups are in the pod's namespace unless they say otherwise
		for _, pg := range in.PodGroups {
			if pg.Namespace == "" {
				pg.Namespace = in.Pod.Namespace
			}
		}
	}
	if in.Nodes, err = manifest.ReadObjects[*corev1.Node](s.Stdin, f.Nodes, "Node"); err != nil {
		return inputError(err)
	}
	if in.Pods, err = manifest.ReadObjects[*corev1.Pod](s.Stdin, f.Pods, "Pod"); err != nil {
		return inputError(err)
	}
	if in.Namespaces, err = manifest.ReadObjects[*corev1.Namespace](s.Stdin, f.Namespaces, "Namespace"); err != nil {
		return inputError(err)
	}
	var candidates []*unstructured.Unstructured // params objects, and CRDs
	if len(f.Policies) > 0 {
		// A directory of policies may hold the CRDs of their params kinds;
		// a scenario's params are its --params.
		keep := func(d *manifest.Document) bool {
			_, kind := d.Kind()
			return !f.Scenario && (kind == "CustomResourceDefinition" || kind == "List")
		}
		var others []*unstructured.Unstructured
		if in.Policies, others, err = readPolicies(s.Stdin, f.Policies, keep); err != nil {
			return inputError(err)
		}
		candidates = slices.DeleteFunc(others, func(u *unstructured.Unstructured) bool { return !isCRD(u) })
	}
	params, err := manifest.ReadUnstructured(s.Stdin, f.Params)
	if err != nil {
		return inputError(err)
	}
	if len(f.Dump) > 0 {
		dumped, err := s.readDump(in)
		if err != nil {
			return err
		}
		params = append(params, dumped...)
	}
	if f.Scenario {
		in.Params = params
		draftObjects(in, drafts)
		return nil
	}
	candidates = append(candidates, params...)
	if len(in.Nodes) == 0 {
		return inputError(fmt.Errorf("no nodes: give --nodes or --dump with Nodes (or no file flags, to read the kubeconfig's cluster)"))
	}
	kinds := paramKinds(in.Policies, in.Drafts)
	params, crds, other := paramObjectsIn(candidates, kinds)
	in.Params = params
	// A dump holds ConfigMaps that no policy reads; any other kind that
	// is not a params kind is a mistake.
	other = slices.DeleteFunc(other, func(k string) bool { return k == "ConfigMap" })
	if len(other) > 0 {
		return inputError(fmt.Errorf("--dump, --params: objects of kinds that are not read and that no policy's paramKind names: %s", joinKinds(other)))
	}
	crds = append(crds, draftObjects(in, drafts)...)
	if err := checkParamCRDs(kinds, crds); err != nil {
		return inputError(err)
	}
	return nil
}

// readDump reads the files of --dump into in, and returns the params
// objects and CustomResourceDefinitions among them.
func (s *Source) readDump(in *Input) ([]*unstructured.Unstructured, error) {
	objs, err := manifest.ReadObjects[runtime.Object](s.Stdin, s.Files.Dump, "object")
	if err != nil {
		return nil, inputError(err)
	}
	var candidates []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj := obj.(type) {
		case *corev1.Node:
			in.Nodes = append(in.Nodes, obj)
		case *corev1.Pod:
			in.Pods = append(in.Pods, obj)
		case *corev1.Namespace:
			in.Namespaces = append(in.Namespaces, obj)
		case *schedulingv1beta1.PodGroup:
			in.PodGroups = append(in.PodGroups, obj)
		case *schedv1alpha1.SchedulingPolicy:
			if len(s.Files.Policies) == 0 { // --policies takes precedence
				in.Policies = append(in.Policies, obj)
			}
		case *corev1.PersistentVolumeClaim, *corev1.PersistentVolume, *storagev1.StorageClass, *storagev1.CSINode:
			in.Objects = append(in.Objects, obj)
		case *corev1.ConfigMap, *schedv1alpha1.TenantPlacement, *apiextensionsv1.CustomResourceDefinition, *unstructured.Unstructured:
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				if u, err = asUnstructured(obj); err != nil {
					return nil, inputError(err)
				}
			}
			candidates = append(candidates, u)
		default:
			return nil, inputError(fmt.Errorf("--dump: a %s is not one of the kinds read (Node, Pod, Namespace, PodGroup, SchedulingPolicy, PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, and params objects)",
				obj.GetObjectKind().GroupVersionKind().Kind))
		}
	}
	return candidates, nil
}

// readPod reads the one pod of a file; an empty namespace is default.
func readPod(stdin io.Reader, file string) (*corev1.Pod, error) {
	pods, err := manifest.ReadObjects[*corev1.Pod](stdin, []string{file}, "Pod")
	if err != nil {
		return nil, err
	}
	if len(pods) != 1 {
		return nil, fmt.Errorf("%s: want exactly one Pod, found %d", file, len(pods))
	}
	if pods[0].Namespace == "" {
		pods[0].Namespace = corev1.NamespaceDefault
	}
	return pods[0], nil
}

// readGroupPods reads the files of the other pending members of pod's
// pod group, each in the pod's namespace (an empty namespace is the
// pod's), naming the pod's group (spec.schedulingGroup.podGroupName), and
// pending (no spec.nodeName: a bound member takes room on its node, and
// is given with the pods on nodes).
func readGroupPods(stdin io.Reader, files []string, pod *corev1.Pod) ([]*corev1.Pod, error) {
	if len(files) == 0 {
		return nil, nil
	}
	group := ""
	if pod != nil {
		group = engine.GroupName(pod)
	}
	if group == "" {
		return nil, fmt.Errorf("--group-pods: the pod is in no pod group (its spec.schedulingGroup.podGroupName is not set)")
	}
	var out []*corev1.Pod
	for _, file := range files {
		pods, err := manifest.ReadObjects[*corev1.Pod](stdin, []string{file}, "Pod")
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			if p.Namespace == "" {
				p.Namespace = pod.Namespace
			}
			where := fmt.Sprintf("--group-pods %s: pod %s/%s", file, p.Namespace, p.Name)
			switch {
			case p.Namespace != pod.Namespace:
				return nil, fmt.Errorf("%s: metadata.namespace: a member of the pod's group %s is in its namespace %s", where, group, pod.Namespace)
			case engine.GroupName(p) != group:
				return nil, fmt.Errorf("%s: spec.schedulingGroup.podGroupName: %q, want the pod's group %q", where, engine.GroupName(p), group)
			case p.Spec.NodeName != "":
				return nil, fmt.Errorf("%s: spec.nodeName: bound to %s, not pending (give the group's bound members with --pods-on-nodes)", where, p.Spec.NodeName)
			case p.Name == pod.Name || slices.ContainsFunc(out, func(o *corev1.Pod) bool { return o.Name == p.Name }):
				return nil, fmt.Errorf("%s: metadata.name: given twice", where)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// readPolicies reads files of SchedulingPolicies: the policies, and the
// other documents that keep accepts, decoded as they are (a List's items
// each).
func readPolicies(stdin io.Reader, files []string, keep func(*manifest.Document) bool) ([]*schedv1alpha1.SchedulingPolicy, []*unstructured.Unstructured, error) {
	docs, err := manifest.ReadDocuments(files, stdin)
	if err != nil {
		return nil, nil, err
	}
	var policies []*schedv1alpha1.SchedulingPolicy
	var others []*manifest.Document
	for _, d := range docs {
		if !d.IsPolicy() {
			if keep(d) {
				others = append(others, d)
			}
			continue
		}
		p, err := d.Policy()
		if err != nil {
			return nil, nil, err
		}
		policies = append(policies, p)
	}
	objs, err := manifest.DecodeUnstructured(others)
	return policies, objs, err
}
