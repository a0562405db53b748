package app

import (
	"os"
	"runtime/debug"
)

// reportMemoryLimit is the Go runtime's soft memory limit of the commands
// that evaluate a whole cluster (impact, analyze), unless GOMEMLIMIT sets
// one. Their live heap on 5000 nodes and 10,000 pods peaks at about 210
// MB (the dry run's converter keeps a bucket of remembered results per
// rule and node: engine.Converter.SmallMemo), and the garbage collector
// would let the heap grow to twice that before it runs; under the limit
// it runs sooner instead, for some more CPU time. The binary's own pages
// add about 90 MB of resident memory that the limit does not count. A
// cluster whose live heap nears the limit makes the collector run more
// often (the runtime caps it at half the CPU time): set GOMEMLIMIT higher
// for such a cluster.
const reportMemoryLimit = 360 << 20

// limitMemory sets reportMemoryLimit, unless GOMEMLIMIT is set.
func limitMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(reportMemoryLimit)
	}
}
