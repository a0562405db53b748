package performance

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
)

// TestSchedulerConfig checks that the workloads' celsched profile is the
// one celsched ships (config/scheduler/scheduler-config.yaml), and that the
// stock profile runs no CEL plugin.
func TestSchedulerConfig(t *testing.T) {
	shipped, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	perf, err := defaultconfig.Load("scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := profile(t, shipped, "celsched")
	got := profile(t, perf, "celsched")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("celsched profile of scheduler-config.yaml differs from config/scheduler's (-shipped +perf):\n%s", diff)
	}
	for _, p := range profile(t, perf, "default-scheduler").Plugins.MultiPoint.Enabled {
		if p.Name == preenqueue.Name || p.Name == filter.Name || p.Name == score.Name {
			t.Errorf("the stock profile runs %s", p.Name)
		}
	}
}

func profile(t *testing.T, cfg *schedulerconfig.KubeSchedulerConfiguration, name string) schedulerconfig.KubeSchedulerProfile {
	t.Helper()
	for _, p := range cfg.Profiles {
		if p.SchedulerName == name {
			return p
		}
	}
	t.Fatalf("no profile %s", name)
	return schedulerconfig.KubeSchedulerProfile{}
}

// TestWorkloadPolicies checks that every test case of
// performance-config.yaml has its policies, testdata/<test case>.yaml, as
// many as its name says, and that they compile without error against the
// stricter environment of new expressions: a broken policy would measure
// nothing.
func TestWorkloadPolicies(t *testing.T) {
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var testCases []struct {
		Name string `json:"name"`
	}
	if err := yaml.Unmarshal(data, &testCases); err != nil {
		t.Fatal(err)
	}
	wantPolicies := map[string]int{
		"NoPolicy": 0, "NonMatching10": 10, "NodeOnly10": 10, "NodeOnly10Batchable": 10, "Mixed100": 100,
		"RequiredAffinity": 1, "PreferredAffinity": 1, "PodAndNode": 1, "Spread": 1,
	}
	if len(testCases) != len(wantPolicies) {
		t.Errorf("%d test cases in %s, want %d", len(testCases), configFile, len(wantPolicies))
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	compiler := engine.NewCompiler(env)
	for _, tc := range testCases {
		t.Run(tc.Name, func(t *testing.T) {
			objs, err := readPolicies(tc.Name)
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := wantPolicies[tc.Name]; !ok || len(objs) != want {
				t.Errorf("testdata/%s.yaml holds %d policies, want %d", tc.Name, len(objs), want)
			}
			for _, obj := range objs {
				var p schedv1alpha1.SchedulingPolicy
				if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, &p, true); err != nil {
					t.Fatalf("%s: %v", obj.GetName(), err)
				}
				if c := compiler.Compile(&p, engine.CompileOptions{}); len(c.Errors) > 0 {
					t.Errorf("%s: %v", p.Name, c.Errors.ToAggregate())
				}
			}
		})
	}
}
