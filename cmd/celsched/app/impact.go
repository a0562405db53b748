package app

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/impact"
	"github.com/celsched/celsched/simulate/source"
)

type impactOptions struct {
	source            source.Source
	deletions, failOn []string
	deleteParams      []string
	output            string
	prune, why        bool
	// maxPods bounds the pods listed by -o markdown.
	maxPods int
}

func newImpactCommand(s *streams) *cobra.Command {
	o := impactOptions{source: source.Source{Stdin: s.in, Kube: genericclioptions.NewConfigFlags(true)}}
	cmd := &cobra.Command{
		Use:   "impact -f DRAFTS... [--delete NAME]... [--delete-params KIND/NAMESPACE/NAME]... [--nodes F --pods F --namespaces F --pod-groups F --policies F --params F | --dump F]",
		Short: "What a change of policies or of their params does to every pending and bound pod of a cluster",
		Long: `impact evaluates every pod of the scheduler's profiles with the live
SchedulingPolicies and their params objects, and with the draft applied,
side by side, with kube-scheduler's framework as eval does. -f takes
SchedulingPolicies, which replace the policies of the same name or are
added, and params objects (ConfigMaps, custom resources of the kinds the
policies' paramKind name), which replace the object of the same kind,
namespace and name or are added; --delete and --delete-params remove. The
cluster is the kubeconfig's (the params objects of every kind a live or
drafted policy names are read too), or a dump in files (--nodes, --pods,
--namespaces, --policies, --params, or --dump with all of them, as kubectl
get -o yaml prints; a custom params kind needs its
CustomResourceDefinition there). Nothing in the cluster is changed.

For a pending pod: held, unschedulable or schedulable (and on which nodes),
now and with the draft. For a bound pod: whether its node is still accepted
(preEnqueue and filters), and its node's rank among the feasible nodes.
It prints a summary (per change, namespace and policy) and the pods that
change. Changes: ` + changeNames() + `.
--fail-on exits 1 when a pod has one of the changes given.`,
		Example: `  celsched impact -f my-policy-change.yaml
  celsched impact -f drafts/ --delete memory-headroom-audit --fail-on stranded,held,evicted-would-not-return
  celsched impact -f tenants/team-a/placement.yaml
  celsched impact -f draft.yaml --dump cluster.yaml -o markdown >> "$GITHUB_STEP_SUMMARY"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limitMemory()
			report, err := runImpact(cmd.Context(), &o)
			if err != nil {
				return err
			}
			if err := printImpact(s.out, report, o.output, o.maxPods); err != nil {
				return err
			}
			return failOn(report, o.failOn)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.source.Drafts, "filename", "f", nil, "draft files or directories: SchedulingPolicies and params objects, added to or replacing the live ones")
	f.StringSliceVar(&o.deletions, "delete", nil, "names of live SchedulingPolicies the change deletes")
	f.StringSliceVar(&o.deleteParams, "delete-params", nil, "live params objects the change deletes: KIND[.GROUP]/NAMESPACE/NAME, or KIND[.GROUP]/NAME")
	f.BoolVar(&o.prune, "prune", false, "the drafts are the whole set of policies: live policies that are not among them are deleted (GitOps)")
	addClusterFlags(f, &o.source)
	f.StringSliceVar(&o.failOn, "fail-on", nil, "exit 1 when a pod has one of these changes: "+changeNames())
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json, yaml or markdown (a pull-request comment)")
	f.IntVar(&o.maxPods, "max-pods", 50, "-o markdown: list at most this many changed pods (the rest are counted)")
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

func runImpact(ctx context.Context, o *impactOptions) (*impact.Report, error) {
	if err := checkOutput(o.output, "markdown"); err != nil {
		return nil, err
	}
	if len(o.source.Drafts) == 0 && len(o.deletions) == 0 && len(o.deleteParams) == 0 {
		return nil, usageError("-f (draft policies or params objects), --delete or --delete-params is required")
	}
	for _, c := range o.failOn {
		if !slices.Contains(impact.Changes, impact.Change(c)) || c == string(impact.Unchanged) {
			return nil, usageError(fmt.Sprintf("--fail-on %q: want one of %s", c, changeNames()))
		}
	}
	in := impact.Input{Deletions: o.deletions, Why: o.why}
	for _, d := range o.deleteParams {
		k, err := dryrun.ParseParamsKey(d)
		if err != nil {
			return nil, usageError("--delete-params " + err.Error())
		}
		in.ParamsDeletions = append(in.ParamsDeletions, k)
	}
	read, err := o.source.Read(ctx)
	if err != nil {
		return nil, err
	}
	in.Input = *read
	if o.prune {
		in.Deletions = append(in.Deletions, pruned(in.Policies, in.Drafts, in.Deletions)...)
	}
	if _, _, err := dryrun.ApplyDrafts(in.Policies, in.Drafts, in.Deletions); err != nil {
		return nil, inputError(err)
	}
	if _, _, err := dryrun.ApplyParamsDrafts(in.Params, in.ParamsDrafts, in.ParamsDeletions); err != nil {
		return nil, inputError(err)
	}
	return impact.Run(ctx, in)
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
	groups, foundGroups := 0, []string(nil)
	if r.Summary.Groups != nil {
		for _, c := range changes {
			if n := r.Summary.Groups.ByChange[impact.Change(c)]; n > 0 {
				foundGroups = append(foundGroups, fmt.Sprintf("%s %d", c, n))
				groups += n
			}
		}
	}
	switch {
	case total == 0 && groups == 0:
		return nil
	case groups == 0:
		return fmt.Errorf("%d pod(s) with changes of --fail-on: %s", total, strings.Join(found, ", "))
	case total == 0:
		return fmt.Errorf("%d pod group(s) with changes of --fail-on: %s", groups, strings.Join(foundGroups, ", "))
	}
	return fmt.Errorf("%d pod(s) and %d pod group(s) with changes of --fail-on: pods %s; groups %s", total, groups, strings.Join(found, ", "), strings.Join(foundGroups, ", "))
}

func printImpact(w io.Writer, r *impact.Report, format string, maxPods int) error {
	switch format {
	case "table":
	case "markdown":
		return printImpactMarkdown(w, r, maxPods)
	default:
		return printStructured(w, r, format)
	}
	writeWrapped(w, 0, 4, "Draft: "+draftLine(r))
	if line := paramsLine(r); line != "" {
		writeWrapped(w, 0, 4, "Params: "+line)
	}
	writeWrapped(w, 0, 4, "Pods: "+podsLine(&r.Summary))
	if line := r.Summary.GroupsLine(); line != "" {
		writeWrapped(w, 0, 4, "Pod groups: "+line)
	}
	printNotes(w, r.Notes)

	sum := r.Summary
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
	printCounts(w, "PARAMS", sum.ByParams)

	if err := printGroups(w, r); err != nil {
		return err
	}
	if len(r.Pods) == 0 {
		fmt.Fprintln(w, "\nNo pod changes.")
		return nil
	}
	// One block per pod, folded to tableWidth: the pod, its node, the
	// change and the policies, then its outcome now and with the draft.
	fmt.Fprintln(w, "\nPods that change:")
	for i := range r.Pods {
		p := &r.Pods[i]
		head := fmt.Sprintf("%s: %s", p.Pod, p.Change)
		if p.Node != "" {
			head = fmt.Sprintf("%s on %s: %s", p.Pod, p.Node, p.Change)
		}
		if policies := podPolicies(p); policies != "" {
			head += " (" + policies + ")"
		}
		writeWrapped(w, 2, 6, head)
		writeWrapped(w, 6, 8, "now: "+outcome(p.Now))
		writeWrapped(w, 6, 8, "with the draft: "+outcome(p.Draft))
	}
	printWhy(w, r)
	printRemediation(w, r)
	return nil
}

// printGroups prints the pod groups' changes, and the groups that change.
func printGroups(w io.Writer, r *impact.Report) error {
	if r.Summary.Groups == nil || len(r.Summary.Groups.ByChange) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nPod group changes:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHANGE\tGROUPS")
	for _, c := range impact.Changes {
		if n, ok := r.Summary.Groups.ByChange[c]; ok {
			fmt.Fprintf(tw, "  %s\t%d\n", c, n)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Groups) == 0 {
		fmt.Fprintln(w, "\nNo pod group changes.")
		return nil
	}
	// One block per group, as per pod (printImpact).
	fmt.Fprintln(w, "\nPod groups that change:")
	for i := range r.Groups {
		g := &r.Groups[i]
		head := fmt.Sprintf("%s: %s", g.Group, g.Change)
		if len(g.Policies) > 0 {
			head += " (" + strings.Join(g.Policies, ", ") + ")"
		}
		writeWrapped(w, 2, 6, head)
		writeWrapped(w, 6, 8, "now: "+g.Now.Outcome())
		writeWrapped(w, 6, 8, "with the draft: "+g.Draft.Outcome())
	}
	return nil
}

// draftLine says what the draft does to the policies.
func draftLine(r *impact.Report) string {
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
	case len(changes) == 0 && unchanged == 0:
		return "no SchedulingPolicy changes"
	case len(changes) == 0:
		return fmt.Sprintf("no SchedulingPolicy changes (%d unchanged)", unchanged)
	case unchanged > 0:
		return fmt.Sprintf("SchedulingPolicy %s (%d unchanged)", strings.Join(changes, ", "), unchanged)
	default:
		return "SchedulingPolicy " + strings.Join(changes, ", ")
	}
}

// paramsLine says what the draft does to params objects, and which
// policies read each; empty when it touches none.
func paramsLine(r *impact.Report) string {
	parts := make([]string, 0, len(r.Params))
	for i := range r.Params {
		c := &r.Params[i]
		readers := "read by no policy"
		if len(c.Policies) > 0 {
			readers = "read by " + strings.Join(c.Policies, ", ")
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", c.Object, c.Change, readers))
	}
	return strings.Join(parts, "; ")
}

// podsLine counts the pods evaluated and left out.
func podsLine(sum *impact.Summary) string {
	groups := ""
	if sum.GroupMembers > 0 {
		groups = fmt.Sprintf("; %d pending in pod groups, evaluated with their group", sum.GroupMembers)
	}
	return fmt.Sprintf("%d pending and %d bound of the scheduler's profiles%s; %d not affected (no changed policy or params object applies to them); %d of other schedulers, not evaluated",
		sum.Pending, sum.Bound, groups, sum.NotAffected, sum.OtherSchedulers)
}

// podPolicies are the policies behind a pod's change, and the params
// objects they read that changed.
func podPolicies(p *impact.PodImpact) string {
	out := strings.Join(p.Policies, ", ")
	if len(p.Params) > 0 {
		out += " (params " + strings.Join(p.Params, ", ") + ")"
	}
	return out
}

// printRemediation prints what the draft's spec.remediation would do to
// the pods the draft would make drift (evicted-would-not-return).
func printRemediation(w io.Writer, r *impact.Report) {
	header := false
	for i := range r.Pods {
		rem := r.Pods[i].Remediation
		if rem == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nRemediation of the pods the draft would make drift:")
			header = true
		}
		what := "would evict"
		if !rem.WouldEvict {
			what = "would not evict: " + string(rem.NotEvicted)
		}
		fmt.Fprintf(w, "  %s: %s %s (%s)\n", r.Pods[i].Pod, rem.Policy, what, rem.Budget)
	}
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
			name := pr.Name
			if pr.EnforcedBy != "" {
				// Which enforcement applied to the pod, and why.
				name += " (" + pr.Enforcement + " by " + pr.EnforcedBy + ")"
			}
			if msg := pr.CompileError + pr.MatchError; msg != "" {
				writeWrapped(w, 2, 6, fmt.Sprintf("%s: SchedulingPolicy %s: %s", p.Pod, name, msg))
			}
			rules := map[string][]dryrun.RuleResult{"preEnqueue": pr.PreEnqueue, "filters": pr.Filters[p.Node]}
			for _, point := range []string{"preEnqueue", "filters"} {
				for _, v := range rules[point] {
					writeWrapped(w, 2, 6, fmt.Sprintf("%s: SchedulingPolicy %s, %s/%s: %s", p.Pod, name, point, v.Rule, verdict(v)))
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
	keys := slices.Sorted(maps.Keys(counts))
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
		out := string(o.State) + ": " + o.Reason
		if p := o.Preemption; p != nil {
			out += "; " + preemptionLine(p)
		}
		return out
	}
}

// preemptionLine says what preemption would do, on one line.
func preemptionLine(p *dryrun.PreemptionResult) string {
	out := "preemption would not place it: " + p.Reason
	if p.Node != "" {
		out = fmt.Sprintf("preemption would nominate %s, evicting %s", p.Node, strings.Join(p.Victims, ", "))
		if len(p.Protected) > 0 {
			out += "; protected: " + strings.Join(p.Protected, "; ")
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
