// Package policytest is the format of celsched's policy test suites (kind
// PolicyTest, docs/testing-policies.md): the file's types, and Load, which
// reads suites with their policies and objects decoded. `celsched test`
// runs them; the integration tests run the same suites against the live
// scheduler.
package policytest

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/celsched/celsched/api/manifest"
	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// APIVersion and Kind are a suite file's.
const (
	APIVersion = "celsched.io/v1alpha1"
	Kind       = "PolicyTest"
)

// PolicyTest is a test suite file.
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
	// FeatureGates are kube-scheduler's feature gates the suite's cases
	// are evaluated with (as the manager's --feature-gates), for example
	// GenericWorkload for pod groups; the others keep the run's.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	Cases        []TestCase      `json:"cases"`
}

// TestCase is one pod and what the scheduler should do with it.
type TestCase struct {
	Name      string            `json:"name"`
	Pod       json.RawMessage   `json:"pod"`
	Namespace json.RawMessage   `json:"namespace,omitempty"`
	Nodes     []json.RawMessage `json:"nodes,omitempty"`
	// Params, when given, replace the suite's params objects.
	Params []json.RawMessage `json:"params,omitempty"`
	// PodGroup is the pod's PodGroup (scheduling.k8s.io/v1beta1), inline or
	// {file: path}, when the pod is a member (spec.schedulingGroup), and
	// GroupPods its other pending members: kube-scheduler places them
	// together, all or nothing (expect.group).
	PodGroup  json.RawMessage   `json:"podGroup,omitempty"`
	GroupPods []json.RawMessage `json:"groupPods,omitempty"`
	Expect    Expectation       `json:"expect"`
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
	// Group is what kube-scheduler does with the pod's group (the case's
	// podGroup; the workload feature gates on).
	Group *GroupExpectation `json:"group,omitempty"`
	// Preemption is what kube-scheduler's preemption would do for the
	// pod, which no node may fit (its spec.priority against the pods on
	// the nodes').
	Preemption *PreemptionExpectation `json:"preemption,omitempty"`
}

// PreemptionExpectation is what a case checks of preemption for a pod
// no node fits; unset fields are not checked.
type PreemptionExpectation struct {
	// Node is the node the pod would be nominated to, or "none" when
	// preemption cannot place it.
	Node string `json:"node,omitempty"`
	// Victims are the pods it would evict (namespace/name), in name
	// order.
	Victims []string `json:"victims,omitempty"`
	// Protected are the candidate victims the victim rules protected
	// (namespace/name), in name order.
	Protected []string `json:"protected,omitempty"`
}

// GroupExpectation is what a case checks of the pod's group; unset
// fields are not checked.
type GroupExpectation struct {
	// State is placed, unschedulable or held.
	State string `json:"state,omitempty"`
	// Placement is the topology domain a placed group is given.
	Placement string `json:"placement,omitempty"`
	// Reason is a regular expression the reason a group is not placed
	// must match.
	Reason string `json:"reason,omitempty"`
	// Refused are the placements the policies' placement filters refuse,
	// in name order.
	Refused []string `json:"refused,omitempty"`
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
	// FeatureGates are the suite's feature gates (PolicyTest.FeatureGates).
	FeatureGates map[string]bool
	Cases        []*Case
}

// Case is a test case with its objects decoded: Namespaces and Nodes are
// the suite's with the case's own applied.
type Case struct {
	Name       string
	Pod        *corev1.Pod
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Params     []*unstructured.Unstructured
	// PodGroup and GroupPods are the pod's group and its other pending
	// members; nil when the case has none.
	PodGroup  *schedulingv1beta1.PodGroup
	GroupPods []*corev1.Pod
	Expect    Expectation
}

// Load reads the PolicyTest suites of files and directories ("-" reads
// stdin); documents of other kinds are skipped. Every file is decoded
// strictly (package manifest).
func Load(stdin io.Reader, paths []string) ([]*Suite, error) {
	docs, err := manifest.ReadDocuments(paths, stdin)
	if err != nil {
		return nil, err
	}
	var suites []*Suite
	for _, d := range docs {
		if apiVersion, kind := d.Kind(); kind != Kind || apiVersion != APIVersion {
			continue
		}
		spec := &PolicyTest{}
		if err := d.Decode(spec); err != nil {
			return nil, err
		}
		suite, err := loadSuite(stdin, d.File, spec)
		if err != nil {
			return nil, err
		}
		suites = append(suites, suite)
	}
	return suites, nil
}

