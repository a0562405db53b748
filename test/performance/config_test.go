package performance

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
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
	// NodeOnly10Plugin's scheduler: the same two profiles, and the Go
	// plugin's in CELFilter's place.
	plugin, err := defaultconfig.Load("scheduler-config-plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default-scheduler", "celsched"} {
		if diff := cmp.Diff(profile(t, perf, name), profile(t, plugin, name)); diff != "" {
			t.Errorf("%s profile of scheduler-config-plugin.yaml differs from scheduler-config.yaml's (-perf +plugin):\n%s", name, diff)
		}
	}
	var filters []string
	for _, p := range profile(t, plugin, nodeOnly10Profile).Plugins.Filter.Enabled {
		filters = append(filters, p.Name)
	}
	var celFilters []string
	for _, p := range got.Plugins.Filter.Enabled {
		name := p.Name
		if name == filter.Name {
			name = nodeOnly10PluginName
		}
		celFilters = append(celFilters, name)
	}
	if diff := cmp.Diff(celFilters, filters); diff != "" {
		t.Errorf("the filters of profile %s are not the celsched profile's with %s in %s's place (-want +got):\n%s", nodeOnly10Profile, nodeOnly10PluginName, filter.Name, diff)
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
	var testCases []struct {
		Name string `json:"name"`
	}
	readConfig(t, &testCases)
	wantPolicies := map[string]int{
		"NoPolicy": 0, "NonMatching10": 10, "NodeOnly10": 10, "NodeOnly10Native": 10, "NodeOnly10Plugin": 10, "NodeOnly10Batchable": 10,
		"Mixed100": 100, "Mixed100Native": 100,
		"RequiredAffinity": 1, "PreferredAffinity": 1, "PodAndNode": 1, "Spread": 1,
		"Gangs": 1, "Preemption": 1,
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
		"NodeOnly10Plugin":    "NodeOnly10",
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
	var testCases []struct {
		Name             string `json:"name"`
		WorkloadTemplate []struct {
			Opcode          string `json:"opcode"`
			Namespace       string `json:"namespace"`
			PodTemplatePath string `json:"podTemplatePath"`
			CollectMetrics  bool   `json:"collectMetrics"`
		} `json:"workloadTemplate"`
	}
	readConfig(t, &testCases)
	native := map[string]bool{
		"NodeOnly10Native": true, "NodeOnly10Plugin": true, "Mixed100Native": true,
		"RequiredAffinity": true, "PreferredAffinity": true, "PodAndNode": true, "Spread": true,
		"Gangs": true,
	}
	// plain are the stock pod templates without rules: plain pods, the
	// pods of ten Deployments, the members of a pod group and the
	// high-priority preemptors (whose constraints are the same in every
	// profile's phases).
	plain := map[string]bool{
		"templates/pod-stock.yaml": true, "templates/pod-stock-deployment.yaml": true, "templates/pod-stock-gang.yaml": true,
		"templates/pod-stock-high-priority.yaml": true,
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
					case profile == perfdata.StockProfile && !plain[path]:
						t.Errorf("%s: pods of %s carry rules; the stock phases measure plain pods", profile, path)
					case profile == perfdata.NativeProfile && plain[path]:
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
// and Mixed100Native's stock pods, and NodeOnly10Plugin's Go plugin, decide
// what the CEL rules they stand for decide, on the nodes of
// templates/node.yaml: the required node affinity (the plugin's Filter)
// admits exactly the nodes that every filter of those policies passes, and
// the preferred terms a node matches (all of weight 1) are the score rules
// that give it 100 (all of normalization None, weight 1, 0 or 100), so
// NodeAffinity ranks the nodes as CELScore does; the plugin's Score is
// their mean, CELScore's.
func TestNativeEquivalents(t *testing.T) {
	nodes := templateNodes(t, "templates/node.yaml", 200)
	for name, tc := range map[string]struct {
		podTemplate string
		// policies are the policies of the test case that the native rules
		// stand for.
		policies func(name string) bool
		// plugin: the native rules are nodeOnly10Plugin's, not the pod's
		// node affinity.
		plugin bool
	}{
		"NodeOnly10Native": {
			podTemplate: "templates/pod-stock-node-only10-affinity.yaml",
			policies:    func(string) bool { return true },
		},
		"NodeOnly10Plugin": {
			podTemplate: "templates/pod-node-only10-plugin.yaml",
			policies:    func(string) bool { return true },
			plugin:      true,
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
			pod := templatePod(t, tc.podTemplate, nil)
			podIn, err := conv.Pod(pod, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: perfdata.NativeProfile + "-1"}})
			if err != nil {
				t.Fatal(err)
			}
			var native func(*corev1.Node) (bool, int64)
			if tc.plugin {
				if pod.Spec.Affinity != nil || pod.Spec.SchedulerName != nodeOnly10Profile {
					t.Fatalf("%s: want a pod of profile %s without affinity", tc.podTemplate, nodeOnly10Profile)
				}
				native = pluginRules(t, pod)
			} else {
				native = affinityRules(t, tc.podTemplate, pod)
			}
			ctx := context.Background()
			var blocked, scoreRules int
			for _, p := range policies {
				scoreRules += len(p.ScoreRules())
			}
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
				nativePass, nativeScore := native(node)
				if nativePass != celPass {
					t.Errorf("%s %v: the native rules admit it: %v; CEL filters pass: %v", node.Name, node.Labels, nativePass, celPass)
				}
				if !celPass {
					blocked++
				}
				want := int64(celPreferred) // the preferred terms matched, of weight 1
				if tc.plugin {
					want = int64(celPreferred) * engine.MaxScore / int64(scoreRules) // CELScore's mean
				}
				if nativeScore != want {
					t.Errorf("%s %v: native score %d, want %d (CEL scores of 100: %d)", node.Name, node.Labels, nativeScore, want, celPreferred)
				}
			}
			if blocked == 0 || blocked == len(nodes) {
				t.Errorf("the rules block %d of %d nodes: the check cannot tell", blocked, len(nodes))
			}
		})
	}
}

