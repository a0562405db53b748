// Package performance runs celsched's workloads through kube-scheduler's own
// scheduler_perf harness (k8s.io/kubernetes/test/integration/scheduler_perf),
// out of tree, with the CEL plugins in its out-of-tree registry:
// BenchmarkPerfScheduling for `make perf`, TestPerfSmoke for `make test`.
// See docs/performance.md.
package performance

import (
	"fmt"
	"os"
	"testing"

	_ "k8s.io/component-base/logs/json/register"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
)

func TestMain(m *testing.M) {
	if err := benchmark.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
