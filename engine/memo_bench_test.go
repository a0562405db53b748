package engine

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMemoLookup: a Filter cycle's reads of a result kept per pod
// key, on each of 1000 node versions, for a pod of one of several
// workloads at a time, storing the result on a miss as an evaluation
// does. Per op, one pod on every node; hits/lookup is the share of reads
// that found their result. The workloads' keys are consecutive (created
// together, as scheduler_perf's Deployments) or scattered (interned over
// time, among other workloads'), and their pods come in turn or at
// random.
func BenchmarkMemoLookup(b *testing.B) {
	consecutive := func(n int) []uint64 {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(1000 + i)
		}
		return keys
	}
	scattered := func(n int) []uint64 {
		rng := rand.New(rand.NewPCG(3, 4))
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = 1 + rng.Uint64N(100000)
		}
		return keys
	}
	for _, tc := range []struct {
		name   string
		keys   []uint64
		random bool
	}{
		{"10-consecutive-keys-in-turn", consecutive(10), false},
		{"30-consecutive-keys-in-turn", consecutive(30), false},
		{"8-scattered-keys-at-random", scattered(8), true},
		{"16-scattered-keys-at-random", scattered(16), true},
		{"24-scattered-keys-at-random", scattered(24), true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tables := make([]*memoTable, 1000)
			for i := range tables {
				tables[i] = new(memoTable)
			}
			e := &expr{slot: 2, memo: memoPodAndNode}
			rng := rand.New(rand.NewPCG(1, 2))
			hits, lookups, pod := 0, 0, 0
			filter := func() {
				key := tc.keys[pod%len(tc.keys)]
				if tc.random {
					key = tc.keys[rng.IntN(len(tc.keys))]
				}
				pod++
				for _, t := range tables {
					lookups++
					if t.load(e, memoID{key: key}) != nil {
						hits++
						continue
					}
					t.storeResult(&memoResult{e: e, id: memoID{key: key}})
				}
			}
			// Every workload's results stored: what a miss costs from then
			// on is an eviction's.
			for range 20 * len(tc.keys) {
				filter()
			}
			hits, lookups = 0, 0
			b.ReportAllocs()
			for b.Loop() {
				filter()
			}
			b.ReportMetric(float64(hits)/float64(lookups), "hits/lookup")
		})
	}
}
