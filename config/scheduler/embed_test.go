package scheduler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/placement"
	"github.com/celsched/celsched/celplugins/preemption"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
)

func TestBuiltInSchedulerConfig(t *testing.T) {
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "celsched" {
		t.Fatalf("profiles %+v, want one named celsched", cfg.Profiles)
	}
	plugins := cfg.Profiles[0].Plugins
	enabled := func(set []string) map[string]bool {
		out := map[string]bool{}
		for _, n := range set {
			out[n] = true
		}
		return out
	}
	var names []string
	for _, p := range plugins.MultiPoint.Enabled {
		names = append(names, p.Name)
	}
	for _, want := range []string{preenqueue.Name, filter.Name, score.Name, placement.Name, preemption.Name} {
		if !enabled(names)[want] {
			t.Errorf("plugin %s is not enabled in multiPoint: %v", want, names)
		}
	}
	// A profile runs one PlacementGenerate plugin: CELPlacement runs
	// TopologyPlacementGenerator itself.
	var disabled []string
	for _, p := range plugins.PlacementGenerate.Disabled {
		disabled = append(disabled, p.Name)
	}
	if !enabled(disabled)["TopologyPlacementGenerator"] {
		t.Errorf("TopologyPlacementGenerator is not disabled at placementGenerate: %v", disabled)
	}
	// CELPreemption is DefaultPreemption with the victim rules: it takes
	// its place.
	disabled = nil
	for _, p := range plugins.MultiPoint.Disabled {
		disabled = append(disabled, p.Name)
	}
	if !enabled(disabled)["DefaultPreemption"] || enabled(names)["DefaultPreemption"] {
		t.Errorf("DefaultPreemption is not replaced by %s: enabled %v, disabled %v", preemption.Name, names, disabled)
	}
	// The other default plugins stay enabled beside them.
	for _, builtin := range []string{"NodeResourcesFit", "TaintToleration", "NodeAffinity", "DefaultBinder"} {
		if !enabled(names)[builtin] {
			t.Errorf("built-in plugin %s is not enabled: %v", builtin, names)
		}
	}
}

func TestSchedulerConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := map[string]struct {
		file string
		want string
	}{
		"missing file": {file: filepath.Join(dir, "missing.yaml"), want: "reading the scheduler configuration"},
		"not a config": {file: write("pod.yaml", "apiVersion: v1\nkind: Pod\n"), want: "decoding"},
		"invalid profile": {file: write("bad.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: ""
`), want: "profiles[0].schedulerName"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
