// Command perftable prints the table of a `make perf` run: it reads the
// DataItems file that scheduler_perf wrote for BenchmarkPerfScheduling
// (test/performance) and the harness's phases file beside it
// (phases.jsonl), and prints, per workload, node count, batching and
// profile (stock, native, celsched), the median over the workload's runs
// and the spread (min-max) of pods/s, of the ratios to the stock and the
// native profile of the same run, of the process's CPU milliseconds per
// pod and of KiB allocated per pod (docs/performance.md, "Reading the
// table").
//
// With -upstream it prints the table of a `make perf-upstream` run
// instead: per upstream test case, workload and variant (stock, and the
// celsched profile with no policies, with policies that match no pod,
// with policies that match them), the median over the runs and the spread
// of pods/s, of the ratio to the stock variant of the same run, of pods/s
// by the phase's wall time and its ratio, of CPU per pod and its ratio,
// and of KiB and allocations per pod.
//
// Usage: perftable [-upstream] FILE.json | DIR   (DIR: its newest BenchmarkPerfScheduling_benchmark_*.json)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/celsched/celsched/test/performance/perfdata"
)

func main() {
	upstream := flag.Bool("upstream", false, "print the table of a make perf-upstream run")
	flag.Parse()
	f := run
	if *upstream {
		f = runUpstream
	}
	if err := f(flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: perftable FILE.json | DIR")
	}
	results, err := perfdata.Load(args[0])
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s: no workload results", args[0])
	}
	return perfdata.WriteTable(os.Stdout, perfdata.Rows(results))
}

func runUpstream(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: perftable -upstream FILE.json | DIR")
	}
	results, err := perfdata.LoadUpstream(args[0])
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s: no upstream workload results", args[0])
	}
	return perfdata.WriteUpstreamTable(os.Stdout, perfdata.UpstreamRows(results))
}
