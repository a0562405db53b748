package app

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/celsched/celsched/api/manifest"
	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/cmd/celsched/dryrun"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

// PolicyTest is a test suite file (docs/testing-policies.md).
type PolicyTest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	// Policies are files or directories, relative to the suite file.
	Policies    []string          `json:"policies"`
	Nodes       []json.RawMessage `json:"nodes,omitempty"`
	Namespaces  []json.RawMessage `json:"namespaces,omitempty"`
	PodsOnNodes []json.RawMessage `json:"podsOnNodes,omitempty"`
	// Params are the params objects of parameterized policies, inline or
	// {file: path}.
	Params []json.RawMessage `json:"params,omitempty"`
	Cases  []TestCase        `json:"cases"`
}

// TestCase is one pod and what the scheduler should do with it.
type TestCase struct {
	Name      string            `json:"name"`
	Pod       json.RawMessage   `json:"pod"`
	Namespace json.RawMessage   `json:"namespace,omitempty"`
	Nodes     []json.RawMessage `json:"nodes,omitempty"`
	// Params, when given, replace the suite's params objects.
	Params []json.RawMessage `json:"params,omitempty"`
	Expect Expectation       `json:"expect"`
}

// Expectation is what a case checks; unset fields are not checked.
type Expectation struct {
	// PreEnqueue is Held or Queued.
	PreEnqueue string `json:"preEnqueue,omitempty"`
	// HoldMessage is a regular expression the hold message must match.
	HoldMessage string `json:"holdMessage,omitempty"`
	// Feasible are the feasible nodes, in any order.
	Feasible *[]string `json:"feasible,omitempty"`
	// Top is the node with the highest score (unique).
	Top string `json:"top,omitempty"`
	// Ranking is the feasible nodes from the highest score down.
	Ranking []string `json:"ranking,omitempty"`
	// Rejected maps a node to a regular expression its rejection message
	// ("<plugin>: <message>") must match.
	Rejected map[string]string `json:"rejected,omitempty"`
	// CompileError is a regular expression a policy's compile error must
	// match.
	CompileError string `json:"compileError,omitempty"`
	// Params maps a parameterized policy to the params objects it was
	// evaluated with ("ConfigMap team-a/placement"), in name order; an
	// empty list: none was found.
	Params map[string][]string `json:"params,omitempty"`
	// Enforcement maps a policy to its enforcement for the pod, as
	// "Enforce" or "Audit", followed, for a policy with
	// enforcementOverrides, by the field it comes from in parentheses:
	// "Audit (spec.enforcementOverrides[0])".
	Enforcement map[string]string `json:"enforcement,omitempty"`
}

const (
	testAPIVersion = "celsched.io/v1alpha1"
	testKind       = "PolicyTest"
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
	suites, err := loadSuites(s, paths)
	if err != nil {
		return inputError(err)
	}
	cfg, err := defaultconfig.Load("")
	if err != nil {
		return err
	}
	var results []caseResult
	for _, suite := range suites {
		for i, tc := range suite.Cases {
			start := time.Now()
			r, err := dryrun.Run(ctx, tc.Input(suite, cfg))
			if err != nil {
				return inputError(fmt.Errorf("%s: cases[%d] (%s): %w", suite.File, i, tc.Name, err))
			}
			failure, err := check(tc.Expect, r)
			if err != nil {
				return inputError(fmt.Errorf("%s: cases[%d] (%s): %w", suite.File, i, tc.Name, err))
			}
			results = append(results, caseResult{suite: suite.Name, name: tc.Name, failure: failure, duration: time.Since(start)})
		}
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
		return inputError(fmt.Errorf("no %s suites in %s", testKind, strings.Join(paths, ", ")))
	}
	fmt.Fprintf(s.out, "%d passed, %d failed\n", len(results)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, len(results))
	}
	return nil
}

// Suite is a PolicyTest suite with its files read and its objects decoded.
type Suite struct {
	Name, File string
	// PolicyFiles are the suite's policy files and directories.
	PolicyFiles []string
	Policies    []*schedv1alpha1.SchedulingPolicy
	Nodes       []*corev1.Node
	Namespaces  []*corev1.Namespace
	PodsOnNodes []*corev1.Pod
	Params      []*unstructured.Unstructured
	Cases       []*Case
}

// Case is a test case with its objects decoded: Namespaces and Nodes are
// the suite's with the case's own applied.
type Case struct {
	Name       string
	Pod        *corev1.Pod
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Params     []*unstructured.Unstructured
	Expect     Expectation
}

// Input is the dry-run input of the case.
func (c *Case) Input(s *Suite, cfg *schedulerconfig.KubeSchedulerConfiguration) dryrun.Input {
	return dryrun.Input{Policies: s.Policies, Pod: c.Pod, Namespaces: c.Namespaces, Nodes: c.Nodes, Pods: s.PodsOnNodes, Config: cfg, Params: c.Params}
}

// LoadSuites reads the PolicyTest suites of files and directories (what
// `celsched test` runs).
func LoadSuites(paths []string) ([]*Suite, error) {
	return loadSuites(&streams{}, paths)
}

