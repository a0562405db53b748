package performance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/performance/perfdata"
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
		"NoPolicy": 0, "NonMatching10": 10, "NodeOnly10": 10, "NodeOnly10Native": 10, "NodeOnly10Batchable": 10,
		"Mixed100": 100, "Mixed100Native": 100,
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

// TestSamePolicies checks that the workloads that measure NodeOnly10's and
// Mixed100's policies another way (other profiles, native rules in the
// stock pods) store the same policies.
func TestSamePolicies(t *testing.T) {
	for copied, original := range map[string]string{
		"NodeOnly10Batchable": "NodeOnly10",
		"NodeOnly10Native":    "NodeOnly10",
		"Mixed100Native":      "Mixed100",
	} {
		t.Run(copied, func(t *testing.T) {
			want, err := readPolicies(original)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readPolicies(copied)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("testdata/%s.yaml differs from testdata/%s.yaml (-%s +%s):\n%s", copied, original, original, copied, diff)
			}
		})
	}
}

// TestPhases checks the measured phases of every test case: three runs of
// each profile, the stock profile's phases on pods without rules, the
// native profile's (where there is one) and the celsched profile's on pods
// of their own, and the order of the profiles alternating between runs.
func TestPhases(t *testing.T) {
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var testCases []struct {
		Name             string `json:"name"`
		WorkloadTemplate []struct {
			Opcode          string `json:"opcode"`
			Namespace       string `json:"namespace"`
			PodTemplatePath string `json:"podTemplatePath"`
			CollectMetrics  bool   `json:"collectMetrics"`
		} `json:"workloadTemplate"`
	}
	if err := yaml.Unmarshal(data, &testCases); err != nil {
		t.Fatal(err)
	}
	native := map[string]bool{
		"NodeOnly10Native": true, "Mixed100Native": true,
		"RequiredAffinity": true, "PreferredAffinity": true, "PodAndNode": true, "Spread": true,
	}
	for _, tc := range testCases {
		t.Run(tc.Name, func(t *testing.T) {
			profiles := []string{perfdata.StockProfile, perfdata.CelschedProfile}
			if native[tc.Name] {
				profiles = []string{perfdata.StockProfile, perfdata.NativeProfile, perfdata.CelschedProfile}
			}
			var want []string
			for run := 1; run <= 3; run++ {
				order := append([]string(nil), profiles...)
				if run%2 == 0 {
					slices.Reverse(order)
				}
				for _, p := range order {
					want = append(want, fmt.Sprintf("%s-%d", p, run))
				}
			}
			var got []string
			templates := map[string]map[string]bool{} // profile -> pod templates
			for _, op := range tc.WorkloadTemplate {
				if !op.CollectMetrics {
					continue
				}
				got = append(got, op.Namespace)
				profile, _, ok := perfdata.ParseNamespace(op.Namespace)
				if !ok {
					t.Errorf("measured namespace %q names no profile", op.Namespace)
					continue
				}
				if templates[profile] == nil {
					templates[profile] = map[string]bool{}
				}
				templates[profile][op.PodTemplatePath] = true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("measured phases (-want +got):\n%s", diff)
			}
			for profile, paths := range templates {
				if len(paths) != 1 {
					t.Errorf("%s: the runs use different pod templates: %v", profile, paths)
				}
				for path := range paths {
					switch {
					case profile == perfdata.StockProfile && path != "templates/pod-stock.yaml" && path != "templates/pod-stock-deployment.yaml":
						t.Errorf("%s: pods of %s carry rules; the stock phases measure plain pods", profile, path)
					case profile == perfdata.NativeProfile && (path == "templates/pod-stock.yaml" || path == "templates/pod-stock-deployment.yaml"):
						t.Errorf("%s: pods of %s carry no rules", profile, path)
					case profile != perfdata.CelschedProfile && strings.HasPrefix(path, "templates/pod-celsched"):
						t.Errorf("%s: pods of %s are the celsched profile's", profile, path)
					}
				}
			}
		})
	}
}

