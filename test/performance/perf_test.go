package performance

import (
	"testing"

	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
)

// BenchmarkPerfScheduling runs the workloads of performance-config.yaml
// through scheduler_perf, with the CEL plugins in the out-of-tree
// registry. `make perf` runs it (docs/performance.md):
//
//	go test ./test/performance -run '^$' -bench '^BenchmarkPerfScheduling$' -benchtime 1x -timeout 60m \
//	  -args -perf-scheduling-label-filter=performance -data-items-dir=DIR
//
// with etcd on the PATH. Each workload runs once (-benchtime 1x); the
// throughput of its measured pods goes to the DataItems file
// BenchmarkPerfScheduling_benchmark_celsched_<time>.json in DIR.
func BenchmarkPerfScheduling(b *testing.B) {
	benchmark.RunBenchmarkPerfScheduling(b, configFile, topic, outOfTreeRegistry(), perfOptions()...)
}

// topic names the DataItems file, as scheduler_perf's topics (misc,
// affinity, ...) do.
const topic = "celsched"
