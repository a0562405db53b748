package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/source"
)

type evalOptions struct {
	// source is files only, a scenario: the params objects are taken as
	// they are.
	source source.Source
	output string
	why    bool
}

func newEvalCommand(s *streams) *cobra.Command {
	o := evalOptions{source: source.Source{Stdin: s.in, Files: source.Files{Scenario: true}}}
	cmd := &cobra.Command{
		Use:   "eval -f POLICIES --pod POD.yaml --nodes NODES.yaml [--namespace NS.yaml] [--pods-on-nodes PODS.yaml] [--params PARAMS.yaml] [--pod-groups PODGROUPS.yaml --group-pods PODS.yaml]",
		Short: "Evaluate a pod against policies and nodes, offline",
		Long: `eval places one pod as the scheduler would, without a cluster: it runs
kube-scheduler's framework in-process with the profile's built-in plugins and
the CEL plugins (no binding), and reports which policies match and why, the
preEnqueue verdict, each node's verdict and the plugin that rejected it, every
CEL filter and score rule per node, the feasible nodes and the ranking.

A pod of a pod group (spec.schedulingGroup.podGroupName) is placed with its
group when its PodGroup is given (--pod-groups) and the feature gate
GenericWorkload is on (--feature-gates): kube-scheduler itself places the
pod and the group's other pending members (--group-pods) all or nothing,
and the report says where, or which policy and rule refused each candidate
placement. A pod whose PodGroup is not given is held by kube-scheduler
until it exists; a note says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.source.Pod == "" || len(o.source.Files.Nodes) == 0 {
				return usageError("--pod and --nodes are required")
			}
			report, err := runEval(cmd.Context(), &o)
			if err != nil {
				return err
			}
			return printReport(s.out, report, o.output)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.source.Files.Policies, "filename", "f", nil, "SchedulingPolicy files or directories")
	f.StringVar(&o.source.Pod, "pod", "", "the pod (one document)")
	f.StringSliceVar(&o.source.Files.Nodes, "nodes", nil, "node files (documents or a List)")
	f.StringSliceVar(&o.source.Files.Namespaces, "namespace", nil, "namespace files (the pod's namespace; default: one with only its name label)")
	f.StringSliceVar(&o.source.Files.Pods, "pods-on-nodes", nil, "files of pods already on the nodes (spec.nodeName set)")
	f.StringSliceVar(&o.source.Files.Params, "params", nil, "files of params objects of parameterized policies (ConfigMaps, custom resources)")
	f.StringSliceVar(&o.source.Files.PodGroups, "pod-groups", nil, "files of PodGroups (scheduling.k8s.io/v1beta1): the pod's, when it is in one (default namespace: the pod's)")
	f.StringSliceVar(&o.source.GroupPods, "group-pods", nil, "files of the other pending members of the pod's group (spec.schedulingGroup.podGroupName, no spec.nodeName)")
	f.StringVar(&o.source.Config, "config", "", "KubeSchedulerConfiguration (default: the manager's built-in one)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.BoolVar(&o.why, "why", false, whyUsage)
	return cmd
}

// whyUsage describes --why of eval and explain.
const whyUsage = "for each rule that is false or fails, show its sub-expressions and their values"

func runEval(ctx context.Context, o *evalOptions) (*dryrun.Report, error) {
	if err := checkOutput(o.output); err != nil {
		return nil, err
	}
	in, err := o.source.Read(ctx)
	if err != nil {
		return nil, err
	}
	report, err := dryrun.Run(ctx, dryrun.Input{Policies: in.Policies, Pod: in.Pod, Namespaces: in.Namespaces, Nodes: in.Nodes,
		Pods: append(slices.Clone(in.Pods), in.GroupPods...), PodGroups: in.PodGroups, Config: in.Config, Params: in.Params, Why: o.why})
	if err != nil {
		return nil, err
	}
	report.Notes = append(in.Notes, report.Notes...)
	// What is not placed as a group: the pod's PodGroup not given, or
	// the gate off.
	pending, _ := dryrun.SplitGroups(in.PodGroups, append([]*corev1.Pod{in.Pod}, in.GroupPods...))
	report.Notes = append(report.Notes, pending.Notes("placed")...)
	if off := offNodes(in.Pods, in.Nodes); len(off) > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("ignored pods of --pods-on-nodes that are on none of the nodes: %s", strings.Join(off, ", ")))
	}
	return report, nil
}

// offNodes names the pods that are not bound to one of the nodes.
func offNodes(pods []*corev1.Pod, nodes []*corev1.Node) []string {
	var out []string
	for _, p := range pods {
		if !slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return n.Name == p.Spec.NodeName }) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// checkOutput accepts table, json, yaml and the extra formats a command
// prints.
func checkOutput(format string, extra ...string) error {
	formats := append([]string{"table", "json", "yaml"}, extra...)
	if !slices.Contains(formats, format) {
		return usageError(fmt.Sprintf("unknown output format %q: want %s or %s", format,
			strings.Join(formats[:len(formats)-1], ", "), formats[len(formats)-1]))
	}
	return nil
}

func printReport(w io.Writer, r *dryrun.Report, format string) error {
	if format != "table" {
		return printStructured(w, r, format)
	}
	printTable(w, r)
	return nil
}

// printStructured prints a report as JSON or YAML.
func printStructured(w io.Writer, r any, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	data, err := yaml.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func printTable(out io.Writer, r *dryrun.Report) {
	fmt.Fprintf(out, "Pod %s, scheduler %s\n", r.Pod, r.SchedulerName)
	fmt.Fprintln(out, "Plugins evaluated (kube-scheduler framework, no binding):")
	writeLabelled(out, 2, "PreEnqueue: ", strings.Join(r.Plugins.PreEnqueue, ", "))
	writeLabelled(out, 2, "Filter:     ", strings.Join(r.Plugins.Filter, ", "))
	writeLabelled(out, 2, "Score:      ", strings.Join(r.Plugins.Score, ", "))
	for _, n := range r.Plugins.NotEvaluated {
		writeLabelled(out, 2, "not evaluated: ", n)
	}
	printNotes(out, r.Notes)

	fmt.Fprintln(out, "\nPolicies:")
	w := newTable(out)
	fmt.Fprintln(w, "  POLICY\tENFORCEMENT\tMATCHES\tWHY")
	for _, p := range r.Policies {
		why := p.Reason
		if p.CompileError != "" {
			why += ": " + p.CompileError
		}
		if p.MatchError != "" {
			why += ": " + p.MatchError
		}
		enforcement := p.Enforcement
		if p.EnforcedBy != "" {
			enforcement += " (" + p.EnforcedBy + ")"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", p.Label(), enforcement, yesNo(p.Matched), why)
	}
	_ = w.Flush()

	switch {
	case r.PreEnqueue != nil:
		fmt.Fprintln(out)
		writeWrapped(out, 0, 4, fmt.Sprintf("PreEnqueue: the pod is held by %s: %s", r.PreEnqueue.Plugin, r.PreEnqueue.Message))
	case r.PreFilter != nil:
		fmt.Fprintln(out)
		writeWrapped(out, 0, 4, fmt.Sprintf("PreFilter: the pod is rejected by %s: %s", r.PreFilter.Plugin, r.PreFilter.Message))
	default:
		fmt.Fprintln(out, "\nPreEnqueue: the pod enters the scheduling queue")
	}

	if r.PreEnqueue != nil {
		fmt.Fprintln(out, "\nNodes: not evaluated by the scheduler while the pod is held (the CEL rules below show what the policies would say)")
		printRules(out, r)
		printGroup(out, r.Group)
		return
	}
	fmt.Fprintln(out, "\nNodes:")
	w = newTable(out)
	fmt.Fprintln(w, "  NODE\tFEASIBLE\tSCORE\tREJECTED BY\tREASON")
	// A reason longer than a column's room is named by a number and given
	// whole below the table (nodes refused alike share one).
	var reasons []string
	for _, n := range r.Nodes {
		var by, reason, score string
		if n.RejectedBy != nil {
			by, reason = n.RejectedBy.Plugin, n.RejectedBy.Message
		}
		if len(reason) > maxReasonColumn {
			i := slices.Index(reasons, reason)
			if i < 0 {
				reasons = append(reasons, reason)
				i = len(reasons) - 1
			}
			reason = fmt.Sprintf("[%d]", i+1)
		}
		if n.Feasible {
			score = fmt.Sprint(n.Score)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", n.Name, yesNo(n.Feasible), score, by, reason)
	}
	_ = w.Flush()
	for i, reason := range reasons {
		writeLabelled(out, 2, fmt.Sprintf("[%d] ", i+1), reason)
	}

	printRules(out, r)

	fmt.Fprintf(out, "\nFeasible: %s\n", orNone(strings.Join(r.Feasible, ", ")))
	ranking := make([]string, len(r.Ranking))
	for i, n := range r.Ranking {
		ranking[i] = fmt.Sprintf("%s (%d)", n.Node, n.Score)
	}
	fmt.Fprintf(out, "Ranking:  %s\n", orNone(strings.Join(ranking, ", ")))
	printPreemption(out, r.Preemption)
	printGroup(out, r.Group)
}

// maxReasonColumn is the longest reason the Nodes table shows in its
// column; longer ones are given below it.
const maxReasonColumn = 50

// printPreemption says what kube-scheduler's preemption would do for a
// pod no node fits.
func printPreemption(out io.Writer, p *dryrun.PreemptionResult) {
	if p == nil {
		return
	}
	if p.Node != "" {
		fmt.Fprintf(out, "Preemption: would nominate %s, evicting %s\n", p.Node, strings.Join(p.Victims, ", "))
	} else {
		fmt.Fprintf(out, "Preemption: would not place the pod: %s\n", p.Reason)
	}
	if len(p.Protected) > 0 && p.Node != "" {
		fmt.Fprintln(out, "  protected by the victim rules:")
		for _, v := range p.Protected {
			fmt.Fprintf(out, "    %s\n", v)
		}
	}
}

// printGroup says what kube-scheduler does with the pod's group.
func printGroup(out io.Writer, g *dryrun.GroupResult) {
	if g == nil {
		return
	}
	fmt.Fprintln(out)
	writeWrapped(out, 0, 4, fmt.Sprintf("Pod group %s (minCount %d, %d pending): %s", g.Group, g.MinCount, len(g.Members), g.Outcome()))
	for _, m := range g.Members {
		writeWrapped(out, 2, 6, fmt.Sprintf("%s: %s", m.Pod, cmp.Or(m.Node, m.Reason)))
	}
	if len(g.Refused) > 0 {
		fmt.Fprintln(out, "Placements refused by the policies:")
		for _, p := range g.Refused {
			fmt.Fprintf(out, "  %s\n", p.Refusal)
		}
	}
}

func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		writeWrapped(w, 0, 6, "Note: "+n)
	}
}

// printRules prints every CEL rule of the matching policies.
func printRules(out io.Writer, r *dryrun.Report) {
	w := newTable(out)
	header := false
	row := func(format string, args ...any) {
		if !header {
			fmt.Fprintln(out, "\nCEL rules of the matching policies:")
			fmt.Fprintln(w, "  POLICY\tRULE\tNODE\tRESULT")
			header = true
		}
		fmt.Fprintf(w, format, args...)
	}
	why := func(v dryrun.RuleResult) {
		for _, s := range v.Why {
			row(wholeRow+" \t\t\t  %s\n", s)
		}
	}
	for _, p := range r.Policies {
		for _, v := range p.PreEnqueue {
			row("  %s\tpreEnqueue/%s\t-\t%s\n", p.Label(), v.Rule, verdict(v))
			why(v)
		}
		for _, n := range r.Nodes {
			for _, v := range p.Filters[n.Name] {
				row("  %s\tfilters/%s\t%s\t%s\n", p.Label(), v.Rule, n.Name, verdict(v))
				why(v)
			}
			for _, v := range p.Scores[n.Name] {
				result := fmt.Sprintf("raw %g", v.Raw)
				switch {
				case v.Error != "":
					result = "error: " + v.Error
				case v.Normalized != nil:
					result += fmt.Sprintf(", normalized %d", *v.Normalized)
				default:
					result += ", not normalized (infeasible)"
				}
				row("  %s\tscores/%s\t%s\t%s\n", p.Label(), v.Rule, n.Name, result)
			}
		}
	}
	_ = w.Flush()
}

func verdict(v dryrun.RuleResult) string {
	switch {
	case v.Error != "":
		return "error: " + v.Error
	case v.Passed:
		return "true"
	default:
		return "false: " + v.Message
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
