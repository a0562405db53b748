package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestRolloutMetrics: a series per policy with a rollout status, read from
// status as it is: paused (with its reason) or not, and its waves counted
// by phase; a policy without a rollout status has none.
func TestRolloutMetrics(t *testing.T) {
	paused := builder.MakePolicy("gated").Obj()
	paused.Status.Rollout = &schedv1alpha1.RolloutStatus{
		Phase: schedv1alpha1.RolloutPaused, PauseReason: schedv1alpha1.PauseGateExceeded,
		Waves: []schedv1alpha1.WaveStatus{
			{Name: "first", Phase: schedv1alpha1.WaveEnforced},
			{Name: "second", Phase: schedv1alpha1.WavePaused},
			{Name: "third", Phase: schedv1alpha1.WavePending},
		},
	}
	progressing := builder.MakePolicy("soaking").Obj()
	progressing.Status.Rollout = &schedv1alpha1.RolloutStatus{
		Phase: schedv1alpha1.RolloutProgressing,
		Waves: []schedv1alpha1.WaveStatus{{Name: "only", Phase: schedv1alpha1.WaveSoaking}},
	}
	plain := builder.MakePolicy("no-rollout").Obj()
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(paused, progressing, plain).
		WithStatusSubresource(&schedv1alpha1.SchedulingPolicy{}).Build()
	for _, p := range []*schedv1alpha1.SchedulingPolicy{paused, progressing} {
		status := p.Status
		stored := &schedv1alpha1.SchedulingPolicy{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), stored); err != nil {
			t.Fatal(err)
		}
		stored.Status = status
		if err := c.Status().Update(t.Context(), stored); err != nil {
			t.Fatal(err)
		}
	}

	want := `
# HELP celsched_rollout_paused 1 while a SchedulingPolicy's rollout is Paused (status.rollout.phase), by policy and reason (status.rollout.pauseReason: GateExceeded or PausedByRequest); 0, with reason "", for every other policy with a rollout status.
# TYPE celsched_rollout_paused gauge
celsched_rollout_paused{policy="gated",reason="GateExceeded"} 1
celsched_rollout_paused{policy="soaking",reason=""} 0
# HELP celsched_rollout_waves Waves of a SchedulingPolicy's rollout in each phase (status.rollout.waves[*].phase: Pending, Soaking, Paused, Enforced), by policy and phase.
# TYPE celsched_rollout_waves gauge
celsched_rollout_waves{phase="Enforced",policy="gated"} 1
celsched_rollout_waves{phase="Paused",policy="gated"} 1
celsched_rollout_waves{phase="Pending",policy="gated"} 1
celsched_rollout_waves{phase="Soaking",policy="gated"} 0
celsched_rollout_waves{phase="Enforced",policy="soaking"} 0
celsched_rollout_waves{phase="Paused",policy="soaking"} 0
celsched_rollout_waves{phase="Pending",policy="soaking"} 0
celsched_rollout_waves{phase="Soaking",policy="soaking"} 1
`
	if err := testutil.CollectAndCompare(&RolloutMetrics{Reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestRolloutMetricsReadError: a failed read of the policies leaves the
// rollout series out, and nothing invalid in the scrape (which would fail
// every other metric of /metrics with it).
func TestRolloutMetricsReadError(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("the cache is gone")
		},
	}).Build()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(&RolloutMetrics{Reader: c}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil || len(families) != 0 {
		t.Errorf("Gather() = %v, %v; want no families and no error", families, err)
	}
}
