package perfdata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func item(name string, avg, p50 float64) DataItem {
	return DataItem{
		Data:   map[string]float64{"Average": avg, "Perc50": p50, "Perc90": 1},
		Unit:   "pods/s",
		Labels: map[string]string{"Metric": "SchedulingThroughput", "Name": name},
	}
}

// noSamples is what scheduler_perf writes when scheduling took under two
// seconds, after filling in missing labels.
func noSamples(name string) DataItem {
	return DataItem{Labels: map[string]string{"Metric": "not applicable", "Name": name}}
}

func other(name string) DataItem {
	return DataItem{
		Data:   map[string]float64{"Average": 3},
		Unit:   "ms",
		Labels: map[string]string{"Metric": "scheduler_pod_scheduling_duration_seconds", "Name": name},
	}
}

var approx = cmp.Options{cmpopts.EquateApprox(0, 1e-9)}

func TestNewStat(t *testing.T) {
	for name, tc := range map[string]struct {
		values []float64
		want   Stat
	}{
		"none":                 {nil, Stat{}},
		"one":                  {[]float64{2}, Stat{N: 1, Median: 2, Min: 2, Max: 2}},
		"three, unsorted":      {[]float64{3, 0.5, 1}, Stat{N: 3, Median: 1, Min: 0.5, Max: 3}},
		"four: middle two":     {[]float64{4, 1, 2, 10}, Stat{N: 4, Median: 3, Min: 1, Max: 10}},
		"an outlier is spread": {[]float64{1, 1.1, 100}, Stat{N: 3, Median: 1.1, Min: 1, Max: 100}},
	} {
		t.Run(name, func(t *testing.T) {
			in := append([]float64(nil), tc.values...)
			if diff := cmp.Diff(tc.want, NewStat(in), approx); diff != "" {
				t.Errorf("NewStat(%v) (-want +got):\n%s", tc.values, diff)
			}
			if diff := cmp.Diff(tc.values, in); diff != "" {
				t.Errorf("NewStat changed its argument (-before +after):\n%s", diff)
			}
		})
	}
}

// TestRecorded reads the output of a TestPerfSmoke run (NodeOnly10Native,
// 100 nodes, 200 pods per phase, three runs of stock, native and celsched;
// the DataItems file trimmed to the throughput and one other metric) and
// checks the table's arithmetic against values worked out from the files by
// hand: each ratio is a run's phase over the same run's stock (native)
// phase, and the row gives the median and the spread of those ratios, not
// the ratio of the medians.
func TestRecorded(t *testing.T) {
	results, err := Load("testdata/smoke")
	if err != nil {
		t.Fatal(err)
	}
	const kib = 1024 * 200.0 // bytes per KiB, per pod of a phase
	want := []Row{{
		Workload: "NodeOnly10Native", Profile: StockProfile, Nodes: 100, Batching: true, Variant: "Smoke", Runs: 3,
		// stock-1 128.42, stock-2 46.21, stock-3 72.76 pods/s (one sample each)
		Average:   Stat{3, 72.7567797905045, 46.21125753650358, 128.42061180439055},
		P50:       Stat{3, 72.7567797905045, 46.21125753650358, 128.42061180439055},
		CPUPerPod: Stat{3, 1.220777 * 1000 / 200, 1.114814 * 1000 / 200, 1.368454 * 1000 / 200},
		KiBPerPod: Stat{3, 127827456 / kib, 125149552 / kib, 128970392 / kib},
	}, {
		Workload: "NodeOnly10Native", Profile: NativeProfile, Nodes: 100, Batching: true, Variant: "Smoke", Runs: 3,
		Average: Stat{3, 78.55529977745381, 74.00599926851646, 83.39096211215477},
		P50:     Stat{3, 41.11676666069014, 25.859661332958773, 47.164743051617805},
		// run 1 74.01/128.42, run 2 78.56/46.21, run 3 83.39/72.76
		VsStock:   Stat{3, 83.39096211215477 / 72.7567797905045, 74.00599926851646 / 128.42061180439055, 78.55529977745381 / 46.21125753650358},
		CPUPerPod: Stat{3, 1.588087 * 1000 / 200, 1.418877 * 1000 / 200, 1.773471 * 1000 / 200},
		KiBPerPod: Stat{3, 193373600 / kib, 191336872 / kib, 193375064 / kib},
	}, {
		Workload: "NodeOnly10Native", Profile: CelschedProfile, Nodes: 100, Batching: true, Variant: "Smoke", Runs: 3,
		Average: Stat{3, 110.7328898392509, 103.74632695107478, 124.18041452179467},
		P50:     Stat{3, 110.7328898392509, 103.74632695107478, 124.18041452179467},
		// run 1 110.73/128.42, run 2 124.18/46.21, run 3 103.75/72.76
		VsStock: Stat{3, 103.74632695107478 / 72.7567797905045, 110.7328898392509 / 128.42061180439055, 124.18041452179467 / 46.21125753650358},
		// run 1 110.73/74.01, run 2 124.18/78.56, run 3 103.75/83.39
		VsNative:  Stat{3, 110.7328898392509 / 74.00599926851646, 103.74632695107478 / 83.39096211215477, 124.18041452179467 / 78.55529977745381},
		CPUPerPod: Stat{3, 1.401008 * 1000 / 200, 1.310526 * 1000 / 200, 1.637634 * 1000 / 200},
		KiBPerPod: Stat{3, 132325352 / kib, 128334024 / kib, 135010152 / kib},
	}}
	rows := Rows(results)
	if diff := cmp.Diff(want, rows, approx); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}

	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	wantTable := `| nodes | workload | batching | profile | runs | pods/s average | pods/s p50 | vs stock | vs native | CPU ms per pod | KiB allocated per pod |
|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|
| 100 (Smoke) | NodeOnly10Native | on | stock | 3 | 72.8 (46.2-128.4) | 72.8 (46.2-128.4) | 1 | - | 6.10 (5.57-6.84) | 624 (611-630) |
| 100 (Smoke) | NodeOnly10Native | on | native | 3 | 78.6 (74.0-83.4) | 41.1 (25.9-47.2) | 1.15 (0.58-1.70) | 1 | 7.94 (7.09-8.87) | 944 (934-944) |
| 100 (Smoke) | NodeOnly10Native | on | celsched | 3 | 110.7 (103.7-124.2) | 110.7 (103.7-124.2) | 1.43 (0.86-2.69) | 1.50 (1.24-1.58) | 7.01 (6.55-8.19) | 646 (627-659) |
`
	if diff := cmp.Diff(wantTable, b.String()); diff != "" {
		t.Errorf("WriteTable (-want +got):\n%s", diff)
	}
}

