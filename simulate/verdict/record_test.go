package verdict

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestRecord: the run that decides records what the CEL plugins decided,
// and the node verdicts are Schedule's. Every policy is recorded on every
// node: past the first that refuses, on a node a built-in plugin refused
// first (a taint), and when a PreFilter plugin rejects the pod before
// CELFilter's PreFilter ran (here a claim that does not exist). Each
// rule's verdict is recorded when asked, and the score rules' raw values
// on the feasible nodes only.
func TestRecord(t *testing.T) {
	ns := namespace("team", nil)
	tainted := node("tainted", map[string]string{"zone": "a", corev1.LabelHostname: "tainted"})
	tainted.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
	nodes := []*corev1.Node{
		node("a-1", map[string]string{"zone": "a", corev1.LabelHostname: "a-1"}),
		node("b-1", map[string]string{"zone": "b", corev1.LabelHostname: "b-1"}),
		tainted,
	}
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("1-zone-a").FilterMsg("zone", "node.metadata.labels['zone'] == 'a'", "not zone a", "").Filter("named", "node.metadata.name != ''").Obj(),
		builder.MakePolicy("2-not-b").FilterMsg("not-b", "node.metadata.labels['zone'] != 'b'", "zone b", "").Obj(),
		builder.MakePolicy("3-audited").Audit().Filter("never", "false").Obj(),
		builder.MakePolicy("4-prefer-a").Score("a", "node.metadata.labels['zone'] == 'a' ? 100 : 0", 1, schedv1alpha1.None).Obj(),
	}
	e := newEvaluator(t, ns, nodes, nil, policies)
	ctx := context.Background()
	p := pod("team", "web", nil)

	rec := &celplugins.Record{Rules: true}
	got, err := e.Record(ctx, p, rec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Schedule(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Record's verdict differs from Schedule's (-want +got):\n%s", diff)
	}
	if got.Node("tainted").RejectedBy == nil || got.Node("tainted").RejectedBy.Plugin != "TaintToleration" {
		t.Fatalf("tainted: %+v, want refused by TaintToleration first", got.Node("tainted").RejectedBy)
	}

	type outcome struct {
		Policy  string
		Verdict engine.Verdict
		Refuses bool
		Rules   map[string]bool
	}
	outcomes := func(rec *celplugins.Record, node string) []outcome {
		var out []outcome
		for _, o := range rec.Filters(node) {
			rules := map[string]bool{}
			for _, r := range o.Rules {
				rules[r.Rule] = r.Passed
			}
			out = append(out, outcome{Policy: o.Decision.Policy.Name, Verdict: o.Decision.Verdict, Refuses: o.Refuses(), Rules: rules})
		}
		return out
	}
	wantOutcomes := map[string][]outcome{
		"a-1": {
			{Policy: "1-zone-a", Rules: map[string]bool{"zone": true, "named": true}},
			{Policy: "2-not-b", Rules: map[string]bool{"not-b": true}},
			{Policy: "3-audited", Verdict: engine.Reject, Rules: map[string]bool{"never": false}},
		},
		"b-1": {
			{Policy: "1-zone-a", Verdict: engine.Reject, Refuses: true, Rules: map[string]bool{"zone": false, "named": true}},
			{Policy: "2-not-b", Verdict: engine.Reject, Refuses: true, Rules: map[string]bool{"not-b": false}},
			{Policy: "3-audited", Verdict: engine.Reject, Rules: map[string]bool{"never": false}},
		},
		"tainted": {
			{Policy: "1-zone-a", Rules: map[string]bool{"zone": true, "named": true}},
			{Policy: "2-not-b", Rules: map[string]bool{"not-b": true}},
			{Policy: "3-audited", Verdict: engine.Reject, Rules: map[string]bool{"never": false}},
		},
	}
	for node, want := range wantOutcomes {
		if diff := cmp.Diff(want, outcomes(rec, node)); diff != "" {
			t.Errorf("%s: recorded filters (-want +got):\n%s", node, diff)
		}
	}
	if o := rec.Filters("b-1")[0]; o.Decision.Rule != "zone" || o.Decision.Message != "not zone a" {
		t.Errorf("b-1: 1-zone-a recorded rule %q message %q, want zone, not zone a", o.Decision.Rule, o.Decision.Message)
	}
	if s := rec.Scores("a-1"); len(s) != 1 || s[0].Decision.Policy.Name != "4-prefer-a" || s[0].Raw[0] != 100 {
		t.Errorf("a-1: recorded scores %+v, want 4-prefer-a 100", s)
	}
	for _, n := range []string{"b-1", "tainted"} {
		if s := rec.Scores(n); s != nil {
			t.Errorf("%s, infeasible: recorded scores %+v, want none (the scheduler scores feasible nodes)", n, s)
		}
	}

	// A PreFilter plugin rejects the pod before CELFilter's PreFilter
	// runs: the record still has every policy on every node.
	lost := p.DeepCopy()
	lost.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"}}}}
	rec = &celplugins.Record{}
	r, err := e.Record(ctx, lost, rec)
	if err != nil {
		t.Fatal(err)
	}
	if r.PreFilter == nil || r.PreFilter.Plugin != "VolumeRestrictions" {
		t.Fatalf("PreFilter rejection %+v, want VolumeRestrictions's", r.PreFilter)
	}
	for _, n := range nodes {
		if got := len(rec.Filters(n.Name)); got != 3 {
			t.Errorf("%s: %d policies recorded after a PreFilter rejection, want 3", n.Name, got)
		}
	}
	if got := rec.Filters("a-1")[0].Rules; got != nil {
		t.Errorf("rules recorded without being asked: %+v", got)
	}
}
