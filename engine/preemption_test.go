package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

// ownTenant: a preemptor may evict pods of its own namespace, and of
// namespaces labelled batch, only.
const ownTenant = "victim.metadata.namespace == pod.metadata.namespace || victimNamespaceObject.metadata.?labels[?'tier'].orValue('') == 'batch'"

func preemptionPolicy(failurePolicy schedv1alpha1.FailurePolicyType, rules ...schedv1alpha1.VictimRule) *schedv1alpha1.SchedulingPolicy {
	return &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-preemption"},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			FailurePolicy: failurePolicy,
			Preemption:    &schedv1alpha1.PreemptionRules{Victims: rules},
		},
	}
}

func TestVictimRuleCompileErrors(t *testing.T) {
	c := NewCompiler(testEnv(t))
	tests := map[string]struct {
		expression string
		want       string
	}{
		"not bool":      {expression: "victim.metadata.name", want: "spec.preemption.victims[1].expression: Invalid value: \"victim.metadata.name\": must evaluate to bool, but evaluates to string"},
		"no such field": {expression: "victim.spec.zone == ''", want: "spec.preemption.victims[1].expression: Invalid value: \"victim.spec.zone == ''\": compilation failed: ERROR: <input>:1:12: undefined field 'zone'"},
		"no params":     {expression: "params.data['x'] == ''", want: "spec.preemption.victims[1].expression: Invalid value: \"params.data['x'] == ''\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params'"},
		"no nodeInfo":   {expression: "nodeInfo.pods.size() > 0", want: "spec.preemption.victims[1].expression: Invalid value: \"nodeInfo.pods.size() > 0\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'nodeInfo'"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(preemptionPolicy("", schedv1alpha1.VictimRule{Name: "ok", Expression: ownTenant},
				schedv1alpha1.VictimRule{Name: "bad", Expression: tc.expression}), CompileOptions{})
			if len(p.Errors) != 1 {
				t.Fatalf("want one error, got %v", p.Errors)
			}
			if got := p.Errors[0].Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error:\n got %s\nwant prefix %s", got, tc.want)
			}
		})
	}
}

// TestVictim: the victim rules read the preemptor, the victim, both
// namespaces and the node; a false rule protects the victim with its
// message; an error protects it under Fail and is skipped under Ignore.
func TestVictim(t *testing.T) {
	env := testEnv(t)
	c := NewCompiler(env)
	conv := NewConverter(env, 0)
	teamA, teamB := makeNamespace("team-a", nil), makeNamespace("team-b", nil)
	batch := makeNamespace("batch", map[string]string{"tier": "batch"})
	node := makeNode("n1", map[string]string{"pool": "shared"})
	preemptor := makePod("team-a", "urgent", nil)
	in, err := conv.Pod(preemptor, teamA)
	if err != nil {
		t.Fatal(err)
	}
	victim := func(ns string) *VictimInput {
		t.Helper()
		namespaces := map[string]*corev1.Namespace{"team-a": teamA, "team-b": teamB, "batch": batch}
		v, err := conv.Victim(in, makePod(ns, "running", nil), namespaces[ns], node)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	rules := []schedv1alpha1.VictimRule{
		{Name: "own-tenant", Expression: ownTenant, Message: "another tenant's pod"},
		{Name: "shared-pool", Expression: "node.metadata.labels['pool'] == 'shared'"},
	}
	p := c.Compile(preemptionPolicy("", rules...), CompileOptions{})
	if len(p.Errors) > 0 {
		t.Fatal(p.Errors)
	}
	ctx := context.Background()
	for ns, want := range map[string]Verdict{"team-a": Pass, "batch": Pass, "team-b": Reject} {
		d := p.Victim(ctx, victim(ns))
		if d.Verdict != want {
			t.Errorf("victim in %s: %v (%s), want %v", ns, d.Verdict, d.String(), want)
		}
	}
	d := p.Victim(ctx, victim("team-b"))
	if got, want := Protection(victim("team-b").Victim, &d), "pod team-b/running protected by SchedulingPolicy tenant-preemption, rule preemption.victims/own-tenant: another tenant's pod"; got != want {
		t.Errorf("Protection:\n got %s\nwant %s", got, want)
	}

	// The victim's namespace and node are converted when a rule reads
	// them: a victim whose namespace is not known passes a rule over
	// namespaces' names, and fails (Error under Fail) one that reads
	// victimNamespaceObject.
	unknown, err := conv.Victim(in, makePod("gone", "running", nil), nil, node)
	if err != nil {
		t.Fatal(err)
	}
	byName := c.Compile(preemptionPolicy(schedv1alpha1.Fail, schedv1alpha1.VictimRule{Name: "names", Expression: "victim.metadata.namespace != pod.metadata.namespace"}), CompileOptions{})
	if d := byName.Victim(ctx, unknown); d.Verdict != Pass {
		t.Errorf("unknown namespace, rule over names: %v (%s), want Pass", d.Verdict, d.String())
	}
	if d := p.Victim(ctx, unknown); d.Verdict != Error || d.Err == nil || !strings.Contains(d.Err.Error(), `the victim's namespace "gone" is not known`) {
		t.Errorf("unknown namespace, rule reading it: %v (%s), want Error naming the namespace", d.Verdict, d.String())
	}
	if unknown.nodeVal != nil {
		t.Error("the node was converted for rules that do not read it")
	}

	failing := schedv1alpha1.VictimRule{Name: "fails", Expression: "victim.metadata.labels['missing'] == 'x'"}
	for fp, want := range map[schedv1alpha1.FailurePolicyType]Verdict{schedv1alpha1.Fail: Error, schedv1alpha1.Ignore: Pass} {
		p := c.Compile(preemptionPolicy(fp, failing), CompileOptions{})
		if d := p.Victim(ctx, victim("team-a")); d.Verdict != want {
			t.Errorf("failurePolicy %s: %v, want %v", fp, d.Verdict, want)
		}
	}
}

// TestPreemptionSample: the shipped sample compiles, protects another
// tenant's production pod and lets the preemptor evict its own pods and
// batch pods.
func TestPreemptionSample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "config", "samples", "preemption", "tenant-preemption.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var policy schedv1alpha1.SchedulingPolicy
	if err := yaml.UnmarshalStrict(data, &policy); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	p := NewCompiler(env).Compile(&policy, CompileOptions{})
	if len(p.Errors) > 0 || !p.HasVictimRules() {
		t.Fatalf("sample: errors %v, victim rules %v", p.Errors, p.HasVictimRules())
	}
	conv := NewConverter(env, 0)
	tenant := map[string]string{"celsched.io/tenant": "a"}
	in, err := conv.Pod(makePod("team-a", "urgent", nil), makeNamespace("team-a", tenant))
	if err != nil {
		t.Fatal(err)
	}
	namespaces := map[string]*corev1.Namespace{
		"team-a": makeNamespace("team-a", tenant),
		"batch":  makeNamespace("batch", map[string]string{"celsched.io/tier": "batch"}),
		"team-b": makeNamespace("team-b", map[string]string{"celsched.io/tenant": "b", "celsched.io/environment": "production"}),
		"dev":    makeNamespace("dev", map[string]string{"celsched.io/tenant": "c"}),
		// Batch in production: production wins.
		"reports": makeNamespace("reports", map[string]string{"celsched.io/tier": "batch", "celsched.io/environment": "production"}),
	}
	want := map[string]string{"team-a": "", "batch": "", "team-b": "own-namespace-or-batch", "dev": "own-namespace-or-batch",
		"reports": "never-another-tenants-production"}
	for ns, rule := range want {
		v, err := conv.Victim(in, makePod(ns, "running", nil), namespaces[ns], makeNode("n1", nil))
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Victim(context.Background(), v); d.Rule != rule {
			t.Errorf("victim in %s: rule %q refused (%s), want %q", ns, d.Rule, d.String(), rule)
		}
	}
}

