package source

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// readLive reads the kubeconfig's cluster, in pages. For a Source.Pod it
// reads what the scheduler sees for that pod: the pods on nodes (the
// scheduler's cache), the params objects the policies may read for the
// pod (of paramRef.namespace, else the pod's), and the volume objects of
// the pod's claims. Otherwise every pod that has not terminated, the
// params objects of every namespace (paramRef.namespace's when set), and
// the volume objects when a pod has claims. The params kinds are those
// that a policy in force or drafted names.
func (s *Source) readLive(ctx context.Context, in *Input, drafts []*unstructured.Unstructured) error {
	c, err := NewClient(s.Kube)
	if err != nil {
		return err
	}
	if in.Access, err = newAccess(s.Kube); err != nil {
		return err
	}
	in.Owners = c
	paramsNamespace := func(ref *schedv1alpha1.ParamRef) string { return ref.Namespace }
	podSelector := notTerminated()
	if s.Pod != "" {
		if in.Pod, err = s.getPod(ctx, c); err != nil {
			return err
		}
		paramsNamespace = func(ref *schedv1alpha1.ParamRef) string { return cmp.Or(ref.Namespace, in.Pod.Namespace) }
		podSelector = fields.AndSelectors(fields.OneTermNotEqualSelector("spec.nodeName", ""), podSelector)
	}
	if in.Nodes, err = listAll[*corev1.Node](ctx, c, &corev1.NodeList{}); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	if in.Namespaces, err = listAll[*corev1.Namespace](ctx, c, &corev1.NamespaceList{}); err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	pods, err := listAll[*corev1.Pod](ctx, c, &corev1.PodList{}, client.MatchingFieldsSelector{Selector: podSelector})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	in.Pods = slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return in.Pod != nil && p.UID == in.Pod.UID })
	if in.PodGroups, err = listPodGroups(ctx, c); err != nil {
		return err
	}
	if in.Pod != nil && in.Pod.Spec.SchedulingGroup != nil {
		members, err := pendingMembers(ctx, c, in.Pod)
		if err != nil {
			return err
		}
		in.Pods = append(in.Pods, members...)
	}
	if in.Policies, err = listAll[*schedv1alpha1.SchedulingPolicy](ctx, c, &schedv1alpha1.SchedulingPolicyList{}); err != nil {
		return fmt.Errorf("listing SchedulingPolicies: %w", err)
	}
	params, notes, err := listParams(ctx, c, append(slices.Clone(in.Policies), in.Drafts...), paramsNamespace)
	if err != nil {
		return err
	}
	in.Params, in.Notes = params, append(in.Notes, notes...)
	draftObjects(in, drafts)
	switch {
	case in.Pod != nil:
		in.Objects, err = volumeObjects(ctx, c, in.Pod)
	case slices.ContainsFunc(in.Pods, hasClaims):
		in.Objects, err = volumeLists(ctx, c, &corev1.PersistentVolumeClaimList{})
	}
	return err
}

// pendingMembers lists the other pending members of the pod's group: the
// scheduler places them with it, all or nothing.
func pendingMembers(ctx context.Context, c client.Client, pod *corev1.Pod) ([]*corev1.Pod, error) {
	pending, err := listAll[*corev1.Pod](ctx, c, &corev1.PodList{}, client.InNamespace(pod.Namespace),
		client.MatchingFieldsSelector{Selector: fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", ""), notTerminated())})
	if err != nil {
		return nil, fmt.Errorf("listing the pending pods of namespace %s: %w", pod.Namespace, err)
	}
	group := engine.GroupName(pod)
	return slices.DeleteFunc(pending, func(p *corev1.Pod) bool {
		return p.UID == pod.UID || group == "" || engine.GroupName(p) != group
	}), nil
}

// listPodGroups lists the cluster's PodGroups; none when the API server
// does not serve scheduling.k8s.io/v1beta1 (its GenericWorkload feature
// off).
func listPodGroups(ctx context.Context, c client.Client) ([]*schedulingv1beta1.PodGroup, error) {
	groups, err := listAll[*schedulingv1beta1.PodGroup](ctx, c, &schedulingv1beta1.PodGroupList{})
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PodGroups: %w", err)
	}
	return groups, nil
}

// getPod reads the Source.Pod, in the kubeconfig's namespace.
func (s *Source) getPod(ctx context.Context, c client.Client) (*corev1.Pod, error) {
	namespace, _, err := s.Kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, inputError(err)
	}
	key := client.ObjectKey{Namespace: namespace, Name: s.Pod}
	pod := &corev1.Pod{}
	if err := c.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, inputError(fmt.Errorf("pod %s not found", key))
		}
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return pod, nil
}

