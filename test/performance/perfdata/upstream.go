package perfdata

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The variants of an upstream workload (`make perf-upstream`,
// test/performance/upstream/suite.yaml): kube-scheduler's stock profile,
// and the celsched profile as default-scheduler with no policy, with
// policies that match none of the workload's pods, and with policies that
// match them.
const (
	VariantStock       = "stock"
	VariantNoPolicies  = "nopolicies"
	VariantNonMatching = "nonmatching"
	VariantMatching    = "matching"
)

// Variants are the variants in the order of the table's rows.
var Variants = []string{VariantStock, VariantNoPolicies, VariantNonMatching, VariantMatching}

// UpstreamTestCase names the test case that runs an upstream test case in a
// variant, for one run: <test case>_<variant>_<run>.
func UpstreamTestCase(testCase, variant string, run int) string {
	return fmt.Sprintf("%s_%s_%d", testCase, variant, run)
}

// ParseUpstreamTestCase splits a name of UpstreamTestCase; ok is false for
// any other name.
func ParseUpstreamTestCase(name string) (testCase, variant string, run int, ok bool) {
	i := strings.LastIndex(name, "_")
	if i < 0 {
		return "", "", 0, false
	}
	run, err := strconv.Atoi(name[i+1:])
	j := strings.LastIndex(name[:i], "_")
	if err != nil || run < 1 || j < 1 {
		return "", "", 0, false
	}
	testCase, variant = name[:j], name[j+1:i]
	if !slices.Contains(Variants, variant) {
		return "", "", 0, false
	}
	return testCase, variant, run, true
}

// UpstreamResult is one measured phase of an upstream workload: the
// throughput of its measured pods in one variant and run, and what the
// process spent on them.
type UpstreamResult struct {
	// TestCase and Workload are upstream's names, e.g. SchedulingBasic and
	// 500Nodes.
	TestCase, Workload string
	Variant            string
	Run                int
	// Measured says whether scheduler_perf took throughput samples.
	Measured     bool
	Average, P50 float64
	// Phase is what the harness's meter measured, nil if the phases file
	// has no line for it.
	Phase *Phase
}

// LoadUpstream reads an upstream run's results from path, a DataItems file
// or a run's directory (its newest DataItems file), with the phases file of
// the same directory if there is one. A phase that scheduler_perf could
// not sample is a result with Measured false.
func LoadUpstream(path string) ([]UpstreamResult, error) {
	items, phases, err := readRun(path)
	if err != nil {
		return nil, err
	}
	return UpstreamResults(items, phases)
}

// UpstreamResults returns the throughput of every measured phase in
// items, in their order, each with its line of phases. A DataItem's name is
// <benchmark>/<test case>_<variant>_<run>/<workload>/<namespace>, where
// the workload's name may have slashes of its own.
func UpstreamResults(items *DataItems, phases []Phase) ([]UpstreamResult, error) {
	type key struct{ testCase, workload, namespace string }
	byKey := map[key]*Phase{}
	for i := range phases {
		p := &phases[i]
		byKey[key{p.TestCase, p.Workload, p.Namespace}] = p
	}
	var results []UpstreamResult
	index := map[string]int{}
	for _, item := range items.DataItems {
		metric := item.Labels["Metric"]
		if metric != throughputMetric && item.Data != nil {
			continue
		}
		name := item.Labels["Name"]
		parts := strings.Split(name, "/")
		if len(parts) < 4 {
			return nil, fmt.Errorf("data item %q: want <benchmark>/<test case>_<variant>_<run>/<workload>/<namespace>", name)
		}
		derived, ns := parts[1], parts[len(parts)-1]
		testCase, variant, run, ok := ParseUpstreamTestCase(derived)
		if !ok {
			return nil, fmt.Errorf("data item %q: test case %q is not <test case>_<variant>_<run>", name, derived)
		}
		r := UpstreamResult{TestCase: testCase, Workload: strings.Join(parts[2:len(parts)-1], "/"), Variant: variant, Run: run}
		if metric == throughputMetric {
			r.Measured, r.Average, r.P50 = true, item.Data[averageBucket], item.Data[p50Bucket]
		}
		r.Phase = byKey[key{derived, r.Workload, ns}]
		if i, ok := index[name]; ok {
			if r.Measured {
				results[i] = r
			}
			continue
		}
		index[name] = len(results)
		results = append(results, r)
	}
	return results, nil
}

// UpstreamRow is one variant of one upstream workload over its runs. The
// ratios are each run's value over the stock variant's of the same run.
type UpstreamRow struct {
	TestCase, Workload, Variant string
	Runs                        int
	// Average is scheduler_perf's average pods/s, VsStock its ratio.
	Average, VsStock Stat
	// WallPerSec is pods per second of the phase's wall time (first pod
	// created to last bound), WallVsStock its ratio: the throughput of
	// phases too short or too uneven for scheduler_perf's one-second
	// samples.
	WallPerSec, WallVsStock Stat
	// CPUPerPod is the process's CPU milliseconds per pod, CPUVsStock its
	// ratio; KiBPerPod and AllocsPerPod the heap allocations per pod.
	CPUPerPod, CPUVsStock, KiBPerPod, AllocsPerPod Stat
}

// UpstreamRows groups results by test case, workload and variant, in the
// order the test cases first appear and the variants' order.
func UpstreamRows(results []UpstreamResult) []UpstreamRow {
	type groupKey struct{ testCase, workload string }
	type runKey struct {
		groupKey
		variant string
		run     int
	}
	var groups []groupKey
	byRun := map[runKey]UpstreamResult{}
	members := map[groupKey]map[string][]UpstreamResult{}
	for _, r := range results {
		g := groupKey{r.TestCase, r.Workload}
		if members[g] == nil {
			groups = append(groups, g)
			members[g] = map[string][]UpstreamResult{}
		}
		members[g][r.Variant] = append(members[g][r.Variant], r)
		byRun[runKey{g, r.Variant, r.Run}] = r
	}
	var rows []UpstreamRow
	for _, g := range groups {
		for _, variant := range Variants {
			rs := members[g][variant]
			if len(rs) == 0 {
				continue
			}
			row := UpstreamRow{TestCase: g.testCase, Workload: g.workload, Variant: variant, Runs: len(rs)}
			var avg, vs, wall, wallVs, cpu, cpuVs, kib, allocs []float64
			for _, r := range rs {
				stock, hasStock := byRun[runKey{g, VariantStock, r.Run}]
				hasStock = hasStock && variant != VariantStock
				if r.Measured {
					avg = append(avg, r.Average)
					if hasStock && stock.Measured && stock.Average > 0 {
						vs = append(vs, r.Average/stock.Average)
					}
				}
				p := r.Phase
				if p == nil || p.Pods == 0 || p.WallSeconds <= 0 {
					continue
				}
				wall = append(wall, float64(p.Pods)/p.WallSeconds)
				cpu = append(cpu, p.CPUSeconds*1000/float64(p.Pods))
				kib = append(kib, float64(p.AllocBytes)/1024/float64(p.Pods))
				allocs = append(allocs, float64(p.AllocObjects)/float64(p.Pods))
				if s := stock.Phase; hasStock && s != nil && s.Pods > 0 && s.WallSeconds > 0 && s.CPUSeconds > 0 {
					wallVs = append(wallVs, (float64(p.Pods)/p.WallSeconds)/(float64(s.Pods)/s.WallSeconds))
					cpuVs = append(cpuVs, (p.CPUSeconds/float64(p.Pods))/(s.CPUSeconds/float64(s.Pods)))
				}
			}
			row.Average, row.VsStock = NewStat(avg), NewStat(vs)
			row.WallPerSec, row.WallVsStock = NewStat(wall), NewStat(wallVs)
			row.CPUPerPod, row.CPUVsStock = NewStat(cpu), NewStat(cpuVs)
			row.KiBPerPod, row.AllocsPerPod = NewStat(kib), NewStat(allocs)
			rows = append(rows, row)
		}
	}
	return rows
}

// WriteUpstreamTable writes rows as a Markdown table: each value is the
// median over the runs, with the spread (min-max) where there is more than
// one run.
func WriteUpstreamTable(w io.Writer, rows []UpstreamRow) error {
	var b strings.Builder
	b.WriteString("| test case | workload | variant | runs | pods/s average | vs stock | pods/s by wall time | vs stock | CPU ms per pod | vs stock | KiB allocated per pod | allocations per pod |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		avg := "no samples"
		if r.Average.N > 0 {
			avg = stat(r.Average, "%.1f")
		}
		vs, wallVs, cpuVs := stat(r.VsStock, "%.2f"), stat(r.WallVsStock, "%.2f"), stat(r.CPUVsStock, "%.3f")
		if r.Variant == VariantStock {
			vs, wallVs, cpuVs = "1", "1", "1"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.TestCase, r.Workload, r.Variant, r.Runs,
			avg, vs, stat(r.WallPerSec, "%.1f"), wallVs, stat(r.CPUPerPod, "%.2f"), cpuVs, stat(r.KiBPerPod, "%.0f"), stat(r.AllocsPerPod, "%.0f"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
