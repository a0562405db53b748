package perfdata

import (
	"math"
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

func TestRows(t *testing.T) {
	items := &DataItems{Version: "v1", DataItems: []DataItem{
		item("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/stock", 300, 290),
		other("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/stock"),
		item("BenchmarkPerfScheduling/NodeOnly10/5000Nodes_Batching/celsched", 60, 58),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_NoBatching/stock", 200, 100),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_NoBatching/celsched", 100, 75),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/celsched", 50, 50),
		item("BenchmarkPerfScheduling/NodeOnly10/1000Nodes_Batching/stock", 400, 200),
		item("BenchmarkPerfScheduling/Mixed100/1000Nodes_Batching/stock", 400, 200),
		noSamples("BenchmarkPerfScheduling/Mixed100/1000Nodes_Batching/celsched"),
		noSamples("BenchmarkPerfScheduling/Spread/100Nodes_Batching_Smoke/stock"),
		item("BenchmarkPerfScheduling/Spread/1000Nodes_Batching/celsched", 10, 10),
	}}
	results, err := Results(items)
	if err != nil {
		t.Fatal(err)
	}
	nan := math.NaN()
	want := []Row{
		{Result{"Spread", "stock", 100, true, "Smoke", false, 0, 0}, nan, nan},
		{Result{"NodeOnly10", "stock", 1000, true, "", true, 400, 200}, 1, 1},
		{Result{"NodeOnly10", "celsched", 1000, true, "", true, 50, 50}, 0.125, 0.25},
		{Result{"NodeOnly10", "stock", 1000, false, "", true, 200, 100}, 1, 1},
		{Result{"NodeOnly10", "celsched", 1000, false, "", true, 100, 75}, 0.5, 0.75},
		{Result{"Mixed100", "stock", 1000, true, "", true, 400, 200}, 1, 1},
		{Result{"Mixed100", "celsched", 1000, true, "", false, 0, 0}, nan, nan},
		{Result{"Spread", "celsched", 1000, true, "", true, 10, 10}, nan, nan},
		{Result{"NodeOnly10", "stock", 5000, true, "", true, 300, 290}, 1, 1},
		{Result{"NodeOnly10", "celsched", 5000, true, "", true, 60, 58}, 0.2, 0.2},
	}
	if diff := cmp.Diff(want, Rows(results), cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}

	var b strings.Builder
	if err := WriteTable(&b, Rows(results)); err != nil {
		t.Fatal(err)
	}
	wantTable := `| nodes | workload | profile | batching | pods/s average | pods/s p50 | average vs stock | p50 vs stock |
|---:|---|---|---|---:|---:|---:|---:|
| 100 (Smoke) | Spread | stock | on | no samples | no samples | - | - |
| 1000 | NodeOnly10 | stock | on | 400.0 | 200.0 | 1 | 1 |
| 1000 | NodeOnly10 | celsched | on | 50.0 | 50.0 | 0.12 | 0.25 |
| 1000 | NodeOnly10 | stock | off | 200.0 | 100.0 | 1 | 1 |
| 1000 | NodeOnly10 | celsched | off | 100.0 | 75.0 | 0.50 | 0.75 |
| 1000 | Mixed100 | stock | on | 400.0 | 200.0 | 1 | 1 |
| 1000 | Mixed100 | celsched | on | no samples | no samples | - | - |
| 1000 | Spread | celsched | on | 10.0 | 10.0 | - | - |
| 5000 | NodeOnly10 | stock | on | 300.0 | 290.0 | 1 | 1 |
| 5000 | NodeOnly10 | celsched | on | 60.0 | 58.0 | 0.20 | 0.20 |
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
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Results(&DataItems{DataItems: []DataItem{item(dataItemName, 1, 1)}}); err == nil {
				t.Errorf("Results(%q): no error", dataItemName)
			}
		})
	}
}