func hasClaims(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil })
}

// notTerminated selects the pods that are not Succeeded or Failed.
func notTerminated() fields.Selector {
	return fields.AndSelectors(
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	)
}

// volumeObjects reads what the volume plugins need for a pod with
// PersistentVolumeClaims; nothing for a pod without.
func volumeObjects(ctx context.Context, c client.Client, pod *corev1.Pod) ([]runtime.Object, error) {
	var out []runtime.Object
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			continue // the scheduler says so too
		}
		if err != nil {
			return nil, fmt.Errorf("reading PersistentVolumeClaim %s/%s: %w", pod.Namespace, v.PersistentVolumeClaim.ClaimName, err)
		}
		out = append(out, pvc)
	}
	if len(out) == 0 {
		return nil, nil
	}
	objs, err := volumeLists(ctx, c)
	if err != nil {
		return nil, err
	}
	return append(out, objs...), nil
}

// volumeLists reads, in pages, the cluster's PersistentVolumes,
// StorageClasses and CSINodes, and the objects of the extra lists: what
// the volume plugins read.
func volumeLists(ctx context.Context, c client.Client, extra ...client.ObjectList) ([]runtime.Object, error) {
	var out []runtime.Object
	lists := append([]client.ObjectList{&corev1.PersistentVolumeList{}, &storagev1.StorageClassList{}, &storagev1.CSINodeList{}}, extra...)
	for _, list := range lists {
		objs, err := listAll[runtime.Object](ctx, c, list)
		if err != nil {
			return nil, fmt.Errorf("listing %T: %w", list, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// pageSize is how many objects one list request asks for (kubectl's
// --chunk-size default).
const pageSize = 500

// listAll lists every object of a kind in pages of pageSize, and returns
// them as T. list is an empty list of the kind, used as the type of each
// page.
func listAll[T runtime.Object](ctx context.Context, c client.Client, list client.ObjectList, opts ...client.ListOption) ([]T, error) {
	var out []T
	for next := ""; ; {
		page, ok := list.DeepCopyObject().(client.ObjectList)
		if !ok {
			return nil, fmt.Errorf("%T is not a list", list)
		}
		if err := c.List(ctx, page, append(slices.Clone(opts), client.Limit(pageSize), client.Continue(next))...); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(page)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			t, ok := item.(T)
			if !ok {
				return nil, fmt.Errorf("a list item is a %T", item)
			}
			out = append(out, t)
		}
		if next = page.GetContinue(); next == "" {
			return out, nil
		}
	}
}

// NewClient returns a client of the kubeconfig's cluster that knows the
// core and celsched types.
func NewClient(kube *genericclioptions.ConfigFlags) (client.Client, error) {
	return newClient(kube, 0, 0)
}

// newClient is NewClient with a client-side rate limit of qps requests a
// second (bursts of burst); zero is client-go's default (5, bursts of 10).
func newClient(kube *genericclioptions.ConfigFlags, qps float32, burst int) (client.Client, error) {
	restConfig, err := kube.ToRESTConfig()
	if err != nil {
		return nil, inputError(err)
	}
	restConfig = rest.CopyConfig(restConfig)
	restConfig.QPS, restConfig.Burst = qps, burst
	return client.New(restConfig, client.Options{Scheme: scheme})
}
