package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cpuRaw is `go tool pprof -raw` of a CPU profile, cut down: four
// samples, one of them in an atomic load inlined into a function with a
// generic shape's name (spaces), inlined into celsched's Filter, one in
// NodeOnly10Plugin's Go plugin (whose package is the harness's).
const cpuRaw = `PeriodType: cpu nanoseconds
Period: 10000000
Duration: 12.6
Samples:
samples/count cpu/nanoseconds
          1   10000000: 1 2 
          3   30000000: 3 4 
          2   20000000: 5 
          4   40000000: 6 7 
Locations
     1: 0x41b6bb M=1 sync/atomic.(*Uintptr).Load /go/src/sync/atomic/type.go:200:0 s=199
             github.com/celsched/celsched/engine/nodecache.(*objectSet[go.shape.struct { github.com/celsched/celsched/engine.val github.com/google/cel-go/common/types/ref.Val }]).load /src/engine/nodecache/nodecache.go:125:0 s=122
             github.com/celsched/celsched/celplugins/filter.(*Filter).Filter /src/celplugins/filter/filter.go:124:0 s=116
     2: 0x4a6f08 M=1 k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).RunFilterPlugins /mod/framework.go:1126:0 s=1105
     3: 0x4a6f10 M=1 runtime.mallocgc /go/src/runtime/malloc.go:1000:0 s=990
     4: 0x4a6f20 M=1 k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).RunScorePlugins /mod/framework.go:1410:0 s=1405
     5: 0x4a6f30 M=1 main.main /src/main.go:3:0 s=1
     6: 0x4a6f40 M=1 github.com/celsched/celsched/test/performance.nodeOnly10Plugin.Filter /src/test/performance/rulesplugin_test.go:60:0 s=59
     7: 0x4a6f50 M=1 k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).RunFilterPlugins /mod/framework.go:1126:0 s=1105
Mappings
1: 0x400000/0x3f9d000/0x0 /bin/perf.test 070f6dda [FN]
`

// allocsRaw is the -raw text of a difference of allocation profiles: the
// default column is marked, label lines follow samples, and a value is
// negative.
const allocsRaw = `PeriodType: space bytes
Period: 524288
Samples:
alloc_objects/count alloc_space/bytes[dflt] inuse_objects/count inuse_space/bytes
         13     500000          0          0: 1 
                bytes:[40960]
          2    -200000          0          0: 1 
          9    1000000          0          0: 2 
Locations
     1: 0x41b6bb M=1 k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).runRawScorePlugins /mod/framework.go:1500:0 s=1490
     2: 0x41b6c0 M=1 k8s.io/apiserver/pkg/endpoints/handlers.createHandler /mod/create.go:10:0 s=1
`

