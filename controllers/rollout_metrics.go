package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// The rollout metrics, read from status.rollout at each scrape.
var (
	rolloutPausedDesc = prometheus.NewDesc("celsched_rollout_paused",
		"1 while a SchedulingPolicy's rollout is Paused (status.rollout.phase), by policy and reason (status.rollout.pauseReason: "+
			"GateExceeded or PausedByRequest); 0, with reason \"\", for every other policy with a rollout status.",
		[]string{"policy", "reason"}, nil)
	rolloutWavesDesc = prometheus.NewDesc("celsched_rollout_waves",
		"Waves of a SchedulingPolicy's rollout in each phase (status.rollout.waves[*].phase: Pending, Soaking, Paused, Enforced), by policy and phase.",
		[]string{"policy", "phase"}, nil)
)

// wavePhases are the phases celsched_rollout_waves reports, each policy
// with a rollout status getting all of them (0 when no wave has it).
var wavePhases = []schedv1alpha1.WavePhase{schedv1alpha1.WavePending, schedv1alpha1.WaveSoaking, schedv1alpha1.WavePaused, schedv1alpha1.WaveEnforced}

// rolloutCollectTimeout bounds a scrape's read of the policies.
const rolloutCollectTimeout = 5 * time.Second

// RolloutMetrics exports the rollouts' state as it is in status
// (celsched_rollout_paused, celsched_rollout_waves), the way
// kube-state-metrics exports an object's status: at each scrape, from the
// SchedulingPolicies in Reader (the manager's cache). It holds no state of
// its own, so every replica reports what the leader wrote, a deleted
// policy's series go with it, and nothing is lost across a restart.
//
// As a manager runnable (every replica, not only the leader) it registers
// itself with controller-runtime's registry when the manager starts and
// unregisters when it stops.
type RolloutMetrics struct {
	Reader client.Reader

	// log is the manager's logger, from Start.
	log logr.Logger
}

var _ prometheus.Collector = &RolloutMetrics{}

// SetupWithManager adds the collector to mgr: it serves while mgr runs.
func (m *RolloutMetrics) SetupWithManager(mgr ctrl.Manager) error {
	return mgr.Add(m)
}

// Start registers the collector until ctx is done. It reads the policies
// once first: on a standby, where no controller watches them, that starts
// the cache's informer and waits for it to sync, so that no scrape waits.
func (m *RolloutMetrics) Start(ctx context.Context) error {
	m.log = ctrl.LoggerFrom(ctx).WithName("rollout-metrics")
	if err := m.Reader.List(ctx, &schedv1alpha1.SchedulingPolicyList{}); err != nil {
		m.log.Error(err, "Reading the SchedulingPolicies for the rollout metrics")
	}
	if err := ctrlmetrics.Registry.Register(m); err != nil {
		return fmt.Errorf("registering the rollout metrics: %w", err)
	}
	<-ctx.Done()
	ctrlmetrics.Registry.Unregister(m)
	return nil
}

// NeedLeaderElection is false: every replica reports the rollouts.
func (m *RolloutMetrics) NeedLeaderElection() bool { return false }

// Describe implements prometheus.Collector.
func (m *RolloutMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- rolloutPausedDesc
	ch <- rolloutWavesDesc
}

// Collect implements prometheus.Collector: a series per policy that has a
// rollout status. A failed read is logged and leaves the rollout series out
// of the scrape: an invalid metric would fail the whole scrape (the
// metrics server's promhttp.HTTPErrorOnError), every other metric with it.
func (m *RolloutMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), rolloutCollectTimeout)
	defer cancel()
	var policies schedv1alpha1.SchedulingPolicyList
	if err := m.Reader.List(ctx, &policies); err != nil {
		m.log.Error(err, "Reading the SchedulingPolicies for the rollout metrics")
		return
	}
	for i := range policies.Items {
		p := &policies.Items[i]
		r := p.Status.Rollout
		if r == nil {
			continue
		}
		paused := 0.0
		if r.Phase == schedv1alpha1.RolloutPaused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(rolloutPausedDesc, prometheus.GaugeValue, paused, p.Name, string(r.PauseReason))
		counts := map[schedv1alpha1.WavePhase]float64{}
		for _, w := range r.Waves {
			counts[w.Phase]++
		}
		for _, phase := range wavePhases {
			ch <- prometheus.MustNewConstMetric(rolloutWavesDesc, prometheus.GaugeValue, counts[phase], p.Name, string(phase))
		}
	}
}
