package performance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/performance/perfdata"
)

// TestUpstreamSmoke runs upstream's smallest SchedulingBasic workload (5
// nodes, 10 measured pods) once in each variant of the upstream suite
// through the real harness, as `make perf-upstream` runs the suite's
// workloads, so that the suite cannot rot between its runs: upstream's
// configuration loads as the pinned module ships it; in every variant each
// of the 10 measured pods is bound (the phase meter counts them, and fails
// the workload otherwise); the celsched variants' scheduler runs the CEL
// plugins as default-scheduler and compiles their policy sets, the stock
// one does not run them (the prepare hook fails the workload otherwise);
// and the table reads the four rows.
func TestUpstreamSmoke(t *testing.T) {
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
	cmd := exec.Command(os.Args[0],
		"-test.run=^$",
		"-test.bench=^BenchmarkPerfSchedulingUpstream$",
		"-test.benchtime=1x",
		"-test.timeout=5m",
		"-perf-scheduling-label-filter=",
		"-upstream-workloads=SchedulingBasic/5Nodes",
		"-upstream-runs=1",
		"-data-items-dir="+dir,
		"-celsched-phases="+filepath.Join(dir, perfdata.PhasesFile),
	)
	cmd.Env = append(os.Environ(), "PATH="+path, "ARTIFACTS="+logs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, failedLogs(t, logs))
	}
	results, err := perfdata.LoadUpstream(dir)
	if err != nil {
		t.Fatal(err)
	}
	const pods = 10
	var rows []string
	for _, r := range results {
		rows = append(rows, r.TestCase+"/"+r.Workload+"/"+r.Variant)
		if p := r.Phase; p == nil || p.Pods != pods || p.Namespace != "namespace-2" || p.CPUSeconds <= 0 || p.AllocObjects == 0 {
			t.Errorf("%s %s: phase %+v, want %d pods of namespace-2 bound, with some CPU time and allocations", r.TestCase, r.Variant, p, pods)
		}
	}
	var want []string
	for _, v := range perfdata.Variants {
		want = append(want, "SchedulingBasic/5Nodes/"+v)
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("measured phases (-want +got):\n%s", diff)
	}
	if got := len(perfdata.UpstreamRows(results)); got != len(perfdata.Variants) {
		t.Errorf("%d rows of the table, want %d", got, len(perfdata.Variants))
	}
}
