package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// leaderGauge is 1 on the replica that leads (holds the leader election
// Lease, or runs alone with --leader-elect=false): the one that schedules
// and writes status. Every replica serves it, 0 until it is elected, so
// that "no replica reports 1" means no leader.
var leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "celsched_leader",
	Help: "1 while this manager replica is the leader (schedules pods and writes policy status), 0 otherwise.",
})

func init() {
	ctrlmetrics.Registry.MustRegister(leaderGauge)
}

// leading is the runnable that sets leaderGauge while this replica leads:
// the manager starts it once elected. A replica that loses the Lease
// exits (its series goes with it); one that stops releases it and reports
// 0 until then.
func leading() ctrlRunnable {
	return ctrlRunnable{leader: true, start: func(ctx context.Context) error {
		leaderGauge.Set(1)
		<-ctx.Done()
		leaderGauge.Set(0)
		return nil
	}}
}