// TestRows covers what the recorded run does not: node counts, batching
// and workloads sorted, a phase without samples or without a phases line,
// workloads without a native profile, and files of runs that measured each
// profile once (namespaces without a run number).
func TestRows(t *testing.T) {
	items := &DataItems{Version: "v1", DataItems: []DataItem{
		item("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/stock", 300, 290),
		other("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/stock"),
		item("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/celsched", 60, 58),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock-1", 400, 200),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/celsched-1", 200, 100),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/celsched-2", 300, 300),
		noSamples("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock-2"),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock-3", 100, 100),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/celsched-3", 90, 90),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_NoBatching/stock-1", 200, 100),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_NoBatching/celsched-1", 100, 75),
		item("BenchmarkPerfScheduling/Spread/1000Nodes_Batching/native-1", 50, 50),
		item("BenchmarkPerfScheduling/Spread/1000Nodes_Batching/celsched-1", 100, 100),
		noSamples("BenchmarkPerfScheduling/Spread/100Nodes_Batching_Smoke/stock-1"),
	}}
	phases := []Phase{
		{TestCase: "NodeOnly10", Workload: "1000Nodes_Batching", Namespace: "stock-1", Pods: 1000, CPUSeconds: 2, AllocBytes: 512 * 1024 * 1000},
		{TestCase: "NodeOnly10", Workload: "1000Nodes_Batching", Namespace: "celsched-1", Pods: 1000, CPUSeconds: 3, AllocBytes: 600 * 1024 * 1000},
		// a phase without samples still has its cost
		{TestCase: "NodeOnly10", Workload: "1000Nodes_Batching", Namespace: "stock-2", Pods: 1000, CPUSeconds: 2.5, AllocBytes: 520 * 1024 * 1000},
		// stock-3 and celsched-2, -3 have no line
		{TestCase: "Other", Workload: "1000Nodes_Batching", Namespace: "stock-1", Pods: 1000, CPUSeconds: 100},
	}
	results, err := Results(items, phases)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Workload: "Spread", Profile: "stock", Nodes: 100, Batching: true, Variant: "Smoke", Runs: 1},
		{
			Workload: "NodeOnly10", Profile: "stock", Nodes: 1000, Batching: true, Runs: 3,
			Average: Stat{2, 250, 100, 400}, P50: Stat{2, 150, 100, 200},
			CPUPerPod: Stat{2, 2.25, 2, 2.5}, KiBPerPod: Stat{2, 516, 512, 520},
		},
		{
			Workload: "NodeOnly10", Profile: "celsched", Nodes: 1000, Batching: true, Runs: 3,
			Average: Stat{3, 200, 90, 300}, P50: Stat{3, 100, 90, 300},
			// run 1 200/400, run 2 no stock samples, run 3 90/100: the
			// median of two ratios
			VsStock:   Stat{2, 0.7, 0.5, 0.9},
			CPUPerPod: Stat{1, 3, 3, 3}, KiBPerPod: Stat{1, 600, 600, 600},
		},
		{Workload: "NodeOnly10", Profile: "stock", Nodes: 1000, Runs: 1, Average: Stat{1, 200, 200, 200}, P50: Stat{1, 100, 100, 100}},
		{Workload: "NodeOnly10", Profile: "celsched", Nodes: 1000, Runs: 1, Average: Stat{1, 100, 100, 100}, P50: Stat{1, 75, 75, 75}, VsStock: Stat{1, 0.5, 0.5, 0.5}},
		{Workload: "Spread", Profile: "native", Nodes: 1000, Batching: true, Runs: 1, Average: Stat{1, 50, 50, 50}, P50: Stat{1, 50, 50, 50}},
		{Workload: "Spread", Profile: "celsched", Nodes: 1000, Batching: true, Runs: 1, Average: Stat{1, 100, 100, 100}, P50: Stat{1, 100, 100, 100}, VsNative: Stat{1, 2, 2, 2}},
		{Workload: "NodeOnly10", Profile: "stock", Nodes: 5000, Batching: true, Runs: 1, Average: Stat{1, 300, 300, 300}, P50: Stat{1, 290, 290, 290}},
		{Workload: "NodeOnly10", Profile: "celsched", Nodes: 5000, Batching: true, Runs: 1, Average: Stat{1, 60, 60, 60}, P50: Stat{1, 58, 58, 58}, VsStock: Stat{1, 0.2, 0.2, 0.2}},
	}
	rows := Rows(results)
	if diff := cmp.Diff(want, rows, approx); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}

	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	wantTable := `| nodes | workload | batching | profile | runs | pods/s average | pods/s p50 | vs stock | vs native | CPU ms per pod | KiB allocated per pod |
|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|
| 100 (Smoke) | Spread | on | stock | 1 | no samples | no samples | - | - | - | - |
| 1000 | NodeOnly10 | on | stock | 3 | 250.0 (100.0-400.0) | 150.0 (100.0-200.0) | 1 | - | 2.25 (2.00-2.50) | 516 (512-520) |
| 1000 | NodeOnly10 | on | celsched | 3 | 200.0 (90.0-300.0) | 100.0 (90.0-300.0) | 0.70 (0.50-0.90) | - | 3.00 | 600 |
| 1000 | NodeOnly10 | off | stock | 1 | 200.0 | 100.0 | 1 | - | - | - |
| 1000 | NodeOnly10 | off | celsched | 1 | 100.0 | 75.0 | 0.50 | - | - | - |
| 1000 | Spread | on | native | 1 | 50.0 | 50.0 | - | 1 | - | - |
| 1000 | Spread | on | celsched | 1 | 100.0 | 100.0 | - | 2.00 | - | - |
| 5000 | NodeOnly10 | on | stock | 1 | 300.0 | 290.0 | 1 | - | - | - |
| 5000 | NodeOnly10 | on | celsched | 1 | 60.0 | 58.0 | 0.20 | - | - | - |
`
	if diff := cmp.Diff(wantTable, b.String()); diff != "" {
		t.Errorf("WriteTable (-want +got):\n%s", diff)
	}
}

