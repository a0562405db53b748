// Package perfdata reads what a `make perf` run of celsched's workloads
// (test/performance) leaves behind: the DataItems file that scheduler_perf
// writes (BenchmarkPerfScheduling_benchmark_<topic>_<time>.json), with the
// scheduling throughput of every measured phase, and the harness's phases
// file (phases.jsonl), with the process's CPU time and heap allocations
// over each phase. It lays them out as one table: per workload, node count,
// batching and profile, the median over the workload's runs and the spread
// (min-max) of pods/s, of the ratios to the plain stock profile and to the
// native equivalent of the same run, of CPU per pod and of bytes allocated
// per pod.
package perfdata

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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
)

// The profiles of the measured phases, named by the namespaces of their
// pods (performance-config.yaml): <profile>-<run>, or <profile> in the
// files of runs that measured each workload once.
const (
	// StockProfile is kube-scheduler's default profile on plain pods: what
	// having no rules costs.
	StockProfile = "stock"
	// NativeProfile is kube-scheduler's default profile on pods that carry
	// the workload's rules in their native form (node affinity, node
	// selector, topology spread), or a profile that runs them as a plugin
	// written in Go (NodeOnly10Plugin): what users would do instead.
	NativeProfile = "native"
	// CelschedProfile is the celsched profile, the rules as policies.
	CelschedProfile = "celsched"
)

// profileOrder orders a workload's rows.
var profileOrder = map[string]int{StockProfile: 0, NativeProfile: 1, CelschedProfile: 2}

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

// PhasesFile is the name of the harness's phases file in a run's
// directory.
const PhasesFile = "phases.jsonl"

// Phase is what the harness measured over one measured phase of a workload
// (the pods of one namespace), one JSON line of the phases file. It starts
// when the first pod of the phase is created and ends when its last pod is
// bound, as seen by the scheduler's pod informer. CPU and allocations are
// those of the whole test process: the scheduler (both profiles), the
// in-process kube-apiserver, and the harness's pod creation and
// collectors; etcd runs as a separate process and is not included.
type Phase struct {
	TestCase  string `json:"testCase"`
	Workload  string `json:"workload"`
	Namespace string `json:"namespace"`
	// Pods is the number of pods bound in the phase.
	Pods        int     `json:"pods"`
	WallSeconds float64 `json:"wallSeconds"`
	// CPUSeconds is the process's user and system time (getrusage).
	CPUSeconds float64 `json:"cpuSeconds"`
	// GCCPUSeconds is the Go runtime's estimate of the CPU time of garbage
	// collection (/cpu/classes/gc/total:cpu-seconds); GCCycles counts the
	// completed cycles.
	GCCPUSeconds float64 `json:"gcCPUSeconds"`
	GCCycles     uint64  `json:"gcCycles"`
	// AllocBytes and AllocObjects are the heap allocations of the process
	// (/gc/heap/allocs:bytes, /gc/heap/allocs:objects).
	AllocBytes   uint64 `json:"allocBytes"`
	AllocObjects uint64 `json:"allocObjects"`
}

// Name is the DataItem name of the phase's throughput.
func (p Phase) Name() string {
	return "BenchmarkPerfScheduling/" + p.TestCase + "/" + p.Workload + "/" + p.Namespace
}