// affinityRules returns what a pod's node affinity decides on a node: its
// required terms admit it, and the weight of the preferred terms it
// matches.
func affinityRules(t *testing.T, podTemplate string, pod *corev1.Pod) func(*corev1.Node) (bool, int64) {
	t.Helper()
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		t.Fatalf("%s: no node affinity", podTemplate)
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	preferred, err := nodeaffinity.NewPreferredSchedulingTerms(pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	if err != nil {
		t.Fatal(err)
	}
	return func(node *corev1.Node) (bool, int64) {
		pass, err := required.Match(node)
		if err != nil {
			t.Fatal(err)
		}
		return pass, preferred.Score(node)
	}
}

// pluginRules returns what nodeOnly10Plugin decides for a pod on a node:
// its Filter passes it, and its Score.
func pluginRules(t *testing.T, pod *corev1.Pod) func(*corev1.Node) (bool, int64) {
	t.Helper()
	var pl nodeOnly10Plugin
	return func(node *corev1.Node) (bool, int64) {
		info := framework.NewNodeInfo()
		info.SetNode(node)
		status := pl.Filter(context.Background(), nil, pod, info)
		nodeScore, scoreStatus := pl.Score(context.Background(), nil, pod, info)
		if !scoreStatus.IsSuccess() {
			t.Fatalf("%s: score: %v", node.Name, scoreStatus)
		}
		return status.IsSuccess(), nodeScore
	}
}

// templateNodes renders the first n nodes of a node template, as
// scheduler_perf's createNodes does (each with a name, and a
// resourceVersion for the converter's cache).
func templateNodes(t *testing.T, path string, n int) []*corev1.Node {
	t.Helper()
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		var node corev1.Node
		renderTemplate(t, path, map[string]any{"Index": i}, &node)
		node.Name = fmt.Sprintf("perf-node-%d", i)
		node.ResourceVersion = "1"
		nodes[i] = &node
	}
	return nodes
}

// templatePod renders the first pod of a pod template with params (nil:
// none) in the first native namespace.
func templatePod(t *testing.T, path string, params map[string]any) *corev1.Pod {
	t.Helper()
	env := map[string]any{"Index": 0}
	maps.Copy(env, params)
	var pod corev1.Pod
	renderTemplate(t, path, env, &pod)
	pod.Name, pod.Namespace = "pod-0", perfdata.NativeProfile+"-1"
	return &pod
}

