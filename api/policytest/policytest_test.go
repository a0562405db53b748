package policytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLoad: a suite's objects are decoded, inline or from files, relative
// to the suite file; a case's namespace and nodes replace the suite's; a
// misspelt field is an error at its line.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("policy.yaml", "apiVersion: scheduling.celsched.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec: {}\n")
	write("nodes.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\n")
	suite := write("suite.yaml", `apiVersion: celsched.io/v1alpha1
kind: PolicyTest
metadata: {name: s}
policies: [policy.yaml]
nodes: [{file: nodes.yaml}]
namespaces: [{apiVersion: v1, kind: Namespace, metadata: {name: ns, labels: {team: a}}}]
cases:
- name: suite objects
  pod: {apiVersion: v1, kind: Pod, metadata: {name: p1}}
  expect: {feasible: [n1]}
- name: own namespace and nodes
  pod: {apiVersion: v1, kind: Pod, metadata: {name: p2, namespace: ns}}
  namespace: {apiVersion: v1, kind: Namespace, metadata: {name: ns, labels: {team: b}}}
  nodes: [{apiVersion: v1, kind: Node, metadata: {name: n3}}]
  expect: {top: n3}
`)
	suites, err := Load(nil, []string{suite})
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 1 {
		t.Fatalf("%d suites, want 1", len(suites))
	}
	s := suites[0]
	type caseSummary struct {
		Name, Pod, Namespace string
		Nodes                []string
	}
	var got []caseSummary
	for _, c := range s.Cases {
		sum := caseSummary{Name: c.Name, Pod: c.Pod.Namespace + "/" + c.Pod.Name}
		for _, ns := range c.Namespaces {
			sum.Namespace += ns.Name + ":" + ns.Labels["team"]
		}
		for _, n := range c.Nodes {
			sum.Nodes = append(sum.Nodes, n.Name)
		}
		got = append(got, sum)
	}
	want := []caseSummary{
		{Name: "suite objects", Pod: "default/p1", Namespace: "ns:a", Nodes: []string{"n1", "n2"}},
		{Name: "own namespace and nodes", Pod: "ns/p2", Namespace: "ns:b", Nodes: []string{"n3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cases (-want +got):\n%s", diff)
	}
	if s.Name != "s" || len(s.Policies) != 1 || s.Policies[0].Name != "p" {
		t.Errorf("suite %s, policies %v: want s, [p]", s.Name, s.Policies)
	}
	if feasible := s.Cases[0].Expect.Feasible; feasible == nil || !cmp.Equal(*feasible, []string{"n1"}) {
		t.Errorf("the first case's expect.feasible: %v, want [n1]", feasible)
	}

	typo := write("typo.yaml", "apiVersion: celsched.io/v1alpha1\nkind: PolicyTest\ncasses: []\n")
	if _, err := Load(nil, []string{typo}); err == nil || !strings.Contains(err.Error(), `typo.yaml:3: casses: unknown field (did you mean "cases"?)`) {
		t.Errorf("a misspelt field: err %v", err)
	}
}