func TestResultsBadName(t *testing.T) {
	for name, dataItemName := range map[string]string{
		"three parts":  "BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching",
		"no nodes":     "BenchmarkPerfScheduling/NodeOnly10/Batching/stock",
		"no batching":  "BenchmarkPerfScheduling/NodeOnly10/1000Nodes/stock",
		"bad batching": "BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Sometimes/stock",
		"bad profile":  "BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/init",
		"run 0":        "BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock-0",
		"bad run":      "BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock-x",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Results(&DataItems{DataItems: []DataItem{item(dataItemName, 1, 1)}}, nil); err == nil {
				t.Errorf("Results(%q): no error", dataItemName)
			}
		})
	}
}

// TestPhasesFile checks that AppendPhase and ReadPhases round-trip, and
// that a broken line is an error naming it.
func TestPhasesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), PhasesFile)
	want := []Phase{
		{TestCase: "NodeOnly10", Workload: "1000Nodes_Batching", Namespace: "stock-1", Pods: 3000, WallSeconds: 6.5, CPUSeconds: 9.25, GCCPUSeconds: 2, GCCycles: 40, AllocBytes: 1 << 31, AllocObjects: 1 << 24},
		{TestCase: "NodeOnly10", Workload: "1000Nodes_Batching", Namespace: "celsched-1", Pods: 3000},
	}
	for _, p := range want {
		if err := AppendPhase(path, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadPhases(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadPhases (-want +got):\n%s", diff)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{\"pods\": \"many\"}\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPhases(path); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Errorf("ReadPhases of a file whose line 3 is broken: %v, want an error naming line 3", err)
	}
}
