package analyze

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"

	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/test/builder"
)

// TestRunCountsViolations: on the generated cluster of the impact
// benchmarks, the pods that analyze finds running in violation of
// home-zones (no zone c unless at home there) are exactly the bound pods
// on zone-c nodes of namespaces at home elsewhere, counted here from the
// objects; and two runs (classes evaluated in parallel) agree.
func TestRunCountsViolations(t *testing.T) {
	c := builder.LargeCluster(90, 600, 60)
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{}
	for _, n := range c.Nodes {
		zone[n.Name] = n.Labels[corev1.LabelTopologyZone]
	}
	home := map[string]string{}
	for _, ns := range c.Namespaces {
		home[ns.Name] = ns.Labels["zone"]
	}
	want := 0
	for _, p := range c.Pods {
		if p.Spec.NodeName != "" && zone[p.Spec.NodeName] == "c" && home[p.Namespace] != "c" {
			want++
		}
	}
	if want == 0 {
		t.Fatal("the generated cluster has no violations to find")
	}
	run := func() *Report {
		r, err := Run(context.Background(), Input{Input: source.Input{Nodes: c.Nodes, Namespaces: c.Namespaces, Pods: c.Pods, Policies: c.Live, Config: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run()
	got := 0
	for _, f := range r.Findings {
		if f.Kind == RunningInViolation {
			if len(f.Policies) != 1 || f.Policies[0] != "home-zones" {
				t.Errorf("a violation of %v, want home-zones: %+v", f.Policies, f)
			}
			got += f.Pods
		}
	}
	if got != want {
		t.Errorf("%d pods found running in violation, want %d", got, want)
	}
	if again := run(); len(again.Findings) != len(r.Findings) || again.Summary.Classes != r.Summary.Classes {
		t.Errorf("a second run found %d findings in %d classes, the first %d in %d", len(again.Findings), again.Summary.Classes, len(r.Findings), r.Summary.Classes)
	}
}

// TestRunBlamesCauses: analyze names what refuses, as the run's record
// says. A pod whose own nodeSelector picks a node a policy refuses is a
// no-feasible-node class whose evidence names the built-in plugins' part
// (the node they leave) and the nodes the policy admits: not a policy
// that "refuses every node", nor params-mismatch. A policy whose match
// reads the pod's scheduling group, with GenericWorkload off, matches
// nothing because of the gate, and the finding says so rather than
// advising to delete it.
func TestRunBlamesCauses(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	node := func(name, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pinned", Labels: map[string]string{"app": "pinned"}},
		Spec: corev1.PodSpec{SchedulerName: "celsched", NodeSelector: map[string]string{corev1.LabelHostname: "node-b3"},
			Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("zone-a").NamespaceLabels(map[string]string{"tenant": "a"}).
			FilterMsg("zone-a", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') == 'a'", "not zone a", "").Obj(),
		builder.MakePolicy("gangs-only").Condition("in-a-group", "has(pod.spec.schedulingGroup)").Filter("any", "true").Obj(),
	}
	r, err := Run(context.Background(), Input{Input: source.Input{
		Nodes:      []*corev1.Node{node("node-a1", "a"), node("node-a2", "a"), node("node-b3", "b")},
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tenant": "a"}}}},
		Pods:       []*corev1.Pod{pod}, Policies: policies, Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	var noNode, nothing []Finding
	for _, f := range r.Findings {
		switch f.Kind {
		case ParamsMismatch:
			t.Errorf("params-mismatch for a pod that selects its own node: %+v", f)
		case NoFeasibleNode:
			noNode = append(noNode, f)
		case MatchesNothing:
			nothing = append(nothing, f)
		}
	}
	want := "the built-in plugins (the pods' own node selector, affinity and tolerations, taints, resources) leave 1 node(s) (node-b3), and zone-a refuses it: " +
		"node(s) rejected by SchedulingPolicy zone-a, rule zone-a: not zone a; zone-a admits 2 node(s) (node-a1, node-a2), which the built-in plugins refuse"
	if len(noNode) != 1 || noNode[0].Evidence != want || strings.Contains(noNode[0].Evidence, "refuses every node") {
		t.Errorf("no-feasible-node findings %+v, want one with evidence %q", noNode, want)
	}
	if len(nothing) != 1 || nothing[0].Policies[0] != "gangs-only" ||
		!strings.Contains(nothing[0].Evidence, "its match reads pod.spec.schedulingGroup, which is empty while the feature gate GenericWorkload is off") ||
		strings.Contains(nothing[0].Suggestion, "delete") {
		t.Errorf("matches-nothing findings %+v, want gangs-only's, naming the gate, without advice to delete it", nothing)
	}
}

// TestCrossTenantPreemption: a namespace whose pending pod outranks
// another namespace's running pod is reported when no enforced victim
// rule applies to its pods, and not once one does (nor when it does not
// outrank anyone).
func TestCrossTenantPreemption(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	withPriority := func(p *corev1.Pod, priority int32) *corev1.Pod {
		p.Spec.Priority = &priority
		return p
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelHostname: "n1"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}}}
	mk := func(ns, name, nodeName string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("uid-" + ns + "-" + name)},
			Spec: corev1.PodSpec{SchedulerName: "celsched", NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
	}
	pods := []*corev1.Pod{withPriority(mk("team-a", "urgent", ""), 100), withPriority(mk("team-b", "web", "n1"), 10), withPriority(mk("team-c", "low", ""), 5)}
	run := func(policies ...*schedv1alpha1.SchedulingPolicy) []Finding {
		t.Helper()
		r, err := Run(context.Background(), Input{Input: source.Input{Nodes: []*corev1.Node{node}, Pods: pods, Policies: policies, Config: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		var out []Finding
		for _, f := range r.Findings {
			if f.Kind == CrossTenantPreemption {
				out = append(out, f)
			}
		}
		return out
	}
	got := run()
	if len(got) != 1 || got[0].Subject != "namespace team-a" || !strings.Contains(got[0].Evidence, "team-b 1") {
		t.Fatalf("without a victim rule: %+v, want namespace team-a, which may evict team-b's pod", got)
	}
	fence := builder.MakePolicy("own-tenant").Victim("own", "victim.metadata.namespace == pod.metadata.namespace", "").Obj()
	if got := run(fence); len(got) != 0 {
		t.Errorf("with a victim rule: %+v, want none", got)
	}
	if got := run(builder.MakePolicy("own-tenant").Audit().Victim("own", "victim.metadata.namespace == pod.metadata.namespace", "").Obj()); len(got) != 1 {
		t.Errorf("with an Audit victim rule: %+v, want team-a reported (Audit protects nothing)", got)
	}
}

// TestRunPreemptionRefused: a pending pod of high priority that no node
// has room for is not "no node fits, no policy involved" when preemption
// would place it without the policies: its finding is preemption-refused,
// naming the policy whose victim rule protects the victim; with a rule
// that admits the victim there is no finding (preemption places it). A
// class whose pods all run is not reported for having no room for another.
func TestRunPreemptionRefused(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	node := builder.Node("n1", map[string]string{corev1.LabelHostname: "n1"})
	node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
	low, high := int32(0), int32(1000)
	pod := func(ns, name string, priority int32) *corev1.Pod {
		p := builder.Pod(ns, name, map[string]string{"app": name})
		builder.Requesting("800m")(p)
		p.Spec.Priority = &priority
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n1"}
		return p
	}
	victim := pod("other", "batch", low)
	victim.Spec.NodeName = "n1"
	pending := pod("team", "urgent", high)
	run := func(rule string) []Finding {
		t.Helper()
		policy := builder.MakePolicy("own-namespace").Victim("own-namespace", rule, "another namespace's pod").Obj()
		r, err := Run(context.Background(), Input{Input: source.Input{Nodes: []*corev1.Node{node},
			Namespaces: []*corev1.Namespace{builder.Namespace("team", nil), builder.Namespace("other", nil)},
			Pods:       []*corev1.Pod{victim, pending}, Policies: []*schedv1alpha1.SchedulingPolicy{policy}, Config: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Findings
	}
	findings := run("victim.metadata.namespace == pod.metadata.namespace")
	var refused []Finding
	for _, f := range findings {
		switch f.Kind {
		case PreemptionRefused:
			refused = append(refused, f)
		case NoNodeFits:
			t.Errorf("no-node-fits for %s: preemption would place the pending pod, and the victim runs", f.Subject)
		}
	}
	if len(refused) != 1 || len(refused[0].Policies) != 1 || refused[0].Policies[0] != "own-namespace" ||
		!strings.Contains(refused[0].Evidence, "evicting other/batch") || !strings.Contains(refused[0].Evidence, "protected by SchedulingPolicy own-namespace") {
		t.Errorf("findings %+v, want one preemption-refused naming own-namespace and the victim it protects", findings)
	}
	for _, f := range run("true") {
		if f.Kind == PreemptionRefused || f.Kind == NoNodeFits {
			t.Errorf("a rule that admits the victim: finding %+v", f)
		}
	}
}