func loadSuites(s *streams, paths []string) ([]*Suite, error) {
	docs, err := manifest.ReadDocuments(paths, s.in)
	if err != nil {
		return nil, err
	}
	var suites []*Suite
	for _, d := range docs {
		if apiVersion, kind := d.Kind(); kind != testKind || apiVersion != testAPIVersion {
			continue
		}
		spec := &PolicyTest{}
		if err := d.Decode(spec); err != nil {
			return nil, err
		}
		suite, err := loadSuite(s, d.File, spec)
		if err != nil {
			return nil, err
		}
		suites = append(suites, suite)
	}
	return suites, nil
}

func loadSuite(s *streams, file string, spec *PolicyTest) (*Suite, error) {
	dir := filepath.Dir(file)
	suite := &Suite{Name: spec.Metadata.Name, File: file}
	if suite.Name == "" {
		suite.Name = file
	}
	for _, p := range spec.Policies {
		suite.PolicyFiles = append(suite.PolicyFiles, filepath.Join(dir, p))
	}
	var err error
	if suite.Policies, err = manifest.ReadPolicies(s.in, suite.PolicyFiles); err != nil {
		return nil, err
	}
	if suite.Nodes, err = inlineObjects[*corev1.Node](s, dir, spec.Nodes, "Node"); err != nil {
		return nil, fmt.Errorf("%s: nodes: %w", file, err)
	}
	if suite.Namespaces, err = inlineObjects[*corev1.Namespace](s, dir, spec.Namespaces, "Namespace"); err != nil {
		return nil, fmt.Errorf("%s: namespaces: %w", file, err)
	}
	if suite.PodsOnNodes, err = inlineObjects[*corev1.Pod](s, dir, spec.PodsOnNodes, "Pod"); err != nil {
		return nil, fmt.Errorf("%s: podsOnNodes: %w", file, err)
	}
	if suite.Params, err = inlineParams(s, dir, spec.Params); err != nil {
		return nil, fmt.Errorf("%s: params: %w", file, err)
	}
	for i := range spec.Cases {
		tc, err := loadCase(s, dir, &spec.Cases[i], suite)
		if err != nil {
			return nil, fmt.Errorf("%s: cases[%d] (%s): %w", file, i, spec.Cases[i].Name, err)
		}
		suite.Cases = append(suite.Cases, tc)
	}
	return suite, nil
}

func loadCase(s *streams, dir string, spec *TestCase, suite *Suite) (*Case, error) {
	pods, err := inlineObjects[*corev1.Pod](s, dir, []json.RawMessage{spec.Pod}, "Pod")
	if err != nil || len(pods) != 1 {
		return nil, fmt.Errorf("pod: want one Pod: %v", err)
	}
	tc := &Case{Name: spec.Name, Pod: pods[0], Namespaces: suite.Namespaces, Nodes: suite.Nodes, Params: suite.Params, Expect: spec.Expect}
	if len(spec.Params) > 0 {
		if tc.Params, err = inlineParams(s, dir, spec.Params); err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
	}
	if tc.Pod.Namespace == "" {
		tc.Pod.Namespace = corev1.NamespaceDefault
	}
	if len(spec.Namespace) > 0 {
		ns, err := inlineObjects[*corev1.Namespace](s, dir, []json.RawMessage{spec.Namespace}, "Namespace")
		if err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
		tc.Namespaces = append(slices.DeleteFunc(slices.Clone(tc.Namespaces), func(n *corev1.Namespace) bool { return n.Name == ns[0].Name }), ns...)
	}
	if len(spec.Nodes) > 0 {
		if tc.Nodes, err = inlineObjects[*corev1.Node](s, dir, spec.Nodes, "Node"); err != nil {
			return nil, fmt.Errorf("nodes: %w", err)
		}
	}
	return tc, nil
}

// check compares a report with the expectations and describes every
// mismatch.
func check(e Expectation, r *dryrun.Report) (string, error) {
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

// inlineObjects decodes a list whose entries are objects or {file: path}.
func inlineObjects[T runtime.Object](s *streams, dir string, entries []json.RawMessage, kind string) ([]T, error) {
	var out []T
	for i, raw := range entries {
		var ref struct {
			File string `json:"file"`
		}
		if err := json.Unmarshal(raw, &ref); err == nil && ref.File != "" {
			objs, err := manifest.ReadObjects[T](s.in, []string{filepath.Join(dir, ref.File)}, kind)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		var node yamlv3.Node // the entry's JSON as a tree, for the strict check
		if err := yamlv3.Unmarshal(raw, &node); err != nil || len(node.Content) == 0 {
			return nil, fmt.Errorf("%s entry %d: %v", kind, i, err)
		}
		obj, err := manifest.DecodeOne[T](fmt.Sprintf("%s entry %d", kind, i), node.Content[0], raw, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// inlineParams decodes a list whose entries are params objects or
// {file: path}.
func inlineParams(s *streams, dir string, entries []json.RawMessage) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, raw := range entries {
		var ref struct {
			File string `json:"file"`
		}
		if err := json.Unmarshal(raw, &ref); err == nil && ref.File != "" {
			objs, err := manifest.ReadUnstructured(s.in, []string{filepath.Join(dir, ref.File)})
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		obj, err := manifest.Unstructured(raw, fmt.Sprintf("params entry %d", i), 1)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
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
