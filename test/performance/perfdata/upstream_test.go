package perfdata

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseUpstreamTestCase(t *testing.T) {
	type parsed struct {
		TestCase, Variant string
		Run               int
		OK                bool
	}
	tests := map[string]parsed{
		"SchedulingBasic_stock_1":              {"SchedulingBasic", VariantStock, 1, true},
		"Some_Case_matching_12":                {"Some_Case", VariantMatching, 12, true},
		UpstreamTestCase("X", "nopolicies", 3): {"X", VariantNoPolicies, 3, true},
		"SchedulingBasic_native_1":             {},
		"SchedulingBasic_stock_0":              {},
		"SchedulingBasic_stock":                {},
		"_stock_1":                             {},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			var got parsed
			got.TestCase, got.Variant, got.Run, got.OK = ParseUpstreamTestCase(name)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpstreamRows(t *testing.T) {
	item := func(testCase, variant string, run int, avg float64) DataItem {
		return DataItem{
			Data:   map[string]float64{averageBucket: avg, p50Bucket: avg},
			Labels: map[string]string{"Metric": throughputMetric, "Name": "BenchmarkPerfSchedulingUpstream/" + UpstreamTestCase(testCase, variant, run) + "/500Nodes/10Init/namespace-3"},
		}
	}
	phase := func(testCase, variant string, run int, cpu float64) Phase {
		return Phase{TestCase: UpstreamTestCase(testCase, variant, run), Workload: "500Nodes/10Init", Namespace: "namespace-3", Pods: 100, WallSeconds: 1, CPUSeconds: cpu, AllocBytes: 102400, AllocObjects: 1000}
	}
	items := &DataItems{DataItems: []DataItem{
		item("U", VariantStock, 1, 100), item("U", VariantMatching, 1, 90),
		item("U", VariantMatching, 2, 120), item("U", VariantStock, 2, 100),
		// scheduler_perf's item without samples
		{Labels: map[string]string{"Metric": "not applicable", "Name": "BenchmarkPerfSchedulingUpstream/" + UpstreamTestCase("U", VariantNoPolicies, 1) + "/500Nodes/10Init/namespace-3"}},
	}}
	phases := []Phase{phase("U", VariantStock, 1, 1), phase("U", VariantMatching, 1, 1.1), phase("U", VariantStock, 2, 1), phase("U", VariantMatching, 2, 1.3), phase("U", VariantNoPolicies, 1, 1)}
	results, err := UpstreamResults(items, phases)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteUpstreamTable(&b, UpstreamRows(results)); err != nil {
		t.Fatal(err)
	}
	want := `| test case | workload | variant | runs | pods/s average | vs stock | pods/s by wall time | vs stock | CPU ms per pod | vs stock | KiB allocated per pod | allocations per pod |
|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| U | 500Nodes/10Init | stock | 2 | 100.0 (100.0-100.0) | 1 | 100.0 (100.0-100.0) | 1 | 10.00 (10.00-10.00) | 1 | 1 (1-1) | 10 (10-10) |
| U | 500Nodes/10Init | nopolicies | 1 | no samples | - | 100.0 | 1.00 | 10.00 | 1.000 | 1 | 10 |
| U | 500Nodes/10Init | matching | 2 | 105.0 (90.0-120.0) | 1.05 (0.90-1.20) | 100.0 (100.0-100.0) | 1.00 (1.00-1.00) | 12.00 (11.00-13.00) | 1.200 (1.100-1.300) | 1 (1-1) | 10 (10-10) |
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
