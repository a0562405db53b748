package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/source"
)

type explainOptions struct {
	source source.Source
	output string
	why    bool
}

func newExplainCommand(s *streams) *cobra.Command {
	o := explainOptions{source: source.Source{Stdin: s.in, Kube: genericclioptions.NewConfigFlags(true)}}
	cmd := &cobra.Command{
		Use:   "explain pod/NAME [-n NAMESPACE] [-f DRAFTS]",
		Short: "Explain where a live pod would go, and what holds or rejects it",
		Long: `explain evaluates a pod of the cluster in the kubeconfig as eval does, with
the cluster's nodes, namespaces, the pods on the nodes and SchedulingPolicies
(and the pod's PersistentVolumeClaims, PersistentVolumes, StorageClasses and
CSINodes for the volume plugins): why is the pod pending, where would it go.
Draft files (-f) of SchedulingPolicies and params objects replace the live
ones of the same name (kind, namespace and name) or are added: where would
it go with this change. Nothing in the cluster is changed.`,
		Example: `  celsched explain pod/trainer -n ml
  kubectl celsched explain trainer -n ml -f my-policy-change.yaml -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			report, err := runExplain(cmd.Context(), &o, args[0])
			if err != nil {
				return err
			}
			return printReport(s.out, report, o.output)
		},
	}
	f := cmd.Flags()
	o.source.Kube.AddFlags(f)
	f.StringSliceVarP(&o.source.Drafts, "filename", "f", nil, "draft files or directories: SchedulingPolicies and params objects, added to or replacing the live ones")
	f.StringVar(&o.source.Config, "config", "", "KubeSchedulerConfiguration (default: the manager's built-in one)")
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

func runExplain(ctx context.Context, o *explainOptions, arg string) (*dryrun.Report, error) {
	if err := checkOutput(o.output); err != nil {
		return nil, err
	}
	name, err := podName(arg)
	if err != nil {
		return nil, err
	}
	o.source.Pod = name
	in, err := o.source.Read(ctx)
	if err != nil {
		return nil, err
	}
	var notes []string
	pod := in.Pod
	if pod.Spec.NodeName != "" {
		notes = append(notes, fmt.Sprintf("the pod is bound to %s; this is where it would go now, as if it were not", pod.Spec.NodeName))
		pod = pod.DeepCopy()
		pod.Spec.NodeName = ""
	}
	policies, changes, err := dryrun.ApplyDrafts(in.Policies, in.Drafts, nil)
	if err != nil {
		return nil, inputError(err)
	}
	for _, c := range changes {
		notes = append(notes, draftNote("SchedulingPolicy "+c.Name, c.Change))
	}
	params, paramsChanges, err := dryrun.ApplyParamsDrafts(in.Params, in.ParamsDrafts, nil)
	if err != nil {
		return nil, inputError(err)
	}
	for _, c := range paramsChanges {
		notes = append(notes, draftNote("params object "+c.Object, c.Change))
	}
	report, err := dryrun.Run(ctx, dryrun.Input{Pod: pod, Nodes: in.Nodes, Namespaces: in.Namespaces, Pods: in.Pods, PodGroups: in.PodGroups,
		Policies: policies, Params: params, Objects: in.Objects, Config: in.Config, Why: o.why})
	if err != nil {
		return nil, err
	}
	report.Notes = append(append(notes, in.Notes...), report.Notes...)
	return report, nil
}

// draftNote says what a draft does to the live object.
func draftNote(what, change string) string {
	if change == dryrun.PolicyAdded {
		return "draft " + what + " is added"
	}
	return "draft " + what + " replaces the live one"
}
