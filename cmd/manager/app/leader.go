package app

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// leaderGauge is 1 on the replica that leads (holds the leader election
// Lease, or runs alone with --leader-elect=false): the one that schedules
// and writes status. Every replica serves it, 0 until it is elected, so
// that "no replica reports 1" means no leader.
var leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "celsched_leader",
	Help: "1 while this manager replica is the leader (schedules pods and writes policy status), 0 otherwise.",
})

// registerLeaderGauge registers leaderGauge with r; registering it again
// (a second manager in one process, as in the tests) is not an error.
func registerLeaderGauge(r prometheus.Registerer) error {
	if err := r.Register(leaderGauge); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) && already.ExistingCollector == leaderGauge {
			return nil
		}
		return err
	}
	return nil
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
