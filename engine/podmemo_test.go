package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/celsched/celsched/test/builder"
)

// TestPodMemo: the match conditions and preEnqueue rules of many policies
// are evaluated once per distinct input (what they read of the pod): a
// pod whose results are all remembered is never converted, the policies
// that read the same share one key per pod, and what a key does not hold
// is not remembered.
func TestPodMemo(t *testing.T) {
	env := testEnv(t)
	compiler := NewCompiler(env)
	var policies []*CompiledPolicy
	for i := range 30 {
		p := compiler.Compile(builder.MakePolicy(fmt.Sprintf("tier-%d", i)).
			Condition("tier", fmt.Sprintf("pod.metadata.?labels[?'tier'].orValue('') == 'tier-%d'", i)).
			PreEnqueue("best-effort", "pod.spec.containers.all(c, !has(c.resources.requests))", "requests resources").
			Filter("f", "node.metadata.name != ''").Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		policies = append(policies, p)
	}
	first := policies[0].conditions[0].alone
	for _, p := range policies {
		if m := p.conditions[0].alone; m == nil || m.spec != first.spec {
			t.Fatalf("%s: condition memo %v, want one sharing the spec %p", p.Name, m, first.spec)
		}
		if p.preEnqueue[0].alone == nil || p.preEnqueue[0].alone.spec == first.spec {
			t.Fatalf("%s: the preEnqueue rule reads the spec, not the tier label: %v", p.Name, p.preEnqueue[0].alone)
		}
	}

	conv := NewConverter(env, 0)
	ctx := context.Background()
	// Pods of two classes, one of them with tier-3's label; the second pod
	// of each class finds every result remembered, so it is not converted.
	for round := range 3 {
		for _, tier := range []string{"tier-3", "none"} {
			in, err := conv.Pod(makePod("team-a", fmt.Sprintf("%s-%d", tier, round), map[string]string{"tier": tier}), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range policies {
				matched, d := p.MatchAndPreEnqueue(ctx, in)
				if want := p.Name == "tier-3" && tier == "tier-3"; matched != want {
					t.Errorf("round %d, pod of %s, %s: matched %v, want %v", round, tier, p.Name, matched, want)
				}
				if matched && d.Verdict != Hold {
					t.Errorf("round %d, %s: %s, want Hold (it requests resources)", round, p.Name, d.Verdict)
				}
			}
			if converted := in.pod.Load() != nil; converted != (round == 0) {
				t.Errorf("round %d, pod of %s: converted %v, want only in round 0", round, tier, converted)
			}
		}
	}

	// A pod with no key (not made by a Converter's Pod) is evaluated.
	in := &PodInput{Pod: makePod("team-a", "keyless", map[string]string{"tier": "tier-3"}), podEnv: env}
	if matched, _ := policies[3].MatchAndPreEnqueue(ctx, in); !matched {
		t.Error("a keyless pod of tier-3 does not match tier-3")
	}

	// Not remembered: what reads the pod's name (a result no other pod
	// reads), the whole pod, or its status.
	for _, condition := range []string{
		"pod.metadata.name != 'x'",
		"pod == pod",
		"pod.status.?phase.orValue('') != 'Failed'",
	} {
		p := compiler.Compile(builder.MakePolicy("not-kept").Condition("c", condition).Filter("f", "true").Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		if m := p.conditions[0].alone; m != nil {
			t.Errorf("%s: remembered with spec %q", condition, m.spec.form())
		}
	}
}

// TestPodMemoConverters: the keys of two Converters over the same
// policies never name each other's results (podKeysIssued), though the
// memo lives with the policy.
func TestPodMemoConverters(t *testing.T) {
	env := testEnv(t)
	p := NewCompiler(env).Compile(builder.MakePolicy("web").
		Condition("app", "pod.metadata.?labels[?'app'].orValue('') == 'web'").
		Filter("f", "true").Obj(), CompileOptions{})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 4 {
		for app, want := range map[string]bool{"web": true, "api": false} {
			// Each pod the first of a Converter: its first key.
			in, err := NewConverter(env, 0).Pod(makePod("team-a", fmt.Sprintf("%s-%d", app, i), map[string]string{"app": app}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Match(ctx, in).Matches; got != want {
				t.Errorf("pod of %s (%d): matches %v, want %v", app, i, got, want)
			}
		}
	}
}
