package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestPreEnqueueMatched: deciding the preEnqueue rules on the results of
// Snapshot.Match, grouped by policy (ByPolicy), decides what
// MatchAndPreEnqueue decides policy by policy: a parameterized policy's
// results (one per params object) are one group, decided once; a policy
// that does not apply is in no group. Snapshot.Match's result has room
// for the policies that apply, not for all of them.
func TestPreEnqueueMatched(t *testing.T) {
	t.Parallel()
	approved := func(v string) map[string]string { return map[string]string{"approved": v} }
	tenant := map[string]string{"celsched.io/tenant": "yes"}
	policies := []*CompiledPolicy{
		compileOK(t, builder.MakePolicy("a-params").ParamKind("v1", "ConfigMap").ParamSelector(tenant, "", schedv1alpha1.DenyAction).
			PreEnqueue("approved", "params.data[?'approved'].orValue('') == 'true'", "not approved").Obj()),
		compileOK(t, builder.MakePolicy("b-audit").Audit().PreEnqueue("no", "false", "never").Obj()),
		compileOK(t, builder.MakePolicy("c-filters-only").Filter("f", "true").Obj()),
		compileOK(t, builder.MakePolicy("d-other-pods").PodLabels(map[string]string{"app": "db"}).PreEnqueue("no", "false", "").Obj()),
		compileOK(t, builder.MakePolicy("e-ignored").Ignore().Condition("team", "pod.metadata.labels['team'] == 'a'").PreEnqueue("no", "false", "").Obj()),
		compileOK(t, builder.MakePolicy("f-holds").PreEnqueue("ok", "true", "").PreEnqueue("size", "pod.spec.containers.size() > 1", "one container").Obj()),
	}
	for i := range 30 {
		policies = append(policies, compileOK(t, builder.MakePolicy(fmt.Sprintf("z-other-%02d", i)).PodLabels(map[string]string{"app": "db"}).Filter("f", "true").Obj()))
	}
	snapshot := NewSnapshot(policies...)
	conv := NewConverter(testEnv(t), 0)

	type outcome struct {
		Matched bool
		Verdict string
		Message string
		Ignored int
	}
	paramsCases := map[string][]*unstructured.Unstructured{
		"two params objects, the second holds": {
			configMap(t, "team-a", "one", approved("true"), tenant), configMap(t, "team-a", "two", approved("no"), tenant),
		},
		"two params objects, both approve": {
			configMap(t, "team-a", "one", approved("true"), tenant), configMap(t, "team-a", "two", approved("true"), tenant),
		},
		"no params object (Deny)": nil,
	}
	for name, objs := range paramsCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := conv.Pod(makePod("team-a", "p", nil), makeNamespace("team-a", nil))
			if err != nil {
				t.Fatal(err)
			}
			in.Params = staticParams(t, objs...)
			ctx := context.Background()
			want := map[string]outcome{}
			for _, p := range policies {
				if !p.HasPreEnqueue() {
					continue
				}
				if matched, d := p.MatchAndPreEnqueue(ctx, in); matched {
					want[p.Name] = outcome{true, d.Verdict.String(), d.String(), len(d.Ignored)}
				}
			}
			matches := snapshot.Match(ctx, in, nil)
			if cap(matches) >= len(policies)/2 {
				t.Errorf("Snapshot.Match returned room for %d results; %d apply", cap(matches), len(matches))
			}
			got := map[string]outcome{}
			ByPolicy(matches, func(p *CompiledPolicy, results []MatchResult) bool {
				if _, dup := got[p.Name]; dup {
					t.Errorf("policy %s is in two groups", p.Name)
				}
				if !p.HasPreEnqueue() {
					got[p.Name] = outcome{} // applies, with nothing to decide here
					return true
				}
				matched, d := p.PreEnqueueMatched(ctx, in, results)
				got[p.Name] = outcome{matched, d.Verdict.String(), d.String(), len(d.Ignored)}
				return true
			})
			if _, ok := got["c-filters-only"]; !ok {
				t.Error("the policy with filters only is in no group")
			}
			delete(got, "c-filters-only")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decisions from the snapshot's match (+) against MatchAndPreEnqueue (-):\n%s", diff)
			}
			if _, ok := want["a-params"]; !ok {
				t.Error("the parameterized policy does not apply")
			}
		})
	}
}
