package performance

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/performance/perfdata"
)

// TestPerfSmoke runs the smallest workload of performance-config.yaml
// (100Nodes_Batching_Smoke: 100 nodes, 200 pods per profile) of NodeOnly10
// through the real harness, so that the harness cannot rot between `make
// perf` runs. It checks where the pods
// landed, not how fast: every measured pod is scheduled; the celsched
// profile put none on the nodes its ten policies block, while the stock
// profile, which ignores them, did (so the check can tell); and the
// DataItems output reads as both rows of the perf table.
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
		"-test.bench=^BenchmarkPerfScheduling$/^NodeOnly10$/^100Nodes_Batching_Smoke$",
		"-test.benchtime=1x",
		"-test.timeout=10m",
		"-perf-scheduling-label-filter=smoke",
		"-data-items-dir="+dir,
		"-celsched-placements="+placements,
	)
	// ARTIFACTS: each workload logs to a file of its own there, kept if
	// it fails.
	cmd.Env = append(os.Environ(), "PATH="+path, "ARTIFACTS="+logs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, failedLogs(t, logs))
	}

	ps := readPlacements(t, placements)
	if len(ps) != 1 || ps[0].TestCase != "NodeOnly10" {
		t.Fatalf("placements recorded: %+v, want one of NodeOnly10", ps)
	}
	if ps[0].Policies != 10 {
		t.Errorf("%d policies stored, want 10", ps[0].Policies)
	}
	// The namespaces of the measured pods are named after their profiles.
	for _, profile := range []string{"stock", "celsched"} {
		ns := ps[0].Namespaces[profile]
		if ns.Pods != 200 || ns.Scheduled != 200 {
			t.Errorf("%s: %d of %d measured pods scheduled, want 200 of 200", profile, ns.Scheduled, ns.Pods)
		}
		switch blocked := ns.OnBlockedNodes; {
		case profile == "celsched" && blocked != 0:
			t.Errorf("%s: %d pods on nodes that the policies block, want none", profile, blocked)
		case profile == "stock" && blocked == 0:
			t.Errorf("%s: no pod on the nodes that the policies block: the stock profile ignores the policies, so about a tenth of its pods should be there", profile)
		}
	}

	file, err := perfdata.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, err := perfdata.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	results, err := perfdata.Results(items)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range perfdata.Rows(results) {
		rows = append(rows, r.Workload+"/"+r.Profile)
	}
	if diff := cmp.Diff([]string{"NodeOnly10/stock", "NodeOnly10/celsched"}, rows); diff != "" {
		t.Errorf("rows of the perf table (-want +got):\n%s", diff)
	}
}

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