// TestImportance: spec.preemption.importance reads the pod and its
// namespace, gives a number, is checked at compile time with its field
// path (a bool or a string, or node, which it cannot read), and fails at run time
// without taking a value.
func TestImportance(t *testing.T) {
	env := testEnv(t)
	c := NewCompiler(env)
	conv := NewConverter(env, 0)
	policy := func(expression string) *CompiledPolicy {
		return c.Compile(&schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "keep"},
			Spec: schedv1alpha1.SchedulingPolicySpec{Preemption: &schedv1alpha1.PreemptionRules{Importance: expression}}}, CompileOptions{})
	}
	for expression, want := range map[string]string{
		"pod.metadata.name == 'x'":    "spec.preemption.importance",
		"node.metadata.labels.size()": "spec.preemption.importance",
		"pod.metadata.labels['tier']": "spec.preemption.importance",
	} {
		p := policy(expression)
		got := ""
		if len(p.Errors) > 0 {
			got = p.Errors[0].Field
		}
		if got != want {
			t.Errorf("%q: errors %v, want one at %q", expression, p.Errors, want)
		}
	}
	in, err := conv.Pod(makePod("db", "postgres", map[string]string{"tier": "data"}), makeNamespace("db", map[string]string{"critical": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	p := policy("(namespaceObject.metadata.labels['critical'] == 'true' ? 10.0 : 0.0) + (pod.metadata.labels['tier'] == 'data' ? 5.5 : 0.0)")
	if len(p.Errors) > 0 || !p.HasImportance() {
		t.Fatalf("errors %v, importance %v", p.Errors, p.HasImportance())
	}
	if got, err := p.Importance(context.Background(), in); err != nil || got != 15.5 {
		t.Errorf("Importance = %v, %v; want 15.5", got, err)
	}
	if _, err := policy("pod.metadata.labels['missing'] == 'x' ? 1 : 0").Importance(context.Background(), in); err == nil {
		t.Error("an importance that fails gave a value")
	}
	if policy("").HasImportance() {
		t.Error("a policy without importance has one")
	}
}

// TestVictimRulesUntracked: a victim rule whose worst case is within the
// limit of one evaluation (the tenant rules over names and labels) runs
// without runtime cost tracking, as pod filters do; one over a list of
// unbounded size stays tracked.
func TestVictimRulesUntracked(t *testing.T) {
	c := NewCompiler(testEnv(t))
	for expression, bounded := range map[string]bool{
		ownTenant: true,
		"victim.spec.containers.all(c, c.image.startsWith('registry.example.com/'))": false,
	} {
		p := c.Compile(preemptionPolicy("", schedv1alpha1.VictimRule{Name: "r", Expression: expression}), CompileOptions{})
		if len(p.Errors) > 0 || len(p.victimRules) != 1 {
			t.Fatalf("%q: %v", expression, p.Errors)
		}
		if _, ok := p.victimRules[0].prg.(*celcost.Bounded); ok != bounded {
			t.Errorf("%q: bounded %v, want %v (%T)", expression, ok, bounded, p.victimRules[0].prg)
		}
	}
}
