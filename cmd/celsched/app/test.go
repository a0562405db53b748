package app

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/celsched/celsched/api/policytest"
	"github.com/celsched/celsched/celplugins/featuregates"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/simulate/dryrun"
)

func newTestCommand(s *streams) *cobra.Command {
	var junit string
	cmd := &cobra.Command{
		Use:   "test DIR|FILE ...",
		Short: "Run policy test suites (kind PolicyTest) for CI",
		Long: `test runs every PolicyTest suite (*.yaml with kind PolicyTest) in the files
and directories given: each case evaluates a pod as eval does and checks the
expectations. It prints PASS or FAIL per case, with a diff for failures, and
exits 1 when a case fails. See docs/testing-policies.md.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTests(cmd.Context(), s, args, junit)
		},
	}
	cmd.Flags().StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	return cmd
}

type caseResult struct {
	suite, name string
	failure     string
	duration    time.Duration
}

func runTests(ctx context.Context, s *streams, paths []string, junit string) error {
	suites, err := policytest.Load(s.in, paths)
	if err != nil {
		return inputError(err)
	}
	var results []caseResult
	for _, suite := range suites {
		restore, err := suiteGates(suite)
		if err != nil {
			return inputError(fmt.Errorf("%s: featureGates: %w", suite.File, err))
		}
		defer restore()
		// The configuration is defaulted under the suite's gates, as the
		// manager's is under its own: which plugins a profile enables
		// (GangScheduling with GenericWorkload) follows them.
		cfg, err := defaultconfig.Load("")
		if err != nil {
			return err
		}
		for i, tc := range suite.Cases {
			start := time.Now()
			r, err := dryrun.Run(ctx, caseInput(suite, tc, cfg))
			if err != nil {
				return inputError(fmt.Errorf("%s: cases[%d] (%s): %w", suite.File, i, tc.Name, err))
			}
			failure, err := check(tc.Expect, r)
			if err != nil {
				return inputError(fmt.Errorf("%s: cases[%d] (%s): %w", suite.File, i, tc.Name, err))
			}
			results = append(results, caseResult{suite: suite.Name, name: tc.Name, failure: failure, duration: time.Since(start)})
		}
		restore()
	}
	failed := 0
	for _, r := range results {
		if r.failure == "" {
			fmt.Fprintf(s.out, "PASS  %s / %s\n", r.suite, r.name)
			continue
		}
		failed++
		fmt.Fprintf(s.out, "FAIL  %s / %s\n%s\n", r.suite, r.name, indent(r.failure))
	}
	if junit != "" {
		if err := writeJUnit(junit, results); err != nil {
			return err
		}
	}
	if len(results) == 0 {
		return inputError(fmt.Errorf("no %s suites in %s", policytest.Kind, strings.Join(paths, ", ")))
	}
	fmt.Fprintf(s.out, "%d passed, %d failed\n", len(results)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(results))
	}
	return nil
}

// caseInput is the dry-run input of a suite's case.
func caseInput(s *policytest.Suite, c *policytest.Case, cfg *schedulerconfig.KubeSchedulerConfiguration) dryrun.Input {
	in := dryrun.Input{Policies: s.Policies, Pod: c.Pod, Namespaces: c.Namespaces, Nodes: c.Nodes, Pods: s.PodsOnNodes, Config: cfg, Params: c.Params}
	if c.PodGroup != nil {
		in.PodGroups = []*schedulingv1beta1.PodGroup{c.PodGroup}
		in.Pods = append(slices.Clone(in.Pods), c.GroupPods...)
	}
	return in
}

// suiteGates sets the suite's feature gates in the process (the dry run's
// frameworks read the process's gates, celplugins/featuregates), and
// returns what sets them back as they were; it may be called more than
// once.
func suiteGates(s *policytest.Suite) (restore func(), err error) {
	if len(s.FeatureGates) == 0 {
		return func() {}, nil
	}
	before := make(map[string]bool, len(s.FeatureGates))
	for name := range s.FeatureGates {
		before[name] = utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(name))
	}
	if err := featuregates.Apply(featuregates.Settings{FeatureGates: s.FeatureGates}); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = featuregates.Apply(featuregates.Settings{FeatureGates: before}) }) }, nil
}

// checkGroup compares what kube-scheduler does with the pod's group with
// the expectations.
func checkGroup(e *policytest.GroupExpectation, g *dryrun.GroupResult, mismatch func(string, any, any), match func(string, string, string) error) error {
	if g == nil {
		mismatch("group (the case needs podGroup, and the suite featureGates GenericWorkload: true)", "a group", "none")
		return nil
	}
	if e.State != "" && e.State != string(g.State) {
		mismatch("group.state", e.State, string(g.State))
	}
	if e.Placement != "" && e.Placement != g.Placement {
		nodes := make([]string, len(g.Members))
		for i, m := range g.Members {
			nodes[i] = m.Pod + " on " + orNone(m.Node) + " " + m.Reason
		}
		mismatch("group.placement (members: "+strings.Join(nodes, ", ")+")", e.Placement, g.Placement)
	}
	if e.Reason != "" {
		if err := match("group.reason", e.Reason, g.Reason); err != nil {
			return err
		}
	}
	if e.Refused != nil {
		got := []string{}
		for _, p := range g.Refused {
			got = append(got, p.Placement)
		}
		if !slices.Equal(e.Refused, got) {
			mismatch("group.refused", e.Refused, got)
		}
	}
	return nil
}

// checkPreemption compares what preemption would do for the pod with the
// expectations.
func checkPreemption(e *policytest.PreemptionExpectation, p *dryrun.PreemptionResult, mismatch func(string, any, any)) {
	if p == nil {
		mismatch("preemption (the pod fits a node, or is held or rejected before Filter)", "a preemption", "none")
		return
	}
	node, why := p.Node, "nominated"
	if node == "" {
		node, why = "none", p.Reason
	}
	if e.Node != "" && e.Node != node {
		mismatch("preemption.node ("+why+")", e.Node, node)
	}
	if e.Victims != nil && !slices.Equal(e.Victims, p.Victims) {
		mismatch("preemption.victims", e.Victims, p.Victims)
	}
	if e.Protected != nil {
		got := []string{}
		for _, msg := range p.Protected {
			// "pod <namespace>/<name> protected by ..." (engine.Protection)
			if f := strings.Fields(msg); len(f) > 1 {
				got = append(got, f[1])
			}
		}
		slices.Sort(got)
		if !slices.Equal(e.Protected, got) {
			mismatch("preemption.protected", e.Protected, got)
		}
	}
}

// check compares a report with the expectations and describes every
// mismatch.
func check(e policytest.Expectation, r *dryrun.Report) (string, error) {
	var problems []string
	mismatch := func(what string, want, got any) {
		problems = append(problems, fmt.Sprintf("%s (-want +got):\n%s", what, cmp.Diff(want, got)))
	}
	match := func(what, pattern, got string) error {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return fmt.Errorf("expect.%s: %w", what, err)
		}
		if !re.MatchString(got) {
			problems = append(problems, fmt.Sprintf("%s: %q does not match %q", what, got, pattern))
		}
		return nil
	}
	if g := e.Group; g != nil {
		if err := checkGroup(g, r.Group, mismatch, match); err != nil {
			return "", err
		}
	}
	if e.Preemption != nil {
		checkPreemption(e.Preemption, r.Preemption, mismatch)
	}
	held := "Queued"
	if r.PreEnqueue != nil {
		held = "Held"
	}
	if e.PreEnqueue != "" && e.PreEnqueue != held {
		mismatch("preEnqueue", e.PreEnqueue, held)
	}
	if e.HoldMessage != "" {
		msg := ""
		if r.PreEnqueue != nil {
			msg = r.PreEnqueue.Message
		}
		if err := match("holdMessage", e.HoldMessage, msg); err != nil {
			return "", err
		}
	}
	if e.Feasible != nil {
		want := slices.Sorted(slices.Values(*e.Feasible))
		got := slices.Sorted(slices.Values(r.Feasible))
		if !slices.Equal(want, got) {
			msg := fmt.Sprintf("feasible: want %v, got %v", want, got)
			for _, name := range want {
				if n := r.Node(name); n != nil && n.RejectedBy != nil {
					msg += fmt.Sprintf("\n  %s: rejected by %s: %s", name, n.RejectedBy.Plugin, n.RejectedBy.Message)
				}
			}
			problems = append(problems, msg)
		}
	}
	ranking := make([]string, len(r.Ranking))
	for i, n := range r.Ranking {
		ranking[i] = n.Node
	}
	if e.Ranking != nil && !slices.Equal(e.Ranking, ranking) {
		mismatch("ranking", e.Ranking, r.Ranking)
	}
	if e.Top != "" {
		top := ""
		if len(r.Ranking) > 0 && (len(r.Ranking) == 1 || r.Ranking[0].Score > r.Ranking[1].Score) {
			top = r.Ranking[0].Node
		}
		if top != e.Top {
			mismatch("top (the unique highest score)", e.Top, r.Ranking)
		}
	}
	for node, pattern := range e.Rejected {
		got := "feasible"
		if n := r.Node(node); n == nil {
			got = "no such node"
		} else if n.RejectedBy != nil {
			got = n.RejectedBy.Plugin + ": " + n.RejectedBy.Message
		}
		if err := match("rejected["+node+"]", pattern, got); err != nil {
			return "", err
		}
	}
	for policy, want := range e.Params {
		got := []string{}
		for _, p := range r.Policies {
			if p.Name == policy && p.Params != "" {
				got = append(got, p.Params)
			}
		}
		if !slices.Equal(want, got) {
			mismatch("params["+policy+"]", want, got)
		}
	}
	for policy, want := range e.Enforcement {
		got := "not evaluated"
		for _, p := range r.Policies {
			if p.Name == policy {
				got = p.Enforcement
				if p.EnforcedBy != "" {
					got += " (" + p.EnforcedBy + ")"
				}
				break
			}
		}
		if got != want {
			mismatch("enforcement["+policy+"]", want, got)
		}
	}
	if e.CompileError != "" {
		var errs []string
		for _, p := range r.Policies {
			if p.CompileError != "" {
				errs = append(errs, p.CompileError)
			}
		}
		if err := match("compileError", e.CompileError, strings.Join(errs, "\n")); err != nil {
			return "", err
		}
	}
	return strings.Join(problems, "\n"), nil
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(s, "\n", "\n      ")
}

// JUnit XML, as CI systems read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Time    string        `xml:"time,attr"`
	Failure *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(path string, results []caseResult) error {
	var doc junitSuites
	index := map[string]int{}
	for _, r := range results {
		i, ok := index[r.suite]
		if !ok {
			i = len(doc.Suites)
			index[r.suite] = i
			doc.Suites = append(doc.Suites, junitSuite{Name: r.suite})
		}
		c := junitCase{Name: r.name, Time: fmt.Sprintf("%.3f", r.duration.Seconds())}
		if r.failure != "" {
			c.Failure = &junitFailure{Message: "expectation not met", Text: r.failure}
			doc.Suites[i].Failures++
		}
		doc.Suites[i].Tests++
		doc.Suites[i].Cases = append(doc.Suites[i].Cases, c)
	}
	data, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), data...), 0o644)
}
