package analyze

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/cmd/celsched/source"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
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
