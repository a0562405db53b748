package engine

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// overridePolicy is Audit by default, Audit in namespaces labelled
// spot-ok=true and Enforce in those labelled env=production; its filter
// rejects spot nodes.
func overridePolicy() *schedv1alpha1.SchedulingPolicy {
	return &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-spot", UID: "no-spot", Generation: 1, ResourceVersion: "1"},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			Enforcement:   schedv1alpha1.Audit,
			FailurePolicy: schedv1alpha1.Fail,
			EnforcementOverrides: []schedv1alpha1.EnforcementOverride{
				{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"spot-ok": "true"}}, Enforcement: schedv1alpha1.Audit},
				{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "production"}}, Enforcement: schedv1alpha1.Enforce},
			},
			Filters: []schedv1alpha1.Rule{{Name: "not-spot", Expression: "node.metadata.labels[?'capacity'].orValue('') != 'spot'"}},
		},
	}
}

// TestEnforcementOverrides: the first override that selects the pod's
// namespace gives the enforcement, spec.enforcement the rest, the strictest
// an unknown namespace; the decisions carry it, and the policy lists of two
// enforcements are apart, so that an outcome remembered for an Audit pod
// never serves an enforced one.
func TestEnforcementOverrides(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	registry := NewRegistry(NewCompiler(env))
	p := registry.Upsert(overridePolicy())
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	snapshot := registry.Snapshot()
	conv := NewConverter(env, 0)
	spot := makeNode("spot-1", map[string]string{"capacity": "spot"})
	node, err := conv.Node(spot, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ns          *corev1.Namespace
		enforcement schedv1alpha1.EnforcementAction
		by          string
	}{
		{makeNamespace("shop", map[string]string{"env": "production"}), schedv1alpha1.Enforce, "spec.enforcementOverrides[1]"},
		{makeNamespace("reports", map[string]string{"env": "production", "spot-ok": "true"}), schedv1alpha1.Audit, "spec.enforcementOverrides[0]"},
		{makeNamespace("staging", map[string]string{"env": "staging"}), schedv1alpha1.Audit, EnforcedBySpec},
		{nil, schedv1alpha1.Enforce, EnforcedByUnknownNamespace},
	}
	lists := map[*PolicyList]schedv1alpha1.EnforcementAction{}
	for _, tc := range cases {
		name := "unknown"
		if tc.ns != nil {
			name = tc.ns.Name
		}
		pod, err := conv.Pod(makePod(name, "web", nil), tc.ns)
		if err != nil {
			t.Fatal(err)
		}
		matches := snapshot.Match(context.Background(), pod, nil)
		if len(matches) != 1 {
			t.Fatalf("namespace %s: %d policies match, want 1", name, len(matches))
		}
		view := matches[0].Decision.Policy
		if view.Enforcement != tc.enforcement || view.EnforcedBy != tc.by || !view.HasOverrides() {
			t.Errorf("namespace %s: enforcement %s by %q, want %s by %q", name, view.Enforcement, view.EnforcedBy, tc.enforcement, tc.by)
		}
		if view.Base() != p {
			t.Errorf("namespace %s: the copy's Base is not the policy", name)
		}
		d := view.Filter(context.Background(), pod, node)
		if d.Verdict != Reject || d.Acts() != (tc.enforcement == schedv1alpha1.Enforce) {
			t.Errorf("namespace %s: the spot node's decision %v acts %v, want a rejection that acts only when enforced", name, d.Verdict, d.Acts())
		}
		list := snapshot.List(PointFilter, []*CompiledPolicy{view})
		if e, seen := lists[list]; seen && e != tc.enforcement {
			t.Errorf("namespace %s: shares a policy list with a namespace where the policy is %s", name, e)
		}
		lists[list] = tc.enforcement
	}
	if p.ForNamespace(makeNamespace("x", nil)) == p {
		t.Error("ForNamespace returned the policy itself, whose enforcement names no override")
	}
}