// TestNativeEquivalents checks that the native rules of NodeOnly10Native's
// and Mixed100Native's stock pods decide what the CEL rules they stand for
// decide, on the nodes of templates/node.yaml: the required node affinity
// admits exactly the nodes that every filter of those policies passes, and
// the preferred terms a node matches (all of weight 1) are the score rules
// that give it 100 (all of normalization None, weight 1, 0 or 100), so
// NodeAffinity ranks the nodes as CELScore does.
func TestNativeEquivalents(t *testing.T) {
	nodes := templateNodes(t, 200)
	for name, tc := range map[string]struct {
		podTemplate string
		// policies are the policies of the test case that the native rules
		// stand for.
		policies func(name string) bool
	}{
		"NodeOnly10Native": {
			podTemplate: "templates/pod-stock-node-only10-affinity.yaml",
			policies:    func(string) bool { return true },
		},
		"Mixed100Native": {
			podTemplate: "templates/pod-stock-mixed100-affinity.yaml",
			policies: func(name string) bool {
				return strings.HasPrefix(name, "mixed-match-node-") || name == "mixed-match-variables"
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			env, err := engine.NewEnvironment()
			if err != nil {
				t.Fatal(err)
			}
			compiler := engine.NewCompiler(env)
			conv := engine.NewConverter(env, engine.DefaultMaxCachedNodes)
			objs, err := readPolicies(name)
			if err != nil {
				t.Fatal(err)
			}
			var policies []*engine.CompiledPolicy
			for _, obj := range objs {
				if !tc.policies(obj.GetName()) {
					continue
				}
				var p schedv1alpha1.SchedulingPolicy
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &p); err != nil {
					t.Fatal(err)
				}
				cp := compiler.Compile(&p, engine.CompileOptions{})
				if err := cp.Err(); err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				for _, s := range cp.ScoreRules() {
					if s.Weight != 1 || s.Normalization != schedv1alpha1.None {
						t.Fatalf("%s: score %s has weight %d and normalization %s; this check assumes 1 and None", p.Name, s.Name, s.Weight, s.Normalization)
					}
				}
				policies = append(policies, cp)
			}
			if len(policies) == 0 {
				t.Fatal("no policy to compare with")
			}
			pod := templatePod(t, tc.podTemplate)
			podIn, err := conv.Pod(pod, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: perfdata.NativeProfile + "-1"}})
			if err != nil {
				t.Fatal(err)
			}
			required := nodeaffinity.GetRequiredNodeAffinity(pod)
			preferred, err := nodeaffinity.NewPreferredSchedulingTerms(pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var blocked int
			for _, node := range nodes {
				nodeIn, err := conv.Node(node, nil)
				if err != nil {
					t.Fatal(err)
				}
				celPass, celPreferred := true, 0
				for _, p := range policies {
					if d := p.Filter(ctx, podIn, nodeIn); d.Verdict != engine.Pass {
						celPass = false
					}
					raw := make([]float64, len(p.ScoreRules()))
					if d := p.Score(ctx, podIn, nodeIn, raw); d.Verdict != engine.Pass {
						t.Fatalf("%s on %s: score %v", p.Name, node.Name, d.Verdict)
					}
					for _, v := range raw {
						switch v {
						case 100:
							celPreferred++
						case 0:
						default:
							t.Fatalf("%s on %s: score %v, want 0 or 100", p.Name, node.Name, v)
						}
					}
				}
				nativePass, err := required.Match(node)
				if err != nil {
					t.Fatal(err)
				}
				if nativePass != celPass {
					t.Errorf("%s %v: native required affinity admits it: %v; CEL filters pass: %v", node.Name, node.Labels, nativePass, celPass)
				}
				if !celPass {
					blocked++
				}
				if got := preferred.Score(node); got != int64(celPreferred) {
					t.Errorf("%s %v: native preferred terms matched (weight): %d; CEL scores of 100: %d", node.Name, node.Labels, got, celPreferred)
				}
			}
			if blocked == 0 || blocked == len(nodes) {
				t.Errorf("the rules block %d of %d nodes: the check cannot tell", blocked, len(nodes))
			}
		})
	}
}

// templateNodes renders the first n nodes of templates/node.yaml, as
// scheduler_perf's createNodes does (each with a name, and a
// resourceVersion for the converter's cache).
func templateNodes(t *testing.T, n int) []*corev1.Node {
	t.Helper()
	data, err := os.ReadFile("templates/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("node").Funcs(template.FuncMap{"Mod": func(a, b int) int { return a % b }}).Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, map[string]any{"Index": i}); err != nil {
			t.Fatal(err)
		}
		var node corev1.Node
		if err := yaml.UnmarshalStrict(b.Bytes(), &node); err != nil {
			t.Fatal(err)
		}
		node.Name = fmt.Sprintf("perf-node-%d", i)
		node.ResourceVersion = "1"
		nodes[i] = &node
	}
	return nodes
}

func templatePod(t *testing.T, path string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Name, pod.Namespace = "pod-0", perfdata.NativeProfile+"-1"
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		t.Fatalf("%s: no node affinity", path)
	}
	return &pod
}
