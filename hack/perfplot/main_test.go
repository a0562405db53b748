package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const header = "date,time_utc,commit,harness,scope,nodes,workload,batching,runs," +
	"celsched_vs_stock,celsched_vs_stock_min,celsched_vs_stock_max," +
	"celsched_vs_native,celsched_vs_native_min,celsched_vs_native_max\n"

func TestCollect(t *testing.T) {
	tests := map[string]struct {
		csv     string
		want    *data
		wantErr string
	}{
		"vs native where the row has it, vs stock otherwise; runs in file order": {
			csv: header +
				"2026-11-25,,5992b5f,scheduler_perf,full,5000,Spread,on,1,,,,2.13,,\n" +
				"2026-11-28,05:05,2ab26a2,scheduler_perf,full,5000,NodeOnly10,off,3,0.85,0.84,0.99,,,\n" +
				"2026-11-28,05:05,2ab26a2,scheduler_perf,full,5000,Spread,off,3,0.80,0.72,0.81,2.17,2.10,2.34\n",
			want: &data{
				runs: []runKey{
					{date: "2026-11-25", commit: "5992b5f", nodes: 5000, runs: "1"},
					{date: "2026-11-28", time: "05:05", commit: "2ab26a2", nodes: 5000, runs: "3"},
				},
				workloads: []string{"NodeOnly10", "Spread"},
				native:    map[string]bool{"Spread": true},
				points: map[string][]point{
					"NodeOnly10": {{run: 1, nodes: 5000, ratio: 0.85, min: 0.84, max: 0.99}},
					"Spread": {
						{run: 0, nodes: 5000, batching: true, ratio: 2.13},
						{run: 1, nodes: 5000, ratio: 2.17, min: 2.10, max: 2.34},
					},
				},
			},
		},
		"subsets and perf-binary rows are left out; unknown workloads last, by name": {
			csv: header +
				"2026-11-28,02:28,f351b6f,scheduler_perf,subset,1000,NodeOnly10,on,3,0.84,0.83,0.85,,,\n" +
				"2026-12-07,13:33,aa4b89b,perf-binary,perf-binary,1000,NodeOnly10,on,3,,,,,,\n" +
				"2026-11-28,08:11,a3a83a8,scheduler_perf,full,1000,Zeta,on,3,0.9,,,,,\n" +
				"2026-11-28,08:11,a3a83a8,scheduler_perf,full,1000,Alpha,on,3,1.1,,,,,\n" +
				"2026-11-28,08:11,a3a83a8,scheduler_perf,full,1000,NoPolicy,on,3,1.2,,,,,\n",
			want: &data{
				runs:      []runKey{{date: "2026-11-28", time: "08:11", commit: "a3a83a8", nodes: 1000, runs: "3"}},
				workloads: []string{"NoPolicy", "Alpha", "Zeta"},
				native:    map[string]bool{},
				points: map[string][]point{
					"Zeta":     {{nodes: 1000, batching: true, ratio: 0.9}},
					"Alpha":    {{nodes: 1000, batching: true, ratio: 1.1}},
					"NoPolicy": {{nodes: 1000, batching: true, ratio: 1.2}},
				},
			},
		},
		"a workload with both references is an error": {
			csv: header +
				"2026-11-27,,a,scheduler_perf,full,1000,Spread,on,3,0.8,,,1.3,,\n" +
				"2026-11-28,,b,scheduler_perf,full,1000,Spread,on,3,0.8,,,,,\n",
			wantErr: "workload Spread: 1 of its 2 full-run rows have a ratio to the native rules, the others to stock",
		},
		"a row without a ratio is an error": {
			csv:     header + "2026-11-28,,b,scheduler_perf,full,1000,NoPolicy,on,3,,,,,,\n",
			wantErr: "line 2: NoPolicy has no ratio",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rows, err := readRows(strings.NewReader(tc.csv))
			if err != nil {
				t.Fatal(err)
			}
			got, err := collect(rows)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(data{}, runKey{}, point{})); diff != "" {
				t.Errorf("collect (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCommittedPlot checks that docs/perf-history/ratios.svg is what the
// committed runs.csv draws: run `make perf-plot` after changing the CSV.
func TestCommittedPlot(t *testing.T) {
	in, err := os.Open("../../docs/perf-history/runs.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	rows, err := readRows(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := render(rows)
	if err != nil {
		t.Fatal(err)
	}
	again, err := render(rows)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, again) {
		t.Fatal("two renderings of the same rows differ")
	}
	want, err := os.ReadFile("../../docs/perf-history/ratios.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/perf-history/ratios.svg is not what docs/perf-history/runs.csv draws: run make perf-plot")
	}
}
