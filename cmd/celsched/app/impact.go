package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/cmd/celsched/dryrun"
	"github.com/celsched/celsched/cmd/celsched/impact"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

type impactOptions struct {
	kube                              *genericclioptions.ConfigFlags
	drafts, deletions, failOn         []string
	nodes, pods, namespaces, policies []string
	dump                              []string
	config, output                    string
	prune, why                        bool
}

// offline says whether the cluster comes from files.
func (o *impactOptions) offline() bool {
	return len(o.nodes)+len(o.pods)+len(o.namespaces)+len(o.policies)+len(o.dump) > 0
}

func newImpactCommand(s *streams) *cobra.Command {
	o := impactOptions{kube: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "impact -f DRAFT_POLICIES... [--delete NAME]... [--nodes F --pods F --namespaces F --policies F | --dump F]",
		Short: "What a policy change does to every pending and bound pod of a cluster",
		Long: `impact evaluates every pod of the scheduler's profiles with the live
SchedulingPolicies and with the draft applied (-f replaces the policies of
the same name or adds them, --delete removes), side by side, with
kube-scheduler's framework as eval does. The cluster is the kubeconfig's, or
a dump in files (--nodes, --pods, --namespaces, --policies, or --dump with
all of them, as kubectl get -o yaml prints). Nothing in the cluster is
changed.

For a pending pod: held, unschedulable or schedulable (and on which nodes),
now and with the draft. For a bound pod: whether its node is still accepted
(preEnqueue and filters), and its node's rank among the feasible nodes.
It prints a summary (per change, namespace and policy) and the pods that
change. Changes: ` + changeNames() + `.
--fail-on exits 1 when a pod has one of the changes given.`,
		Example: `  celsched impact -f my-policy-change.yaml
  celsched impact -f drafts/ --delete old-policy --fail-on stranded,held,evicted-would-not-return
  celsched impact -f draft.yaml --dump cluster.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			report, err := runImpact(cmd.Context(), s, &o)
			if err != nil {
				return err
			}
			if err := printImpact(s.out, report, o.output); err != nil {
				return err
			}
			return failOn(report, o.failOn)
		},
	}
	f := cmd.Flags()
	o.kube.AddFlags(f)
	f.StringSliceVarP(&o.drafts, "filename", "f", nil, "draft SchedulingPolicy files or directories, added to or replacing the live ones")
	f.StringSliceVar(&o.deletions, "delete", nil, "names of live SchedulingPolicies the change deletes")
	f.BoolVar(&o.prune, "prune", false, "the drafts are the whole set of policies: live policies that are not among them are deleted (GitOps)")
	f.StringSliceVar(&o.nodes, "nodes", nil, "offline: node files (documents or a List)")
	f.StringSliceVar(&o.pods, "pods", nil, "offline: pod files, pending and bound")
	f.StringSliceVar(&o.namespaces, "namespaces", nil, "offline: namespace files")
	f.StringSliceVar(&o.policies, "policies", nil, "offline: the live SchedulingPolicy files or directories (instead of those of --dump)")
	f.StringSliceVar(&o.dump, "dump", nil, "offline: files of Nodes, Pods, Namespaces, SchedulingPolicies and volume objects, or Lists of them")
	f.StringSliceVar(&o.failOn, "fail-on", nil, "exit 1 when a pod has one of these changes: "+changeNames())
	f.StringVar(&o.config, "config", "", "KubeSchedulerConfiguration (default: the manager's built-in one)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.BoolVar(&o.why, "why", false, "for pods the draft holds or refuses their node: the false rules' sub-expressions and their values")
	return cmd
}

func changeNames() string {
	names := make([]string, 0, len(impact.Changes))
	for _, c := range impact.Changes {
		if c != impact.Unchanged {
			names = append(names, string(c))
		}
	}
	return strings.Join(names, ", ")
}

func runImpact(ctx context.Context, s *streams, o *impactOptions) (*impact.Report, error) {
	if err := checkOutput(o.output); err != nil {
		return nil, err
	}
	if len(o.drafts) == 0 && len(o.deletions) == 0 {
		return nil, usageError("-f (draft policies) or --delete is required")
	}
	for _, c := range o.failOn {
		if !slices.Contains(impact.Changes, impact.Change(c)) || c == string(impact.Unchanged) {
			return nil, usageError(fmt.Sprintf("--fail-on %q: want one of %s", c, changeNames()))
		}
	}
	drafts, err := readPolicies(s, o.drafts)
	if err != nil {
		return nil, inputError(err)
	}
	if len(o.drafts) > 0 && len(drafts) == 0 {
		return nil, usageError(fmt.Sprintf("no SchedulingPolicy in %s", strings.Join(o.drafts, ", ")))
	}
	cfg, err := defaultconfig.Load(o.config)
	if err != nil {
		return nil, inputError(err)
	}
	in := &impact.Input{Drafts: drafts, Deletions: o.deletions, Config: cfg, Why: o.why}
	if o.offline() {
		err = readDump(s, o, in)
	} else {
		err = readCluster(ctx, o.kube, in)
	}
	if err != nil {
		return nil, err
	}
	if o.prune {
		in.Deletions = append(in.Deletions, pruned(in.Live, in.Drafts, in.Deletions)...)
	}
	if _, _, err := dryrun.ApplyDrafts(in.Live, in.Drafts, in.Deletions); err != nil {
		return nil, inputError(err)
	}
	return impact.Run(ctx, *in)
}

// readDump reads the cluster from files.
func readDump(s *streams, o *impactOptions, in *impact.Input) error {
	var err error
	if in.Nodes, err = readObjects[*corev1.Node](s, o.nodes, "Node"); err != nil {
		return inputError(err)
	}
	if in.Pods, err = readObjects[*corev1.Pod](s, o.pods, "Pod"); err != nil {
		return inputError(err)
	}
	if in.Namespaces, err = readObjects[*corev1.Namespace](s, o.namespaces, "Namespace"); err != nil {
		return inputError(err)
	}
	if len(o.policies) > 0 {
		if in.Live, err = readPolicies(s, o.policies); err != nil {
			return inputError(err)
		}
	}
	if len(o.dump) > 0 {
		objs, err := readObjects[runtime.Object](s, o.dump, "object")
		if err != nil {
			return inputError(err)
		}
		for _, obj := range objs {
			switch obj := obj.(type) {
			case *corev1.Node:
				in.Nodes = append(in.Nodes, obj)
			case *corev1.Pod:
				in.Pods = append(in.Pods, obj)
			case *corev1.Namespace:
				in.Namespaces = append(in.Namespaces, obj)
			case *schedv1alpha1.SchedulingPolicy:
				if len(o.policies) == 0 { // --policies takes precedence
					in.Live = append(in.Live, obj)
				}
			case *corev1.PersistentVolumeClaim, *corev1.PersistentVolume, *storagev1.StorageClass, *storagev1.CSINode:
				in.Objects = append(in.Objects, obj)
			default:
				return inputError(fmt.Errorf("--dump: a %s is not one of the kinds impact reads (Node, Pod, Namespace, SchedulingPolicy, PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode)",
					obj.GetObjectKind().GroupVersionKind().Kind))
			}
		}
	}
	if len(in.Nodes) == 0 {
		return usageError("no nodes: give --nodes or --dump with Nodes (or no file flags, to read the kubeconfig's cluster)")
	}
	return nil
}

// readCluster reads the cluster of the kubeconfig, in pages.
func readCluster(ctx context.Context, kube *genericclioptions.ConfigFlags, in *impact.Input) error {
	c, err := newClient(kube)
	if err != nil {
		return err
	}
	if in.Nodes, err = listAll[*corev1.Node](ctx, c, &corev1.NodeList{}); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	if in.Namespaces, err = listAll[*corev1.Namespace](ctx, c, &corev1.NamespaceList{}); err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	if in.Pods, err = listAll[*corev1.Pod](ctx, c, &corev1.PodList{}, client.MatchingFieldsSelector{Selector: notTerminated()}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	if in.Live, err = listAll[*schedv1alpha1.SchedulingPolicy](ctx, c, &schedv1alpha1.SchedulingPolicyList{}); err != nil {
		return fmt.Errorf("listing SchedulingPolicies: %w", err)
	}
	if slices.ContainsFunc(in.Pods, hasClaims) {
		if in.Objects, err = volumeLists(ctx, c, &corev1.PersistentVolumeClaimList{}); err != nil {
			return err
		}
	}
	return nil
}

// pruned names the live policies that neither a draft nor a deletion
// names.
func pruned(live, drafts []*schedv1alpha1.SchedulingPolicy, deletions []string) []string {
	var out []string
	for _, p := range live {
		named := func(d *schedv1alpha1.SchedulingPolicy) bool { return d.Name == p.Name }
		if !slices.ContainsFunc(drafts, named) && !slices.Contains(deletions, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
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

// failOn returns an error (exit code 1) when a pod has one of the changes.
func failOn(r *impact.Report, changes []string) error {
	var found []string
	total := 0
	for _, c := range changes {
		if n := r.Summary.ByChange[impact.Change(c)]; n > 0 {
			found = append(found, fmt.Sprintf("%s %d", c, n))
			total += n
		}
	}
	if total == 0 {
		return nil
	}
	return fmt.Errorf("%d pod(s) with changes of --fail-on: %s", total, strings.Join(found, ", "))
}

func printImpact(w io.Writer, r *impact.Report, format string) error {
	if format != "table" {
		return printStructured(w, r, format)
	}
	var changes []string
	unchanged := 0
	for _, c := range r.Policies {
		if c.Change == dryrun.PolicyUnchanged {
			unchanged++
			continue
		}
		changes = append(changes, c.Name+" "+c.Change)
	}
	switch {
	case len(changes) == 0:
		fmt.Fprintf(w, "Draft: no SchedulingPolicy changes (%d unchanged)\n", unchanged)
	case unchanged > 0:
		fmt.Fprintf(w, "Draft: SchedulingPolicy %s (%d unchanged)\n", strings.Join(changes, ", "), unchanged)
	default:
		fmt.Fprintf(w, "Draft: SchedulingPolicy %s\n", strings.Join(changes, ", "))
	}
	sum := r.Summary
	fmt.Fprintf(w, "Pods: %d pending and %d bound of the scheduler's profiles; %d not affected (no changed policy applies to them); %d of other schedulers, not evaluated\n",
		sum.Pending, sum.Bound, sum.NotAffected, sum.OtherSchedulers)
	printNotes(w, r.Notes)

	fmt.Fprintln(w, "\nChanges:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHANGE\tPODS")
	for _, c := range impact.Changes {
		if n := sum.ByChange[c]; n > 0 || c != impact.Unchanged {
			fmt.Fprintf(tw, "  %s\t%d\n", c, n)
		}
	}
	_ = tw.Flush()
	printCounts(w, "NAMESPACE", sum.ByNamespace)
	printCounts(w, "POLICY", sum.ByPolicy)

	if len(r.Pods) == 0 {
		fmt.Fprintln(w, "\nNo pod changes.")
		return nil
	}
	fmt.Fprintln(w, "\nPods that change:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tNODE\tCHANGE\tNOW\tWITH THE DRAFT\tPOLICIES")
	for i := range r.Pods {
		p := &r.Pods[i]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", p.Pod, orDash(p.Node), p.Change, outcome(p.Now), outcome(p.Draft), strings.Join(p.Policies, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printWhy(w, r)
	return nil
}

// printWhy prints the false rules of the pods that have them (--why).
func printWhy(w io.Writer, r *impact.Report) {
	header := false
	for i := range r.Pods {
		p := &r.Pods[i]
		for _, pr := range p.Why {
			if !header {
				fmt.Fprintln(w, "\nWhy, with the draft:")
				header = true
			}
			if msg := pr.CompileError + pr.MatchError; msg != "" {
				fmt.Fprintf(w, "  %s: SchedulingPolicy %s: %s\n", p.Pod, pr.Name, msg)
			}
			rules := map[string][]dryrun.RuleResult{"preEnqueue": pr.PreEnqueue, "filters": pr.Filters[p.Node]}
			for _, point := range []string{"preEnqueue", "filters"} {
				for _, v := range rules[point] {
					fmt.Fprintf(w, "  %s: SchedulingPolicy %s, %s/%s: %s\n", p.Pod, pr.Name, point, v.Rule, verdict(v))
					for _, s := range v.Why {
						fmt.Fprintf(w, "      %s\n", s)
					}
				}
			}
		}
	}
}

func printCounts(w io.Writer, what string, counts map[string]map[impact.Change]int) {
	if len(counts) == 0 {
		return
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "\nBy %s:\n", strings.ToLower(what))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\tCHANGE\tPODS\n", what)
	for _, k := range keys {
		for _, c := range impact.Changes {
			if n := counts[k][c]; n > 0 {
				fmt.Fprintf(tw, "  %s\t%s\t%d\n", k, c, n)
			}
		}
	}
	_ = tw.Flush()
}

func outcome(o impact.Outcome) string {
	switch o.State {
	case impact.StateSchedulable:
		return "schedulable: " + strings.Join(o.Nodes, " or ")
	case impact.StateAccepted:
		return fmt.Sprintf("accepted, rank %d of %d", o.Rank, o.Feasible)
	default:
		return string(o.State) + ": " + o.Reason
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
