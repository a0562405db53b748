package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/celsched/celsched/simulate/analyze"
	"github.com/celsched/celsched/simulate/source"
)

type analyzeOptions struct {
	source      source.Source
	failOn      []string
	output      string
	minFeasible int
}

func newAnalyzeCommand(s *streams) *cobra.Command {
	o := analyzeOptions{source: source.Source{Stdin: s.in, Kube: genericclioptions.NewConfigFlags(true)}}
	cmd := &cobra.Command{
		Use:   "analyze [--nodes F --pods F --namespaces F --pod-groups F --policies F --params F | --dump F] [--fail-on KINDS] [-o table|json|yaml|markdown]",
		Short: "What the policy set in force means as a whole for the cluster",
		Long: `analyze checks the SchedulingPolicies in force against the cluster, the
kubeconfig's or a dump in files, params objects included.
It groups the pods of the scheduler's profiles into classes (pods every
policy treats alike, and each namespace's plain pod that a policy applies
to), evaluates every policy on every node for each class, and reports:

  no-feasible-node      the policies whose filters together (with the
                        profile's built-in plugins: taints, cordons,
                        resources, the pods' own selectors) leave a class
                        of pods no node
  params-mismatch       a parameterized policy whose params (or their
                        absence, under Deny) leave a class no node
  group-unplaceable     a pod group the policies keep from being placed,
                        which kube-scheduler places without them: held
                        by a preEnqueue rule, or its placements refused
                        by placement filters or its members' nodes by
                        filters (it names the policies and rules)
  running-in-violation  bound pods on nodes the policies in force refuse
  always-false          a filter rule false on every node for every class
  always-true           a filter rule true on every node (it filters nothing)
  constant-score        a score rule with one value on every feasible node
  matches-nothing       a policy that selects no pod and no namespace's plain pod
  capacity              a class with fewer feasible nodes than --min-feasible;
                        it names the policies that refuse a node the
                        built-in plugins admit
  no-node-fits          a class of pods no node fits even without any
                        policy (it names none)
  group-no-placement    a pod group kube-scheduler places neither with
                        the policies nor without any (it names none)
  tenant-writable-input an input a tenant writes that moves a fence: a
                        params object that subjects bound in its
                        namespace may update (asked of a live cluster
                        with SubjectAccessReviews: it names them), or a
                        rule that a pod's author widens by setting pod
                        labels, annotations or spec (it names the fields)
  cross-tenant-preemption
                        a namespace whose pods may preempt pods of lower
                        priority in other namespaces: no enforced
                        preemption.victims rule applies to them

Feasibility is kube-scheduler's framework for the pods' profile, as the
scheduler runs it: a policy is named only when removing it would change
the answer. With the feature gate GenericWorkload on (--feature-gates, as
the manager's), the PodGroups with pending members are placed by
kube-scheduler itself, all or nothing, once with the policies in force and
once with none (each time all groups in one run: they compete for nodes as
in the scheduler's queue); with it off, a note says they are not analyzed
as groups. The per-class findings take their pods one by one either way.

--fail-on exits 1 when a finding of one of the kinds given is found.`,
		Example: `  celsched analyze
  celsched analyze --dump cluster.yaml --fail-on no-feasible-node,params-mismatch
  celsched analyze --dump cluster.yaml -o markdown >> "$GITHUB_STEP_SUMMARY"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limitMemory()
			report, err := runAnalyze(cmd.Context(), &o)
			if err != nil {
				return err
			}
			if err := printAnalyze(s.out, report, o.output); err != nil {
				return err
			}
			return analyzeFailOn(report, o.failOn)
		},
	}
	f := cmd.Flags()
	addClusterFlags(f, &o.source)
	f.StringSliceVar(&o.failOn, "fail-on", nil, "exit 1 when a finding has one of these kinds: "+kindNames())
	f.IntVar(&o.minFeasible, "min-feasible", 1, "report classes of pods with fewer feasible nodes than this (capacity)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json, yaml or markdown")
	return cmd
}

func kindNames() string {
	names := make([]string, len(analyze.Kinds))
	for i, k := range analyze.Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

func runAnalyze(ctx context.Context, o *analyzeOptions) (*analyze.Report, error) {
	if err := checkOutput(o.output, "markdown"); err != nil {
		return nil, err
	}
	for _, k := range o.failOn {
		if !slices.Contains(analyze.Kinds, analyze.Kind(k)) {
			return nil, usageError(fmt.Sprintf("--fail-on %q: want one of %s", k, kindNames()))
		}
	}
	if o.minFeasible < 1 {
		return nil, usageError("--min-feasible: want 1 or more")
	}
	in, err := o.source.Read(ctx)
	if err != nil {
		return nil, err
	}
	r, err := analyze.Run(ctx, analyze.Input{Input: *in, MinFeasible: o.minFeasible})
	if err != nil {
		return nil, err
	}
	r.Notes = append(in.Notes, r.Notes...)
	return r, nil
}

// analyzeFailOn returns an error (exit code 1) when a finding has one of
// the kinds.
func analyzeFailOn(r *analyze.Report, kinds []string) error {
	var found []string
	total := 0
	for _, k := range kinds {
		if n := r.Summary.ByKind[analyze.Kind(k)]; n > 0 {
			found = append(found, fmt.Sprintf("%s %d", k, n))
			total += n
		}
	}
	if total == 0 {
		return nil
	}
	return fmt.Errorf("%d finding(s) of --fail-on: %s", total, strings.Join(found, ", "))
}

func printAnalyze(w io.Writer, r *analyze.Report, format string) error {
	switch format {
	case "table":
	case "markdown":
		return printAnalyzeMarkdown(w, r)
	default:
		return printStructured(w, r, format)
	}
	writeWrapped(w, 0, 4, fmt.Sprintf("Analyzed %s: %s", analyzed(&r.Summary), findingCounts(r)))
	printNotes(w, r.Notes)
	if len(r.Findings) == 0 {
		return nil
	}
	// One block per finding, folded to tableWidth: its kind, policies,
	// subject and pods, then the evidence and the suggestion.
	for i := range r.Findings {
		f := &r.Findings[i]
		fmt.Fprintln(w)
		head := fmt.Sprintf("%s: %s", f.Kind, orDash(f.Subject))
		if policies := findingPolicies(f); policies != "" {
			head += " [" + policies + "]"
		}
		if f.Pods > 0 {
			head += " (" + plural(f.Pods, "pod") + ")"
		}
		writeWrapped(w, 0, 4, head)
		writeWrapped(w, 4, 6, f.Evidence)
		writeWrapped(w, 4, 7, "-> "+f.Suggestion)
	}
	return nil
}

func printAnalyzeMarkdown(w io.Writer, r *analyze.Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### celsched analyze: %s\n\n", findingCounts(r))
	fmt.Fprintf(&b, "%s.\n", analyzed(&r.Summary))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n> **Note:** %s\n", mdText(n))
	}
	if len(r.Findings) > 0 {
		b.WriteString("\n| kind | policies | subject | pods | evidence | suggestion |\n|---|---|---|---:|---|---|\n")
		for i := range r.Findings {
			f := &r.Findings[i]
			fmt.Fprintf(&b, "| **%s** | %s | %s | %s | %s | %s |\n", f.Kind, mdText(findingPolicies(f)), mdText(orDash(f.Subject)),
				orDash(podCount(f.Pods)), mdText(f.Evidence), mdText(f.Suggestion))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// analyzed says what analyze evaluated: nodes, pods in classes, pod
// groups (when placed as groups) and policies.
func analyzed(sum *analyze.Summary) string {
	groups := ""
	if sum.Groups > 0 {
		groups = ", " + plural(sum.Groups, "pod group")
	}
	return fmt.Sprintf("%d nodes, %d pods in %d classes%s, %d SchedulingPolicies", sum.Nodes, sum.Pods, sum.Classes, groups, sum.Policies)
}

// findingCounts says how many findings of each kind, in report order.
func findingCounts(r *analyze.Report) string {
	var parts []string
	for _, k := range analyze.Kinds {
		if n := r.Summary.ByKind[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "no findings"
	}
	return strings.Join(parts, ", ")
}

// findingPolicies names a finding's rules, or its policies.
func findingPolicies(f *analyze.Finding) string {
	if len(f.Rules) > 0 {
		return strings.Join(f.Rules, ", ")
	}
	return strings.Join(f.Policies, ", ")
}

func podCount(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}
