package performance

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/performance/perfdata"
)

// TestPerfSmoke runs the smallest workload of performance-config.yaml
// (100Nodes_Batching_Smoke: 100 nodes, 200 pods per phase) of
// NodeOnly10Native through the real harness, so that the harness cannot rot
// between `make perf` runs. It checks where the pods landed and that every
// phase was measured, not how fast: every measured pod is scheduled; the
// native and celsched phases put none on the nodes the ten rules block,
// while the plain stock phases, which have no rules, did (so the check can
// tell); each phase's line in the phases file counts its pods and some CPU
// time and allocations; and the output reads as the table's three rows.
//
// scheduler_perf's entry point is a benchmark (RunBenchmarkPerfScheduling
// needs a *testing.B for the out-of-tree registry), so this runs the test
// binary itself with -test.bench, as `make perf` does.
func TestPerfSmoke(t *testing.T) {
	path := os.Getenv("PATH")
	if _, err := exec.LookPath("etcd"); err != nil {
		assets := os.Getenv("KUBEBUILDER_ASSETS")
		if assets == "" {
			t.Fatal("etcd is not on the PATH and KUBEBUILDER_ASSETS is not set: run through make test, which builds etcd into bin/")
		}
		path = assets + string(os.PathListSeparator) + path
	}
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	placements := filepath.Join(dir, "placements.json")
	cmd := exec.Command(os.Args[0],
		"-test.run=^$",
		"-test.bench=^BenchmarkPerfScheduling$/^NodeOnly10Native$/^100Nodes_Batching_Smoke$",
		"-test.benchtime=1x",
		"-test.timeout=10m",
		"-perf-scheduling-label-filter=smoke",
		"-data-items-dir="+dir,
		"-celsched-placements="+placements,
		"-celsched-phases="+filepath.Join(dir, perfdata.PhasesFile),
	)
	// ARTIFACTS: each workload logs to a file of its own there, kept if
	// it fails.
	cmd.Env = append(os.Environ(), "PATH="+path, "ARTIFACTS="+logs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, failedLogs(t, logs))
	}

	const pods = 200
	ps := readPlacements(t, placements)
	if len(ps) != 1 || ps[0].TestCase != "NodeOnly10Native" {
		t.Fatalf("placements recorded: %+v, want one of NodeOnly10Native", ps)
	}
	if ps[0].Policies != 10 {
		t.Errorf("%d policies stored, want 10", ps[0].Policies)
	}
	profiles := []string{perfdata.StockProfile, perfdata.NativeProfile, perfdata.CelschedProfile}
	var wantNamespaces []string
	for _, profile := range profiles {
		for run := 1; run <= 3; run++ {
			ns := fmt.Sprintf("%s-%d", profile, run)
			wantNamespaces = append(wantNamespaces, ns)
			got := ps[0].Namespaces[ns]
			if got.Pods != pods || got.Scheduled != pods {
				t.Errorf("%s: %d of %d measured pods scheduled, want %d of %d", ns, got.Scheduled, got.Pods, pods, pods)
			}
			switch blocked := got.OnBlockedNodes; {
			case profile != perfdata.StockProfile && blocked != 0:
				t.Errorf("%s: %d pods on nodes that the rules block, want none", ns, blocked)
			case profile == perfdata.StockProfile && blocked == 0:
				t.Errorf("%s: no pod on the nodes that the rules block: the plain stock pods have no rules, so about a tenth of them should be there", ns)
			}
		}
	}

	results, err := perfdata.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, r := range results {
		p := r.Phase
		if p == nil {
			t.Errorf("%s-%d: no line in the phases file", r.Profile, r.Run)
			continue
		}
		phases = append(phases, p.Namespace)
		if p.Pods != pods || p.CPUSeconds <= 0 || p.WallSeconds <= 0 || p.AllocBytes == 0 || p.AllocObjects == 0 {
			t.Errorf("%s: phase %+v, want %d pods and some wall time, CPU time and allocations", p.Namespace, *p, pods)
		}
	}
	slices.Sort(phases)
	slices.Sort(wantNamespaces)
	if diff := cmp.Diff(wantNamespaces, phases); diff != "" {
		t.Errorf("measured phases (-want +got):\n%s", diff)
	}
	var rows []string
	for _, r := range perfdata.Rows(results) {
		rows = append(rows, fmt.Sprintf("%s/%s/%d runs", r.Workload, r.Profile, r.Runs))
		if r.CPUPerPod.N != 3 || r.KiBPerPod.N != 3 {
			t.Errorf("%s/%s: CPU per pod over %d runs, KiB per pod over %d, want 3", r.Workload, r.Profile, r.CPUPerPod.N, r.KiBPerPod.N)
		}
	}
	want := []string{"NodeOnly10Native/stock/3 runs", "NodeOnly10Native/native/3 runs", "NodeOnly10Native/celsched/3 runs"}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows of the perf table (-want +got):\n%s", diff)
	}
	if *keepSmoke != "" {
		if err := os.CopyFS(*keepSmoke, os.DirFS(dir)); err != nil {
			t.Error(err)
		}
	}
}

// keepSmoke, when set, is a directory (that must not exist) where
// TestPerfSmoke copies its run's output, e.g. to record perfdata's test
// data.
var keepSmoke = flag.String("celsched-keep-smoke", "", "copy TestPerfSmoke's output (DataItems, phases, placements) into this new directory")

func readPlacements(t *testing.T, path string) []placement {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ps []placement
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p placement
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ps = append(ps, p)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ps
}

// failedLogs returns the end of the logs that failed workloads left.
func failedLogs(t *testing.T, dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Log(err)
			continue
		}
		const tail = 20000
		if len(data) > tail {
			data = data[len(data)-tail:]
		}
		b.WriteString("\n--- end of " + filepath.Base(f) + ":\n")
		b.Write(data)
	}
	return b.String()
}
