package performance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/performance/perfdata"
)

// TestUpstreamConfigs checks the configuration that the upstream suite
// generates from the pinned module's scheduler_perf files: each test case
// is upstream's, with nothing changed but its name, its scheduler
// configuration (the celsched variants'), the one workload kept and its
// relative paths made absolute, and every path names a file of the module;
// the measured pods are those the suite's table reads; the celsched
// scheduler configuration is the shipped profile as default-scheduler; and
// the matching policy set selects every workload's measured pods while the
// nonmatching one selects none.
func TestUpstreamConfigs(t *testing.T) {
	suite, err := readUpstreamSuite(*upstreamSuiteFile, "")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := upstreamDir()
	if err != nil {
		t.Fatal(err)
	}
	const runs, celschedConfig = 2, "/celsched/scheduler-config.yaml"
	testCases, all, err := upstreamConfig(dir, suite, perfdata.Variants, runs, celschedConfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(suite.Workloads) * len(perfdata.Variants) * runs; len(testCases) != want || len(all) != want {
		t.Fatalf("%d test cases, %d runs, want %d", len(testCases), len(all), want)
	}
	variantsOfRun := map[string][]string{}
	for i, derived := range testCases {
		r := all[i]
		key := fmt.Sprintf("%s/%d", r.Upstream.TestCase, r.Run)
		variantsOfRun[key] = append(variantsOfRun[key], r.Variant)
		path := filepath.Join(dir, r.Upstream.Config)
		upstreamCases, err := readUpstreamConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		tc, w, err := findWorkload(upstreamCases, r.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		want, err := deepCopy(tc)
		if err != nil {
			t.Fatal(err)
		}
		want["workloads"] = []any{w}
		got, err := deepCopy(derived)
		if err != nil {
			t.Fatal(err)
		}
		if got["name"] != r.TestCase || r.TestCase != perfdata.UpstreamTestCase(r.Upstream.TestCase, r.Variant, r.Run) {
			t.Errorf("test case %v of run %+v", got["name"], r)
		}
		got["name"] = want["name"]
		if sc, _ := got["schedulerConfigPath"].(string); (sc == celschedConfig) != (r.Variant != perfdata.VariantStock) {
			t.Errorf("%s: schedulerConfigPath %q", r.TestCase, sc)
		}
		delete(got, "schedulerConfigPath")
		base := filepath.Dir(path)
		mapPaths(got, func(p string) string {
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || !strings.HasPrefix(p, dir+string(filepath.Separator)) {
				t.Errorf("%s: path %s is not a file of %s (%v)", r.TestCase, p, dir, err)
			}
			rel, err := filepath.Rel(base, p)
			if err != nil {
				t.Error(err)
			}
			return rel
		})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s differs from upstream's %s in %s (-upstream +generated, names, scheduler configuration and paths restored):\n%s", r.TestCase, r.Upstream.TestCase, path, diff)
		}
	}
	for key, variants := range variantsOfRun {
		if len(variants) != len(perfdata.Variants) {
			t.Errorf("%s: variants %v", key, variants)
		}
	}

	// The measured pods, as upstream's configs say today.
	measured := map[string]string{}
	for _, r := range all {
		measured[r.Upstream.TestCase] = fmt.Sprintf("%s %d pods %s", r.Namespace, r.Pods, filepath.Base(r.PodTemplate))
	}
	want := map[string]string{
		"SchedulingBasic":           "namespace-2 1000 pods pod-default.yaml",
		"SchedulingPodAntiAffinity": "sched-1 400 pods pod-with-pod-anti-affinity.yaml",
		"TopologySpreading":         "namespace-2 1000 pods pod-with-topology-spreading.yaml",
		"PreemptionBasic":           "namespace-2 1000 pods pod-high-priority.yaml",
		"Unschedulable":             "namespace-3 1000 pods pod-default.yaml",
		"SchedulingWithMixedChurn":  "namespace-2 1000 pods pod-default.yaml",
		"GangScheduling":            "gang-ns-0 3000 pods gang-pod.yaml",
	}
	if diff := cmp.Diff(want, measured); diff != "" {
		t.Errorf("measured pods (-want +got):\n%s", diff)
	}

	// The celsched variants' scheduler: the shipped profile, named
	// default-scheduler.
	data, err := celschedSchedulerConfig()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), celschedConfigFile)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := defaultconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%d profiles, want one", len(cfg.Profiles))
	}
	gotProfile := profile(t, cfg, "default-scheduler")
	gotProfile.SchedulerName = "celsched"
	if diff := cmp.Diff(profile(t, shipped, "celsched"), gotProfile); diff != "" {
		t.Errorf("the celsched variants' profile differs from config/scheduler's (-shipped +upstream suite):\n%s", diff)
	}

	// The policy sets against each workload's measured pod.
	for variant, files := range suite.PolicySets {
		var policies []schedv1alpha1.SchedulingPolicy
		for _, f := range files {
			objs, err := readPolicyFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				var p schedv1alpha1.SchedulingPolicy
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &p); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				policies = append(policies, p)
			}
		}
		if len(policies) == 0 {
			t.Errorf("policy set %s is empty", variant)
		}
		for _, r := range all {
			if r.Run != 1 || r.Variant != variant {
				continue
			}
			pod, ns := measuredPod(t, r)
			for _, p := range policies {
				sel, errs := engine.NewSelectors(&p.Spec)
				if len(errs) > 0 {
					t.Fatalf("%s: %v", p.Name, errs)
				}
				selects := sel.Select(pod, ns)
				switch {
				case variant == perfdata.VariantNonMatching && selects:
					t.Errorf("%s: policy %s of the nonmatching set selects the measured pods", r.Upstream.TestCase, p.Name)
				case variant == perfdata.VariantMatching && (!selects || p.Spec.Match != nil && len(p.Spec.Match.Conditions) > 0):
					t.Errorf("%s: policy %s of the matching set does not select the measured pods by its selectors alone", r.Upstream.TestCase, p.Name)
				}
			}
		}
	}
}

// measuredPod renders a run's measured pod as scheduler_perf creates its
// first one (the API server sets the schedulerName), and its namespace, as
// the API server labels it.
func measuredPod(t *testing.T, r upstreamRun) (*corev1.Pod, *corev1.Namespace) {
	t.Helper()
	env := map[string]any{"Index": 0}
	for k, v := range r.TemplateParams {
		if f, ok := v.(float64); ok {
			v = int(f)
		}
		env[k] = v
	}
	var pod corev1.Pod
	renderTemplate(t, r.PodTemplate, env, &pod)
	pod.Namespace = r.Namespace
	if pod.Spec.SchedulerName == "" {
		pod.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Namespace, Labels: map[string]string{corev1.LabelMetadataName: r.Namespace}}}
	return &pod, ns
}