func loadSuite(stdin io.Reader, file string, spec *PolicyTest) (*Suite, error) {
	dir := filepath.Dir(file)
	suite := &Suite{Name: spec.Metadata.Name, File: file, FeatureGates: spec.FeatureGates}
	if suite.Name == "" {
		suite.Name = file
	}
	for _, p := range spec.Policies {
		suite.PolicyFiles = append(suite.PolicyFiles, filepath.Join(dir, p))
	}
	var err error
	if suite.Policies, err = manifest.ReadPolicies(stdin, suite.PolicyFiles); err != nil {
		return nil, err
	}
	if suite.Nodes, err = inlineObjects[*corev1.Node](stdin, dir, spec.Nodes, "Node"); err != nil {
		return nil, fmt.Errorf("%s: nodes: %w", file, err)
	}
	if suite.Namespaces, err = inlineObjects[*corev1.Namespace](stdin, dir, spec.Namespaces, "Namespace"); err != nil {
		return nil, fmt.Errorf("%s: namespaces: %w", file, err)
	}
	if suite.PodsOnNodes, err = inlineObjects[*corev1.Pod](stdin, dir, spec.PodsOnNodes, "Pod"); err != nil {
		return nil, fmt.Errorf("%s: podsOnNodes: %w", file, err)
	}
	if suite.Params, err = inlineParams(stdin, dir, spec.Params); err != nil {
		return nil, fmt.Errorf("%s: params: %w", file, err)
	}
	for i := range spec.Cases {
		tc, err := loadCase(stdin, dir, &spec.Cases[i], suite)
		if err != nil {
			return nil, fmt.Errorf("%s: cases[%d] (%s): %w", file, i, spec.Cases[i].Name, err)
		}
		suite.Cases = append(suite.Cases, tc)
	}
	return suite, nil
}

func loadCase(stdin io.Reader, dir string, spec *TestCase, suite *Suite) (*Case, error) {
	pods, err := inlineObjects[*corev1.Pod](stdin, dir, []json.RawMessage{spec.Pod}, "Pod")
	if err != nil || len(pods) != 1 {
		return nil, fmt.Errorf("pod: want one Pod: %v", err)
	}
	tc := &Case{Name: spec.Name, Pod: pods[0], Namespaces: suite.Namespaces, Nodes: suite.Nodes, Params: suite.Params, Expect: spec.Expect}
	if len(spec.Params) > 0 {
		if tc.Params, err = inlineParams(stdin, dir, spec.Params); err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
	}
	if tc.Pod.Namespace == "" {
		tc.Pod.Namespace = corev1.NamespaceDefault
	}
	if len(spec.Namespace) > 0 {
		ns, err := inlineObjects[*corev1.Namespace](stdin, dir, []json.RawMessage{spec.Namespace}, "Namespace")
		if err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
		tc.Namespaces = append(slices.DeleteFunc(slices.Clone(tc.Namespaces), func(n *corev1.Namespace) bool { return n.Name == ns[0].Name }), ns...)
	}
	if len(spec.Nodes) > 0 {
		if tc.Nodes, err = inlineObjects[*corev1.Node](stdin, dir, spec.Nodes, "Node"); err != nil {
			return nil, fmt.Errorf("nodes: %w", err)
		}
	}
	if len(spec.PodGroup) > 0 {
		groups, err := inlineObjects[*schedulingv1beta1.PodGroup](stdin, dir, []json.RawMessage{spec.PodGroup}, "PodGroup")
		if err != nil {
			return nil, fmt.Errorf("podGroup: %w", err)
		}
		tc.PodGroup = groups[0]
		if tc.PodGroup.Namespace == "" {
			tc.PodGroup.Namespace = tc.Pod.Namespace
		}
	}
	if tc.GroupPods, err = inlineObjects[*corev1.Pod](stdin, dir, spec.GroupPods, "Pod"); err != nil {
		return nil, fmt.Errorf("groupPods: %w", err)
	}
	for _, p := range tc.GroupPods {
		if p.Namespace == "" {
			p.Namespace = tc.Pod.Namespace
		}
	}
	if (tc.PodGroup == nil) != (spec.Expect.Group == nil) && spec.Expect.Group != nil {
		return nil, fmt.Errorf("expect.group: the case has no podGroup")
	}
	return tc, nil
}

// inlineObjects decodes a list whose entries are objects or {file: path}.
func inlineObjects[T runtime.Object](stdin io.Reader, dir string, entries []json.RawMessage, kind string) ([]T, error) {
	var out []T
	for i, raw := range entries {
		var ref struct {
			File string `json:"file"`
		}
		if err := json.Unmarshal(raw, &ref); err == nil && ref.File != "" {
			objs, err := manifest.ReadObjects[T](stdin, []string{filepath.Join(dir, ref.File)}, kind)
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
func inlineParams(stdin io.Reader, dir string, entries []json.RawMessage) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for i, raw := range entries {
		var ref struct {
			File string `json:"file"`
		}
		if err := json.Unmarshal(raw, &ref); err == nil && ref.File != "" {
			objs, err := manifest.ReadUnstructured(stdin, []string{filepath.Join(dir, ref.File)})
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