func TestGroupSums(t *testing.T) {
	cpu, err := groupSums([]byte(cpuRaw))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		// The frames inlined at the atomic load are celsched's, though the
		// stack also holds kube-scheduler's filter loop.
		"celsched's own code": 10000000,
		// mallocgc comes before the score loop that called it.
		"GC and allocation": 30000000,
		other:               20000000,
		// The workload's plugin is not the harness's, though its
		// package is.
		"the workload's Go plugin (NodeOnly10Plugin)": 40000000,
	}
	if len(cpu) != len(want) {
		t.Errorf("cpu groups = %v, want %v", cpu, want)
	}
	for g, v := range want {
		if cpu[g] != v {
			t.Errorf("cpu[%q] = %d, want %d (all: %v)", g, cpu[g], v, cpu)
		}
	}
	allocs, err := groupSums([]byte(allocsRaw))
	if err != nil {
		t.Fatal(err)
	}
	if got := allocs["kube-scheduler: score bookkeeping"]; got != 300000 {
		t.Errorf("score bookkeeping = %d, want 300000 (the [dflt] column, the negative sample subtracted; all: %v)", got, allocs)
	}
	if got := allocs["the API server and etcd's client"]; got != 1000000 {
		t.Errorf("API server = %d, want 1000000 (all: %v)", got, allocs)
	}
	if _, err := groupSums([]byte("no profile here\n")); err == nil {
		t.Error("groupSums of a text without samples: no error")
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	touch := func(names ...string) {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ns := range []string{"stock-1", "stock-2", "native-1", "celsched-1", "celsched-2"} {
		base := "Mixed100_1000Nodes_NoBatching_" + ns
		touch(base+".pprof", base+".allocs-start.pprof", base+".allocs.pprof")
	}
	// A phase without its end profile, another workload and a namespace
	// that is no phase's are left out or filtered.
	touch("Mixed100_1000Nodes_NoBatching_celsched-3.allocs-start.pprof", "Mixed100_1000Nodes_NoBatching_celsched-3.pprof")
	touch("NodeOnly10_1000Nodes_NoBatching_stock-1.pprof", "NodeOnly10_1000Nodes_NoBatching_stock-1.allocs-start.pprof", "NodeOnly10_1000Nodes_NoBatching_stock-1.allocs.pprof")
	touch("Mixed100_1000Nodes_NoBatching_init.pprof", "Mixed100_1000Nodes_NoBatching_init.allocs-start.pprof", "Mixed100_1000Nodes_NoBatching_init.allocs.pprof")
	calls := 0
	raw := func(cpu, base, allocs string) ([]byte, error) {
		calls++
		if cpu != "" {
			// celsched's frames in the celsched phases only, the Go
			// plugin's in the native phase only.
			text := cpuRaw
			if !strings.Contains(cpu, "_celsched-") {
				text = strings.NewReplacer("github.com/celsched/celsched/engine/", "example.com/", "github.com/celsched/celsched/celplugins/", "example.com/").Replace(text)
			}
			if !strings.Contains(cpu, "_native-") {
				text = strings.ReplaceAll(text, "github.com/celsched/celsched/test/performance.nodeOnly10Plugin.", "example.com/plugin.")
			}
			return []byte(text), nil
		}
		if !strings.HasSuffix(base, ".allocs-start.pprof") || !strings.HasSuffix(allocs, ".allocs.pprof") {
			t.Errorf("allocations of %q against %q", allocs, base)
		}
		return []byte(allocsRaw), nil
	}
	var out strings.Builder
	if err := run(&out, dir, regexp.MustCompile("^Mixed100_"), raw); err != nil {
		t.Fatal(err)
	}
	if calls != 10 {
		t.Errorf("%d profiles read, want 10 (five phases, a CPU and an allocation profile each)", calls)
	}
	text := out.String()
	for _, want := range []string{
		"Mixed100_1000Nodes_NoBatching (phases: stock 2 native 1 celsched 2)",
		"| group | stock CPU s | stock MB | native CPU s | native MB | celsched CPU s | celsched MB | native - stock, CPU | native - stock, allocated | celsched - stock, CPU | celsched - stock, allocated |",
		// celsched's 2 x 10 ms against none in stock, whose total is 2 x
		// 100 ms; the native phase's none.
		"| celsched's own code | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | +0.0 s (+0.0%) | +0.0 MB (+0.0%) | +0.0 s (+10.0%) | +0.0 MB (+0.0%) |",
		// The native phase's plugin: 40 ms.
		"| the workload's Go plugin (NodeOnly10Plugin) | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | +0.0 s (+20.0%) | +0.0 MB (+0.0%) | +0.0 s (+0.0%) | +0.0 MB (+0.0%) |",
		// The one native phase is half the two stock phases.
		"| all | 0.2 | 2.5 | 0.1 | 1.2 | 0.2 | 2.5 | -0.1 s (-50.0%) | -1.2 MB (-50.0%) | +0.0 s (+0.0%) | +0.0 MB (+0.0%) |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "NodeOnly10_") {
		t.Errorf("output has the filtered workload:\n%s", text)
	}
	if err := run(&out, t.TempDir(), nil, raw); err == nil {
		t.Error("a directory without profiles: no error")
	}
}
