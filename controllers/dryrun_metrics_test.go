package controllers

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/celsched/celsched/engine/audit"
	enginemetrics "github.com/celsched/celsched/engine/metrics"
	"github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/builder"
)

// TestDryRunRecordsNoMetrics: the evaluator's runs (here the rollout
// gate's, which runs in the manager beside the scheduler) are not the
// scheduler's: they add nothing to celsched's policy metrics, and
// kube-scheduler's framework, which records its extension points' durations
// whoever calls it, labels them with the dry-run profile, never with the
// profile the scheduler runs.
func TestDryRunRecordsNoMetrics(t *testing.T) {
	t.Parallel()
	const policy = "dry-run-metrics"
	f := newFixture(t, namespace("w1", map[string]string{"wave": "1"}))
	f.registry.Upsert(builder.MakePolicy(policy).UID("policy-"+policy).Generation(1, "1").Audit().
		Wave("first", map[string]string{"wave": "1"}, time.Minute).
		Filter("no-spot", "node.metadata.labels['pool'] != 'spot'").
		Score("prefer-a", "node.metadata.labels['zone'] == 'a' ? 100 : 0", 1, "").Obj())
	f.add(t, f.nodes, node("spot-1", map[string]string{"pool": "spot", "zone": "a"}), node("od-1", map[string]string{"pool": "od", "zone": "b"}))
	for _, name := range []string{"a", "b", "c"} {
		f.add(t, f.pods, pod("w1", name, map[string]string{"app": name}))
	}
	// The metrics registered as the manager registers them: a dry run
	// that counted would show.
	if err := enginemetrics.Register(ctrlmetrics.Registry); err != nil {
		t.Fatal(err)
	}
	if err := audit.Register(ctrlmetrics.Registry); err != nil {
		t.Fatal(err)
	}
	pp := f.pending(t)
	for range 3 { // several counts: a cycle's tally is flushed by the next
		if _, err := pp.WouldStrand(context.Background(), policy, 1, 0); err != nil {
			t.Fatal(err)
		}
	}

	celsched, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range celsched {
		for _, m := range mf.GetMetric() {
			if label(m, "policy") == policy {
				t.Errorf("%s{%v}: a dry run's evaluation was counted", mf.GetName(), m.GetLabel())
			}
		}
	}
	scheduler, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	dry := false
	for _, mf := range scheduler {
		if mf.GetName() != "scheduler_framework_extension_point_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch label(m, "profile") {
			case "celsched":
				t.Errorf("%s{%v}: a dry run was recorded as the scheduler's profile", mf.GetName(), m.GetLabel())
			case "celsched" + verdict.DryRunProfileSuffix:
				dry = true
			}
		}
	}
	if !dry {
		t.Error("no extension point duration was recorded under the dry-run profile: did the gate run the framework?")
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