// renderTemplate renders the text/template at path with env and the
// template functions of scheduler_perf that the templates use, and
// decodes it strictly into obj.
func renderTemplate(t *testing.T, path string, env map[string]any, obj any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New(path).Funcs(template.FuncMap{
		"Mod":       func(a, b int) int { return a % b },
		"DivideInt": func(a, b int) int { return a / b },
	}).Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, env); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := yaml.UnmarshalStrict(b.Bytes(), obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGangsNativeEquivalent checks that Gangs' native rule and its policy
// admit the same racks of templates/node-racks.yaml at 1000 nodes: the
// policy applies to the celsched members (templates/pod-celsched-gang.yaml);
// its placement filter accepts a rack's placement exactly when the native
// members' node selector (templates/pod-stock-gang-gpu.yaml) admits the
// rack's nodes; and no rack mixes admitted and refused nodes, so a group
// kept in one rack by its topology constraint has the same candidate racks
// in both.
func TestGangsNativeEquivalent(t *testing.T) {
	const podsPerGroup = 16
	params := map[string]any{"podsPerGroup": podsPerGroup}
	var group schedulingv1beta1.PodGroup
	renderTemplate(t, "templates/podgroup-rack.yaml", map[string]any{"Index": 0, "podsPerGroup": podsPerGroup}, &group)
	group.Namespace = perfdata.CelschedProfile + "-1"
	c := group.Spec.SchedulingConstraints
	if c == nil || len(c.Topology) != 1 {
		t.Fatalf("podgroup-rack.yaml: topology constraints %+v, want one", c)
	}
	rackKey := c.Topology[0].Key
	racks := map[string][]*corev1.Node{}
	for _, n := range templateNodes(t, "templates/node-racks.yaml", 1000) {
		racks[n.Labels[rackKey]] = append(racks[n.Labels[rackKey]], n)
	}
	if len(racks) != 50 {
		t.Errorf("%d racks (%s), want 50", len(racks), rackKey)
	}

	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	conv := engine.NewConverter(env, engine.DefaultMaxCachedNodes)
	objs, err := readPolicies("Gangs")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("testdata/Gangs.yaml holds %d policies, want 1", len(objs))
	}
	var p schedv1alpha1.SchedulingPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &p); err != nil {
		t.Fatal(err)
	}
	policy := engine.NewCompiler(env).Compile(&p, engine.CompileOptions{})
	if err := policy.Err(); err != nil {
		t.Fatal(err)
	}
	member := templatePod(t, "templates/pod-celsched-gang.yaml", params)
	member.Namespace = group.Namespace
	if sg := member.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != group.Name {
		t.Errorf("pod-celsched-gang.yaml: pod 0 in group %+v, want %s", sg, group.Name)
	}
	podIn, err := conv.Pod(member, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: member.Namespace}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if m := policy.Match(ctx, podIn); !m.Matches {
		t.Fatalf("policy %s does not apply to the celsched members: %+v", p.Name, m.Decision)
	}
	native := nodeaffinity.GetRequiredNodeAffinity(templatePod(t, "templates/pod-stock-gang-gpu.yaml", params))

	var accepted int
	for name, nodes := range racks {
		var admitted int
		for _, n := range nodes {
			ok, err := native.Match(n)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != 0 && admitted != len(nodes) {
			t.Errorf("%s: the native selector admits %d of its %d nodes, want all or none", name, admitted, len(nodes))
		}
		in, err := engine.NewPlacementInput(name, nodes, &group, group.Namespace, group.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := policy.PlacementFilter(ctx, in)
		if d.Verdict == engine.Error {
			t.Fatalf("%s: placement filter error: %+v", name, d)
		}
		celAccepts := d.Verdict == engine.Pass
		if celAccepts != (admitted == len(nodes)) {
			t.Errorf("%s: the placement filter accepts it: %v; the native selector admits %d of its %d nodes", name, celAccepts, admitted, len(nodes))
		}
		if celAccepts {
			accepted++
		}
	}
	if accepted != 10 {
		t.Errorf("%d of %d racks accepted, want 10 (one in five)", accepted, len(racks))
	}
}

// TestGangsParams checks that every workload of the test cases with pod
// groups measures podGroups x podsPerGroup pods per phase: the phase meter
// ends a phase at its measurePods-th bound pod.
func TestGangsParams(t *testing.T) {
	var testCases []struct {
		Name      string `json:"name"`
		Workloads []struct {
			Name   string         `json:"name"`
			Params map[string]int `json:"params"`
		} `json:"workloads"`
	}
	readConfig(t, &testCases)
	var checked int
	for _, tc := range testCases {
		for _, w := range tc.Workloads {
			groups, ok := w.Params["podGroups"]
			if !ok {
				continue
			}
			checked++
			if got, want := w.Params["measurePods"], groups*w.Params["podsPerGroup"]; got != want {
				t.Errorf("%s/%s: measurePods %d, want podGroups x podsPerGroup = %d", tc.Name, w.Name, got, want)
			}
		}
	}
	if checked == 0 {
		t.Error("no workload with pod groups")
	}
}

// readConfig decodes performance-config.yaml's test cases into testCases
// (a slice of structs with the fields a test reads).
func readConfig(t *testing.T, testCases any) {
	t.Helper()
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, testCases); err != nil {
		t.Fatal(err)
	}
}
