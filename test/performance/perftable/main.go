// Command perftable prints the throughput table of a `make perf` run: it
// reads the DataItems file that scheduler_perf wrote for
// BenchmarkPerfScheduling (test/performance) and prints, per workload, node
// count, batching and profile, the pods/s average and p50 that
// scheduler_perf reports, and the celsched profile's ratios to the stock
// profile of the same workload in the same file.
//
// Usage: perftable FILE.json | DIR   (DIR: its newest BenchmarkPerfScheduling_benchmark_*.json)
package main

import (
	"fmt"
	"os"

	"github.com/celsched/celsched/test/performance/perfdata"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: perftable FILE.json | DIR")
	}
	path := args[0]
	if fi, err := os.Stat(path); err != nil {
		return err
	} else if fi.IsDir() {
		if path, err = perfdata.Latest(path); err != nil {
			return err
		}
	}
	items, err := perfdata.Read(path)
	if err != nil {
		return err
	}
	results, err := perfdata.Results(items)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s: no workload results", path)
	}
	return perfdata.WriteTable(os.Stdout, perfdata.Rows(results))
}
