package controllers

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// The drift metrics, read from status.drift at each scrape.
var (
	driftedPodsDesc = prometheus.NewDesc("celsched_policy_drifted_pods",
		"Running pods on nodes a SchedulingPolicy's enforced filters refuse (status.drift.count), by policy; "+
			"only policies with a status.drift.",
		[]string{"policy"}, nil)
	evictedPodsDesc = prometheus.NewDesc("celsched_remediation_evicted_pods_total",
		"Pods evicted by a SchedulingPolicy's remediation since it was set (status.drift.remediation.evicted), by policy.",
		[]string{"policy"}, nil)
)

// DriftMetrics exports the policies' drift as it is in status
// (celsched_policy_drifted_pods, celsched_remediation_evicted_pods_total),
// as RolloutMetrics does the rollouts: at each scrape, from Reader (the
// manager's cache), on every replica, with no state of its own. So the
// metric and status.drift agree by construction.
type DriftMetrics struct {
	Reader client.Reader

	log logr.Logger
}

var _ prometheus.Collector = &DriftMetrics{}

// Start registers the collector until ctx is done.
func (m *DriftMetrics) Start(ctx context.Context) error {
	m.log = ctrl.LoggerFrom(ctx).WithName("drift-metrics")
	if err := m.Reader.List(ctx, &schedv1alpha1.SchedulingPolicyList{}); err != nil {
		m.log.Error(err, "Reading the SchedulingPolicies for the drift metrics")
	}
	if err := ctrlmetrics.Registry.Register(m); err != nil {
		return fmt.Errorf("registering the drift metrics: %w", err)
	}
	<-ctx.Done()
	ctrlmetrics.Registry.Unregister(m)
	return nil
}

// NeedLeaderElection is false: every replica reports the drift.
func (m *DriftMetrics) NeedLeaderElection() bool { return false }

// Describe implements prometheus.Collector.
func (m *DriftMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- driftedPodsDesc
	ch <- evictedPodsDesc
}

// Collect implements prometheus.Collector; a failed read leaves the
// series out of the scrape.
func (m *DriftMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), rolloutCollectTimeout)
	defer cancel()
	var policies schedv1alpha1.SchedulingPolicyList
	if err := m.Reader.List(ctx, &policies); err != nil {
		m.log.Error(err, "Reading the SchedulingPolicies for the drift metrics")
		return
	}
	for i := range policies.Items {
		p := &policies.Items[i]
		d := p.Status.Drift
		if d == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(driftedPodsDesc, prometheus.GaugeValue, float64(d.Count), p.Name)
		if d.Remediation != nil {
			ch <- prometheus.MustNewConstMetric(evictedPodsDesc, prometheus.CounterValue, float64(d.Remediation.Evicted), p.Name)
		}
	}
}