// TestEnforcementOverridesCompile: an override whose selector does not
// parse is a compile error with its field path, and the broken policy is
// enforced where any setting says Enforce; an override after one that
// selects every namespace is a warning; a policy without overrides is
// itself for every namespace.
func TestEnforcementOverridesCompile(t *testing.T) {
	t.Parallel()
	c := NewCompiler(testEnv(t))
	bad := overridePolicy()
	bad.Spec.EnforcementOverrides[1].NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}
	p := c.Compile(bad, CompileOptions{})
	if len(p.Errors) != 1 || p.Errors[0].Field != "spec.enforcementOverrides[1].namespaceSelector" {
		t.Fatalf("errors %v, want one at spec.enforcementOverrides[1].namespaceSelector", p.Errors)
	}
	if p.Enforcement != schedv1alpha1.Enforce || p.EnforcedBy != EnforcedByInvalidOverrides || p.ForNamespace(makeNamespace("dev", nil)) != p {
		t.Errorf("a policy whose overrides do not compile: %s by %q, want Enforce by %q for every namespace", p.Enforcement, p.EnforcedBy, EnforcedByInvalidOverrides)
	}

	shadowed := overridePolicy()
	shadowed.Spec.EnforcementOverrides[0].NamespaceSelector = metav1.LabelSelector{}
	p = c.Compile(shadowed, CompileOptions{})
	if len(p.Warnings) != 1 || p.Warnings[0].FieldRef != "spec.enforcementOverrides[1]" ||
		!strings.Contains(p.Warnings[0].Warning, "spec.enforcementOverrides[0] selects every namespace") {
		t.Errorf("warnings %+v, want one: override 1 never applies", p.Warnings)
	}
	if got := p.ForNamespace(makeNamespace("shop", map[string]string{"env": "production"})); got.EnforcedBy != "spec.enforcementOverrides[0]" {
		t.Errorf("an empty selector does not select every namespace: %q", got.EnforcedBy)
	}

	plain := overridePolicy()
	plain.Spec.EnforcementOverrides = nil
	p = c.Compile(plain, CompileOptions{})
	if p.ForNamespace(makeNamespace("shop", nil)) != p || p.HasOverrides() || p.EnforcedBy != EnforcedBySpec {
		t.Error("a policy without overrides is not itself for every namespace")
	}
}

// rolloutPolicy rolls out a filter refusing spot nodes in two waves: the
// namespaces labelled wave=one, then every other one.
func rolloutPolicy() *schedv1alpha1.SchedulingPolicy {
	return &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-spot", UID: "no-spot", Generation: 1, ResourceVersion: "1"},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			Enforcement:   schedv1alpha1.Audit,
			FailurePolicy: schedv1alpha1.Fail,
			Rollout: &schedv1alpha1.Rollout{Waves: []schedv1alpha1.RolloutWave{
				{Name: "one", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"wave": "one"}}},
				{Name: "rest"},
			}},
			Filters: []schedv1alpha1.Rule{{Name: "not-spot", Expression: "node.metadata.labels[?'capacity'].orValue('') != 'spot'"}},
		},
	}
}

