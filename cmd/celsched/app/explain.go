package app

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/cmd/celsched/dryrun"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

type explainOptions struct {
	kube           *genericclioptions.ConfigFlags
	drafts         []string
	config, output string
}

func newExplainCommand(s *streams) *cobra.Command {
	o := explainOptions{kube: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "explain pod/NAME [-n NAMESPACE] [-f DRAFT_POLICIES]",
		Short: "Explain where a live pod would go, and what holds or rejects it",
		Long: `explain evaluates a pod of the cluster in the kubeconfig as eval does, with
the cluster's nodes, namespaces, the pods on the nodes and SchedulingPolicies
(and the pod's PersistentVolumeClaims, PersistentVolumes, StorageClasses and
CSINodes for the volume plugins): why is the pod pending, where would it go.
Draft policy files (-f) replace live policies of the same name or are added:
where would it go with this change. Nothing in the cluster is changed.`,
		Example: `  celsched explain pod/trainer -n ml
  kubectl celsched explain trainer -n ml -f my-policy-change.yaml -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			report, err := runExplain(cmd.Context(), s, &o, args[0])
			if err != nil {
				return err
			}
			return printReport(s.out, report, o.output)
		},
	}
	f := cmd.Flags()
	o.kube.AddFlags(f)
	f.StringSliceVarP(&o.drafts, "filename", "f", nil, "draft SchedulingPolicy files or directories, added to or replacing the live ones")
	f.StringVar(&o.config, "config", "", "KubeSchedulerConfiguration (default: the manager's built-in one)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// podName accepts NAME, pod/NAME and pods/NAME.
func podName(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, nil
	}
	if kind != "pod" && kind != "pods" && kind != "po" || name == "" {
		return "", usageError(fmt.Sprintf("%q: want pod/NAME", arg))
	}
	return name, nil
}

func runExplain(ctx context.Context, s *streams, o *explainOptions, arg string) (*dryrun.Report, error) {
	if err := checkOutput(o.output); err != nil {
		return nil, err
	}
	name, err := podName(arg)
	if err != nil {
		return nil, err
	}
	drafts, err := readPolicies(s, o.drafts)
	if err != nil {
		return nil, inputError(err)
	}
	cfg, err := defaultconfig.Load(o.config)
	if err != nil {
		return nil, inputError(err)
	}
	namespace, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, inputError(err)
	}
	restConfig, err := o.kube.ToRESTConfig()
	if err != nil {
		return nil, inputError(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	in, notes, err := clusterInput(ctx, c, client.ObjectKey{Namespace: namespace, Name: name}, drafts)
	if err != nil {
		return nil, err
	}
	in.Config = cfg
	report, err := dryrun.Run(ctx, *in)
	if err != nil {
		return nil, err
	}
	report.Notes = append(notes, report.Notes...)
	return report, nil
}

// clusterInput reads what the scheduler sees for the pod: the nodes, the
// namespaces, the pods assigned to nodes and not terminated (the
// scheduler's cache), the policies with the drafts applied, and the
// objects the volume plugins read.
func clusterInput(ctx context.Context, c client.Client, key client.ObjectKey, drafts []*schedv1alpha1.SchedulingPolicy) (*dryrun.Input, []string, error) {
	var notes []string
	pod := &corev1.Pod{}
	if err := c.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, inputError(fmt.Errorf("pod %s not found", key))
		}
		return nil, nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	if pod.Spec.NodeName != "" {
		notes = append(notes, fmt.Sprintf("the pod is bound to %s; this is where it would go now, as if it were not", pod.Spec.NodeName))
		pod.Spec.NodeName = ""
	}

	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return nil, nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var assigned corev1.PodList
	if err := c.List(ctx, &assigned, client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	)}); err != nil {
		return nil, nil, fmt.Errorf("listing the pods on nodes: %w", err)
	}
	var policies schedv1alpha1.SchedulingPolicyList
	if err := c.List(ctx, &policies); err != nil {
		return nil, nil, fmt.Errorf("listing SchedulingPolicies: %w", err)
	}

	in := &dryrun.Input{Pod: pod}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	for i := range namespaces.Items {
		in.Namespaces = append(in.Namespaces, &namespaces.Items[i])
	}
	for i := range assigned.Items {
		if p := &assigned.Items[i]; p.UID != pod.UID {
			in.Pods = append(in.Pods, p)
		}
	}
	for i := range policies.Items {
		in.Policies = append(in.Policies, &policies.Items[i])
	}
	for _, d := range drafts {
		if i := slices.IndexFunc(in.Policies, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == d.Name }); i >= 0 {
			in.Policies[i] = d
			notes = append(notes, fmt.Sprintf("draft SchedulingPolicy %s replaces the live one", d.Name))
			continue
		}
		in.Policies = append(in.Policies, d)
		notes = append(notes, fmt.Sprintf("draft SchedulingPolicy %s is added", d.Name))
	}
	volumes, err := volumeObjects(ctx, c, pod)
	if err != nil {
		return nil, nil, err
	}
	in.Objects = volumes
	if in.Params, err = paramObjects(ctx, c, pod, in.Policies); err != nil {
		return nil, nil, err
	}
	return in, notes, nil
}

// paramObjects reads the params objects the parameterized policies may use
// for the pod: of each paramKind, those of the namespace the policy looks
// in (paramRef.namespace, else the pod's), or all of a cluster-scoped kind.
// A kind the cluster does not serve contributes nothing (the dry run then
// reports the policy's params as not found).
func paramObjects(ctx context.Context, c client.Client, pod *corev1.Pod, policies []*schedv1alpha1.SchedulingPolicy) ([]*unstructured.Unstructured, error) {
	type source struct {
		gvk       schema.GroupVersionKind
		namespace string
	}
	seen := map[source]bool{}
	var out []*unstructured.Unstructured
	for _, p := range policies {
		kind, ref := p.Spec.ParamKind, p.Spec.ParamRef
		if kind == nil || ref == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(kind.APIVersion)
		if err != nil {
			continue // the dry run reports the compile error
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gv.WithKind(kind.Kind + "List"))
		item := &unstructured.Unstructured{}
		item.SetGroupVersionKind(gv.WithKind(kind.Kind))
		namespaced, err := c.IsObjectNamespaced(item)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("paramKind %s of SchedulingPolicy %s: %w", item.GroupVersionKind(), p.Name, err)
		}
		src := source{gvk: item.GroupVersionKind()}
		var opts []client.ListOption
		if namespaced {
			src.namespace = cmp.Or(ref.Namespace, pod.Namespace)
			opts = append(opts, client.InNamespace(src.namespace))
		}
		if seen[src] {
			continue
		}
		seen[src] = true
		if err := c.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing the params (%s) of SchedulingPolicy %s: %w", src.gvk.Kind, p.Name, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
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
	var pvs corev1.PersistentVolumeList
	var classes storagev1.StorageClassList
	var csiNodes storagev1.CSINodeList
	for what, list := range map[string]client.ObjectList{"PersistentVolumes": &pvs, "StorageClasses": &classes, "CSINodes": &csiNodes} {
		if err := c.List(ctx, list); err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
	}
	for i := range pvs.Items {
		out = append(out, &pvs.Items[i])
	}
	for i := range classes.Items {
		out = append(out, &classes.Items[i])
	}
	for i := range csiNodes.Items {
		out = append(out, &csiNodes.Items[i])
	}
	return out, nil
}
