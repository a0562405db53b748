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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/api/manifest"
	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/cmd/celsched/dryrun"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

type explainOptions struct {
	kube           *genericclioptions.ConfigFlags
	drafts         []string
	config, output string
	why            bool
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
	f.BoolVar(&o.why, "why", false, whyUsage)
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
	drafts, err := manifest.ReadPolicies(s.in, o.drafts)
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
	c, err := newClient(o.kube)
	if err != nil {
		return nil, err
	}
	in, notes, err := clusterInput(ctx, c, client.ObjectKey{Namespace: namespace, Name: name}, drafts)
	if err != nil {
		return nil, err
	}
	in.Config, in.Why = cfg, o.why
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

	nodes, err := listAll[*corev1.Node](ctx, c, &corev1.NodeList{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	namespaces, err := listAll[*corev1.Namespace](ctx, c, &corev1.NamespaceList{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing namespaces: %w", err)
	}
	assigned, err := listAll[*corev1.Pod](ctx, c, &corev1.PodList{}, client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""), notTerminated())})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the pods on nodes: %w", err)
	}
	live, err := listAll[*schedv1alpha1.SchedulingPolicy](ctx, c, &schedv1alpha1.SchedulingPolicyList{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing SchedulingPolicies: %w", err)
	}

	in := &dryrun.Input{Pod: pod, Nodes: nodes, Namespaces: namespaces}
	for _, p := range assigned {
		if p.UID != pod.UID {
			in.Pods = append(in.Pods, p)
		}
	}
	merged, changes, err := dryrun.ApplyDrafts(live, drafts, nil)
	if err != nil {
		return nil, nil, inputError(err)
	}
	in.Policies = merged
	for _, c := range changes {
		if c.Change == dryrun.PolicyAdded {
			notes = append(notes, fmt.Sprintf("draft SchedulingPolicy %s is added", c.Name))
			continue
		}
		notes = append(notes, fmt.Sprintf("draft SchedulingPolicy %s replaces the live one", c.Name))
	}
	volumes, err := volumeObjects(ctx, c, pod)
	if err != nil {
		return nil, nil, err
	}
	in.Objects = volumes
	// The params objects the parameterized policies may use for the pod:
	// of each paramKind, those of the namespace the policy looks in
	// (paramRef.namespace, else the pod's), or all of a cluster-scoped kind.
	params, paramNotes, err := listParams(ctx, c, in.Policies, func(ref *schedv1alpha1.ParamRef) string { return cmp.Or(ref.Namespace, pod.Namespace) })
	if err != nil {
		return nil, nil, err
	}
	in.Params, notes = params, append(notes, paramNotes...)
	return in, notes, nil
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

// newClient returns a client of the kubeconfig's cluster that knows the
// core and celsched types.
func newClient(kube *genericclioptions.ConfigFlags) (client.Client, error) {
	restConfig, err := kube.ToRESTConfig()
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
	return client.New(restConfig, client.Options{Scheme: scheme})
}
