package app

import (
	"os"
	"runtime/debug"
)

// reportMemoryLimit is the Go runtime's soft memory limit of the commands
// that evaluate a whole cluster (impact, analyze), unless GOMEMLIMIT sets
// one. Their live heap on 5000 nodes and 10,000 pods is about 250 MB, and
// the garbage collector would let the heap grow to twice that before it
// runs; under the limit it runs sooner instead, for a few percent more
// CPU time. A cluster whose live heap nears the limit makes it run more
// often (the runtime caps it at half the CPU time): set GOMEMLIMIT higher
// for such a cluster.
const reportMemoryLimit = 400 << 20

// limitMemory sets reportMemoryLimit, unless GOMEMLIMIT is set.
func limitMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(reportMemoryLimit)
	}
}