// TestPromotionCompilesNothing: a status update that promotes, then
// aborts, a wave re-resolves the enforcement on the program the registry
// holds: nothing is compiled, the promoted wave's pods are enforced, the
// other wave's are not, and the node-only result remembered before the
// promotion serves the policy after it (the same expression, its entry
// still in the node's memo).
func TestPromotionCompilesNothing(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	registry := NewRegistry(NewCompiler(env))
	policy := rolloutPolicy()
	before := registry.Upsert(policy)
	if err := before.Err(); err != nil {
		t.Fatal(err)
	}
	conv := NewConverter(env, 0)
	spot := makeNode("spot-1", map[string]string{"capacity": "spot"})
	spot.ResourceVersion = "7"
	node, err := conv.Node(spot, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, rest := makeNamespace("shop", map[string]string{"wave": "one"}), makeNamespace("batch", nil)
	decide := func(p *CompiledPolicy, ns *corev1.Namespace) *Decision {
		t.Helper()
		pod, err := conv.Pod(makePod(ns.Name, "web", nil), ns)
		if err != nil {
			t.Fatal(err)
		}
		d := p.ForNamespace(ns).Filter(context.Background(), pod, node)
		return &d
	}
	if d := decide(before, one); d.Verdict != Reject || d.Acts() {
		t.Fatalf("wave one before its promotion: %v, acts %v; want an audited rejection", d.Verdict, d.Acts())
	}
	if node.memo.load(&before.filters[0].expr, memoID{}) == nil {
		t.Fatal("the node-only filter's result was not remembered on the node")
	}

	promoted := policy.DeepCopy()
	promoted.ResourceVersion = "2"
	promoted.Status.Rollout = &schedv1alpha1.RolloutStatus{Waves: []schedv1alpha1.WaveStatus{
		{Name: "one", Phase: schedv1alpha1.WaveEnforced}, {Name: "rest", Phase: schedv1alpha1.WaveSoaking},
	}}
	compilations := registry.Compilations()
	after := registry.Upsert(promoted)
	if n := registry.Compilations() - compilations; n != 0 {
		t.Errorf("a promotion compiled %d policies, want 0", n)
	}
	if after == before || registry.Snapshot().Get("no-spot") != after {
		t.Fatal("the promotion did not publish the policy with its new enforcement")
	}
	if after.filters[0] != before.filters[0] || node.memo.load(&after.filters[0].expr, memoID{}) == nil {
		t.Error("the promoted policy does not read the filter's result remembered before the promotion")
	}
	if d := decide(after, one); d.Verdict != Reject || !d.Acts() {
		t.Errorf("wave one after its promotion: %v, acts %v; want an enforced rejection", d.Verdict, d.Acts())
	}
	if d := decide(after, rest); d.Verdict != Reject || d.Acts() {
		t.Errorf("wave rest after wave one's promotion: %v, acts %v; want an audited rejection", d.Verdict, d.Acts())
	}
	if again := registry.Upsert(promoted.DeepCopy()); again != after {
		t.Error("a resync of the same status made a new policy")
	}
	if got := before.WithWaveEnforced(0); !decide(got, one).Acts() || decide(got, rest).Acts() || got.filters[0] != before.filters[0] {
		t.Error("WithWaveEnforced(0) does not enforce wave one alone on the same program")
	}
	if got := after.WithWaveEnforced(0); got != after {
		t.Error("WithWaveEnforced of a wave already enforced made a copy")
	}

	aborted := promoted.DeepCopy()
	aborted.ResourceVersion = "3"
	aborted.Status.Rollout.Phase = schedv1alpha1.RolloutAborted
	if p := registry.Upsert(aborted); registry.Compilations() != compilations || decide(p, one).Acts() {
		t.Error("an abort compiled the policy, or left wave one enforced (the engine audits every wave of an aborted rollout)")
	}
}

// TestProgramOutlivesItsFirstEnforcement: the memo slots of a policy's
// expressions belong to its Program, shared by every enforcement of it.
// Once the registry holds only the promoted policy, the copy compiled
// before the promotion is garbage, and its collection must not hand the
// slots the promoted policy still uses to the next policy compiled (which
// would make the two overwrite each other's remembered results).
func TestProgramOutlivesItsFirstEnforcement(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	registry := NewRegistry(NewCompiler(env))
	policy := rolloutPolicy()
	if err := registry.Upsert(policy).Err(); err != nil {
		t.Fatal(err)
	}
	promoted := policy.DeepCopy()
	promoted.ResourceVersion = "2"
	promoted.Status.Rollout = &schedv1alpha1.RolloutStatus{Waves: []schedv1alpha1.WaveStatus{{Name: "one", Phase: schedv1alpha1.WaveEnforced}}}
	after := registry.Upsert(promoted)
	slot := after.filters[0].slot
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond) // cleanups run on their own goroutine
	runtime.GC()
	env.memo.slots.mu.Lock()
	free := slices.Contains(env.memo.slots.free, slot)
	env.memo.slots.mu.Unlock()
	if free {
		t.Fatalf("slot %d of the promoted policy's filter was returned while the policy is in use", slot)
	}
	other := policy.DeepCopy()
	other.Name, other.UID = "other", "other"
	if p := registry.Upsert(other); p.filters[0].slot == slot {
		t.Errorf("the next policy compiled got slot %d, still used by the promoted policy", slot)
	}
	runtime.KeepAlive(after)
}