// ReadPhases reads a phases file, one Phase per line.
func ReadPhases(path string) ([]Phase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var phases []Phase
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var p Phase
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		phases = append(phases, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return phases, nil
}

// AppendPhase appends p as one line to the phases file at path.
func AppendPhase(path string, p Phase) error {
	line, err := json.Marshal(p)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Result is one measured phase: the throughput of the pods of one profile
// in one run of a workload, and what the process spent on them.
type Result struct {
	// Workload is the test case, e.g. NodeOnly10.
	Workload string
	// Profile is stock, native or celsched.
	Profile string
	// Run numbers the runs of a workload in one cluster, from 1; 0 in
	// files of runs that measured each profile once.
	Run   int
	Nodes int
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
	// Phase is what the harness measured over the phase, nil if the
	// phases file has no line for it.
	Phase *Phase
}

// Results returns the throughput of every measured phase in items, in the
// order they appear, each with its line of phases (if any). A phase that
// scheduler_perf could not sample is a Result with Measured false.
func Results(items *DataItems, phases []Phase) ([]Result, error) {
	byName := map[string]*Phase{}
	for i := range phases {
		byName[phases[i].Name()] = &phases[i]
	}
	var results []Result
	index := map[string]int{}
	for _, item := range items.DataItems {
		metric := item.Labels["Metric"]
		// A throughput without samples comes without data and metric
		// ("not applicable").
		if metric != throughputMetric && item.Data != nil {
			continue
		}
		name := item.Labels["Name"]
		r, err := parseName(name)
		if err != nil {
			return nil, err
		}
		if metric == throughputMetric {
			r.Measured, r.Average, r.P50 = true, item.Data[averageBucket], item.Data[p50Bucket]
		}
		r.Phase = byName[name]
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

// parseName parses a DataItem's Name, which scheduler_perf makes of the
// test name and the namespace of the measured pods:
// BenchmarkPerfScheduling/<Workload>/<N>Nodes_<Batching|NoBatching>[_<variant>]/<profile>[-<run>].
func parseName(name string) (Result, error) {
	bad := func(why string) (Result, error) {
		return Result{}, fmt.Errorf("data item %q: %s (want BenchmarkPerfScheduling/<Workload>/<N>Nodes_<Batching|NoBatching>[_<variant>]/<profile>[-<run>])", name, why)
	}
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return bad("not four parts")
	}
	r := Result{Workload: parts[1]}
	profile, run, ok := ParseNamespace(parts[3])
	if !ok {
		return bad("no profile")
	}
	r.Profile, r.Run = profile, run
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

// ParseNamespace splits the namespace of a measured phase, <profile>-<run>
// or <profile>, into profile and run (0 for none); ok is false for a
// namespace that names no profile.
func ParseNamespace(ns string) (profile string, run int, ok bool) {
	profile = ns
	if p, r, found := strings.Cut(ns, "-"); found {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 {
			return "", 0, false
		}
		profile, run = p, n
	}
	if _, known := profileOrder[profile]; !known {
		return "", 0, false
	}
	return profile, run, true
}

// Stat is the median and the spread of a value over a workload's runs; N
// is the number of runs that have the value (none: N is 0).
type Stat struct {
	N                int
	Median, Min, Max float64
}

// NewStat returns the median, min and max of values (the mean of the two
// middle values for an even count).
func NewStat(values []float64) Stat {
	if len(values) == 0 {
		return Stat{}
	}
	v := append([]float64(nil), values...)
	sort.Float64s(v)
	n := len(v)
	median := v[n/2]
	if n%2 == 0 {
		median = (v[n/2-1] + v[n/2]) / 2
	}
	return Stat{N: n, Median: median, Min: v[0], Max: v[n-1]}
}

// Row is one profile of one workload, node count, batching and variant,
// over its runs.
type Row struct {
	Workload string
	Profile  string
	Nodes    int
	Batching bool
	Variant  string
	// Runs is the number of runs (phases) of this profile; Average and
	// P50 are over those that scheduler_perf sampled.
	Runs         int
	Average, P50 Stat
	// VsStock and VsNative are the ratios of this profile's average pods/s
	// to the stock (plain pods) and native profile's of the same run: N is
	// 0 where the workload has no such profile or no run has both sampled.
	VsStock, VsNative Stat
	// CPUPerPod is the process's CPU milliseconds per bound pod,
	// KiBPerPod its heap allocations per bound pod in KiB, over the runs
	// that the phases file has.
	CPUPerPod, KiBPerPod Stat
}

// Rows groups results by workload, node count, batching, variant and
// profile, and sorts them by node count, variant, workload (in
// first-appearance order), batching (on first) and profile (stock, native,
// celsched).
func Rows(results []Result) []Row {
	type groupKey struct {
		workload string
		nodes    int
		batching bool
		variant  string
	}
	type runKey struct {
		groupKey
		profile string
		run     int
	}
	order := map[string]int{}
	byRun := map[runKey]Result{}
	type rowKey struct {
		groupKey
		profile string
	}
	var keys []rowKey
	members := map[rowKey][]Result{}
	for _, r := range results {
		if _, ok := order[r.Workload]; !ok {
			order[r.Workload] = len(order)
		}
		g := groupKey{r.Workload, r.Nodes, r.Batching, r.Variant}
		byRun[runKey{g, r.Profile, r.Run}] = r
		k := rowKey{g, r.Profile}
		if _, ok := members[k]; !ok {
			keys = append(keys, k)
		}
		members[k] = append(members[k], r)
	}
	rows := make([]Row, 0, len(keys))
	for _, k := range keys {
		row := Row{Workload: k.workload, Profile: k.profile, Nodes: k.nodes, Batching: k.batching, Variant: k.variant, Runs: len(members[k])}
		var avg, p50, vsStock, vsNative, cpu, kib []float64
		for _, r := range members[k] {
			if p := r.Phase; p != nil && p.Pods > 0 {
				cpu = append(cpu, p.CPUSeconds*1000/float64(p.Pods))
				kib = append(kib, float64(p.AllocBytes)/1024/float64(p.Pods))
			}
			if !r.Measured {
				continue
			}
			avg, p50 = append(avg, r.Average), append(p50, r.P50)
			// Each run's ratio to the same run's stock (native) phase; the
			// stock row has neither, the native row no ratio to itself.
			if s, ok := byRun[runKey{k.groupKey, StockProfile, r.Run}]; ok && k.profile != StockProfile && s.Measured && s.Average > 0 {
				vsStock = append(vsStock, r.Average/s.Average)
			}
			if n, ok := byRun[runKey{k.groupKey, NativeProfile, r.Run}]; ok && k.profile == CelschedProfile && n.Measured && n.Average > 0 {
				vsNative = append(vsNative, r.Average/n.Average)
			}
		}
		row.Average, row.P50 = NewStat(avg), NewStat(p50)
		row.VsStock, row.VsNative = NewStat(vsStock), NewStat(vsNative)
		row.CPUPerPod, row.KiBPerPod = NewStat(cpu), NewStat(kib)
		rows = append(rows, row)
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
		}
		return profileOrder[a.Profile] < profileOrder[b.Profile]
	})
	return rows
}

// WriteTable writes rows as a Markdown table: each value is the median over
// the runs, with the spread (min-max) in parentheses where there is more
// than one run.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| nodes | workload | batching | profile | runs | pods/s average | pods/s p50 | vs stock | vs native | CPU ms per pod | KiB allocated per pod |\n")
	b.WriteString("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
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
		if r.Average.N > 0 {
			avg, p50 = stat(r.Average, "%.1f"), stat(r.P50, "%.1f")
		}
		vsStock, vsNative := stat(r.VsStock, "%.2f"), stat(r.VsNative, "%.2f")
		switch {
		case r.Average.N == 0:
		case r.Profile == StockProfile:
			vsStock = "1"
		case r.Profile == NativeProfile:
			vsNative = "1"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", nodes, r.Workload, batching, r.Profile, r.Runs,
			avg, p50, vsStock, vsNative, stat(r.CPUPerPod, "%.2f"), stat(r.KiBPerPod, "%.0f"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// stat formats s as "median (min-max)", or the median alone for one run,
// or "-" for none.
func stat(s Stat, format string) string {
	switch {
	case s.N == 0:
		return "-"
	case s.N == 1:
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ("+format+"-"+format+")", s.Median, s.Min, s.Max)
}

// Load reads a run's results from path: a DataItems file, or a run's
// directory (its newest DataItems file). The phases file is the one in the
// same directory, if there is one.
func Load(path string) ([]Result, error) {
	items, phases, err := readRun(path)
	if err != nil {
		return nil, err
	}
	return Results(items, phases)
}

// readRun reads a run's DataItems from path (a file, or a run's directory:
// its newest DataItems file) and the phases file of the same directory,
// if there is one.
func readRun(path string) (*DataItems, []Phase, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if fi.IsDir() {
		if path, err = Latest(path); err != nil {
			return nil, nil, err
		}
	}
	items, err := Read(path)
	if err != nil {
		return nil, nil, err
	}
	var phases []Phase
	phasesPath := filepath.Join(filepath.Dir(path), PhasesFile)
	if _, err := os.Stat(phasesPath); err == nil {
		if phases, err = ReadPhases(phasesPath); err != nil {
			return nil, nil, err
		}
	}
	return items, phases, nil
}
