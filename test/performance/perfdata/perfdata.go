// Package perfdata reads the DataItems files that scheduler_perf writes
// (BenchmarkPerfScheduling_benchmark_<topic>_<time>.json) for celsched's
// workloads (test/performance) and lays their scheduling throughput out as
// one table, each celsched row with its ratio to the stock profile's row of
// the same workload, node count and batching, from the same file.
package perfdata

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DataItems is scheduler_perf's output format (benchmark.DataItems, which
// perf-dash reads), as far as this package needs it.
type DataItems struct {
	Version   string     `json:"version"`
	DataItems []DataItem `json:"dataItems"`
}

// DataItem is one measurement: Data maps a bucket (Average, Perc50, ...) to
// its value; Labels carry Name (test name and namespace) and Metric.
type DataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// The metric and buckets of the throughput, as scheduler_perf names them.
const (
	throughputMetric = "SchedulingThroughput"
	averageBucket    = "Average"
	p50Bucket        = "Perc50"
	// StockProfile is the profile that celsched rows are compared with.
	StockProfile = "stock"
)

// Read reads a DataItems file.
func Read(path string) (*DataItems, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var items DataItems
	if err := json.Unmarshal(data, &items); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &items, nil
}

// Latest returns the newest DataItems file of BenchmarkPerfScheduling in
// dir (the names end with their UTC time, so the last in name order).
func Latest(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "BenchmarkPerfScheduling_benchmark_*.json"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no BenchmarkPerfScheduling_benchmark_*.json in %s", dir)
	}
	sort.Strings(files)
	return files[len(files)-1], nil
}

// Result is the throughput of one workload run.
type Result struct {
	// Workload is the test case, e.g. NodeOnly10.
	Workload string
	// Profile is stock or celsched: the namespace of the measured pods.
	Profile string
	Nodes   int
	// Batching says whether OpportunisticBatching was on.
	Batching bool
	// Variant is what follows <N>Nodes_<Batching|NoBatching>_ in the
	// workload name, e.g. Smoke.
	Variant string
	// Measured says whether scheduler_perf took throughput samples (it
	// takes one per second, none when scheduling took under two seconds).
	Measured bool
	// Average and P50 are pods/s, as scheduler_perf reports them.
	Average, P50 float64
}

// Results returns the throughput of every workload in items, in the order
// they appear. A workload that scheduler_perf could not sample is a Result
// with Measured false.
func Results(items *DataItems) ([]Result, error) {
	var results []Result
	index := map[string]int{}
	for _, item := range items.DataItems {
		metric := item.Labels["Metric"]
		// A throughput without samples comes without data and metric
		// ("not applicable").
		if metric != throughputMetric && item.Data != nil {
			continue
		}
		r, err := parseName(item.Labels["Name"])
		if err != nil {
			return nil, err
		}
		if metric == throughputMetric {
			r.Measured, r.Average, r.P50 = true, item.Data[averageBucket], item.Data[p50Bucket]
		}
		key := item.Labels["Name"]
		if i, ok := index[key]; ok {
			if r.Measured {
				results[i] = r
			}
			continue
		}
		index[key] = len(results)
		results = append(results, r)
	}
	return results, nil
}

// parseName parses a DataItem's Name, which scheduler_perf makes of the
// test name and the namespace of the measured pods, named after their
// profile (performance-config.yaml):
// BenchmarkPerfScheduling/<Workload>/<N>Nodes_<Batching|NoBatching>[_<variant>]/<profile>.
func parseName(name string) (Result, error) {
	bad := func(why string) (Result, error) {
		return Result{}, fmt.Errorf("data item %q: %s (want BenchmarkPerfScheduling/<Workload>/<N>Nodes_<Batching|NoBatching>[_<variant>]/<profile>)", name, why)
	}
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return bad("not four parts")
	}
	r := Result{Workload: parts[1], Profile: parts[3]}
	fields := strings.SplitN(parts[2], "_", 3)
	if len(fields) < 2 {
		return bad("no batching")
	}
	nodes, ok := strings.CutSuffix(fields[0], "Nodes")
	n, err := strconv.Atoi(nodes)
	if !ok || err != nil {
		return bad("no node count")
	}
	r.Nodes = n
	switch fields[1] {
	case "Batching":
		r.Batching = true
	case "NoBatching":
	default:
		return bad("neither Batching nor NoBatching")
	}
	if len(fields) == 3 {
		r.Variant = fields[2]
	}
	return r, nil
}

// Row is a Result with its ratios to the stock row of the same workload,
// nodes, batching and variant (NaN when there is none, or it has no
// samples).
type Row struct {
	Result
	AverageRatio, P50Ratio float64
}

// Rows sorts results by node count, workload (in first-appearance order),
// batching (on first) and profile (stock first), and adds the ratios.
func Rows(results []Result) []Row {
	order := map[string]int{}
	stock := map[Result]Result{}
	for _, r := range results {
		if _, ok := order[r.Workload]; !ok {
			order[r.Workload] = len(order)
		}
		if r.Profile == StockProfile {
			stock[key(r)] = r
		}
	}
	rows := make([]Row, len(results))
	for i, r := range results {
		rows[i] = Row{Result: r, AverageRatio: math.NaN(), P50Ratio: math.NaN()}
		if s, ok := stock[key(r)]; ok && s.Measured && r.Measured {
			rows[i].AverageRatio = r.Average / s.Average
			rows[i].P50Ratio = r.P50 / s.P50
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		switch {
		case a.Nodes != b.Nodes:
			return a.Nodes < b.Nodes
		case a.Variant != b.Variant:
			return a.Variant < b.Variant
		case a.Workload != b.Workload:
			return order[a.Workload] < order[b.Workload]
		case a.Batching != b.Batching:
			return a.Batching
		case a.Profile != b.Profile:
			return a.Profile == StockProfile
		}
		return false
	})
	return rows
}

// key identifies the stock row a row is compared with.
func key(r Result) Result {
	return Result{Workload: r.Workload, Nodes: r.Nodes, Batching: r.Batching, Variant: r.Variant}
}

// WriteTable writes rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| nodes | workload | profile | batching | pods/s average | pods/s p50 | average vs stock | p50 vs stock |\n")
	b.WriteString("|---:|---|---|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		nodes := strconv.Itoa(r.Nodes)
		if r.Variant != "" {
			nodes += " (" + r.Variant + ")"
		}
		batching := "off"
		if r.Batching {
			batching = "on"
		}
		avg, p50 := "no samples", "no samples"
		if r.Measured {
			avg, p50 = fmt.Sprintf("%.1f", r.Average), fmt.Sprintf("%.1f", r.P50)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", nodes, r.Workload, r.Profile, batching, avg, p50,
			ratio(r, r.AverageRatio), ratio(r, r.P50Ratio))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(r Row, v float64) string {
	switch {
	case !r.Measured:
		return "-"
	case r.Profile == StockProfile:
		return "1"
	case math.IsNaN(v):
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
