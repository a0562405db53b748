package performance

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"sigs.k8s.io/yaml"

	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/performance/perfdata"
)

// The upstream suite: kube-scheduler's own scheduler_perf test cases, as
// the pinned k8s.io/kubernetes module ships them, run with the stock
// profile and with the celsched profile (upstream/suite.yaml,
// docs/performance.md "Upstream's workloads").
var (
	upstreamSuiteFile = flag.String("upstream-suite", "upstream/suite.yaml", "the upstream suite: which of scheduler_perf's test cases and workloads, and the policy sets of the variants")
	upstreamDirFlag   = flag.String("upstream-dir", "", "scheduler_perf's directory (test/integration/scheduler_perf of the k8s.io/kubernetes module; default: where go list -m finds the module)")
	upstreamRunCount  = flag.Int("upstream-runs", 3, "how many times each workload runs in each variant")
	upstreamVariants  = flag.String("upstream-variants", strings.Join(perfdata.Variants, ","), "comma-separated variants to run: "+strings.Join(perfdata.Variants, ", "))
	upstreamWorkloads = flag.String("upstream-workloads", "", "comma-separated TestCase/Workload of upstream's config to run instead of the suite's workload of that test case (the suite's other test cases are left out)")
)

// upstreamTopic names the DataItems file (scheduler_perf's topic).
const upstreamTopic = "upstream"

// BenchmarkPerfSchedulingUpstream runs the test cases of the upstream
// suite through scheduler_perf, in every variant, -upstream-runs times;
// the runs of one workload come one after another, each run its variants
// in turn (the first variant rotating from run to run), so that what the
// machine does meanwhile falls on every variant alike. `make
// perf-upstream` runs it:
//
//	go test -c -o perf-upstream.test ./test/performance && cd test/performance &&
//	  perf-upstream.test -test.run '^$' -test.bench '^BenchmarkPerfSchedulingUpstream$' -test.benchtime 1x \
//	  -perf-scheduling-label-filter= -data-items-dir=DIR -celsched-phases=DIR/phases.jsonl
//
// with etcd on the PATH. The scheduler_perf configuration it runs is
// written to DIR/upstream-config.yaml, the celsched run's scheduler
// configuration to DIR/scheduler-config-celsched.yaml.
func BenchmarkPerfSchedulingUpstream(b *testing.B) {
	out := b.TempDir()
	if f := flag.Lookup("data-items-dir"); f != nil && f.Value.String() != "" {
		out = f.Value.String()
	}
	variants, err := parseVariants(*upstreamVariants)
	if err != nil {
		b.Fatal(err)
	}
	suite, err := readUpstreamSuite(*upstreamSuiteFile, *upstreamWorkloads)
	if err != nil {
		b.Fatal(err)
	}
	dir, err := upstreamDir()
	if err != nil {
		b.Fatal(err)
	}
	configPath, runs, err := writeUpstreamConfig(out, dir, suite, variants, *upstreamRunCount)
	if err != nil {
		b.Fatal(err)
	}
	byName := map[string]upstreamRun{}
	for _, r := range runs {
		byName[r.TestCase] = r
	}
	benchmark.RunBenchmarkPerfScheduling(b, configPath, upstreamTopic, outOfTreeRegistry(), upstreamOptions(byName, suite.PolicySets)...)
}

// upstreamSuite is upstream/suite.yaml.
type upstreamSuite struct {
	Workloads []suiteWorkload `json:"workloads"`
	// PolicySets are the files of the SchedulingPolicies of a variant, by
	// variant, relative to this package.
	PolicySets map[string][]string `json:"policySets"`
}

// suiteWorkload is one workload of one of upstream's test cases.
type suiteWorkload struct {
	// Config is the file of the test case, relative to scheduler_perf's
	// directory.
	Config   string `json:"config"`
	TestCase string `json:"testCase"`
	Workload string `json:"workload"`
}

// readUpstreamSuite reads the suite at path, with the workloads that
// override names ("TestCase/Workload,..."; empty: the suite's own).
func readUpstreamSuite(path, override string) (*upstreamSuite, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s upstreamSuite
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for variant := range s.PolicySets {
		if variant != perfdata.VariantNonMatching && variant != perfdata.VariantMatching {
			return nil, fmt.Errorf("%s: policy set %q: only the variants %s and %s have policies", path, variant, perfdata.VariantNonMatching, perfdata.VariantMatching)
		}
	}
	if override == "" {
		return &s, nil
	}
	var selected []suiteWorkload
	for _, name := range strings.Split(override, ",") {
		testCase, workload, ok := strings.Cut(name, "/")
		i := slices.IndexFunc(s.Workloads, func(w suiteWorkload) bool { return w.TestCase == testCase })
		if !ok || i < 0 {
			return nil, fmt.Errorf("-upstream-workloads: %q is not TestCase/Workload of a test case of %s", name, path)
		}
		w := s.Workloads[i]
		w.Workload = workload
		selected = append(selected, w)
	}
	s.Workloads = selected
	return &s, nil
}

func parseVariants(list string) ([]string, error) {
	var variants []string
	for _, v := range strings.Split(list, ",") {
		if !slices.Contains(perfdata.Variants, v) {
			return nil, fmt.Errorf("-upstream-variants: no variant %q (%s)", v, strings.Join(perfdata.Variants, ", "))
		}
		variants = append(variants, v)
	}
	return variants, nil
}

// upstreamDir returns scheduler_perf's directory in the k8s.io/kubernetes
// module that go.mod pins.
func upstreamDir() (string, error) {
	if *upstreamDirFlag != "" {
		return *upstreamDirFlag, nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		return "", fmt.Errorf("finding the k8s.io/kubernetes module (or set -upstream-dir): go list: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("go list -m k8s.io/kubernetes: the module is not downloaded (go mod download k8s.io/kubernetes)")
	}
	return filepath.Join(dir, "test", "integration", "scheduler_perf"), nil
}

// upstreamRun is one run of an upstream workload in one variant: a test
// case of the generated configuration.
type upstreamRun struct {
	// TestCase is the generated test case's name
	// (perfdata.UpstreamTestCase).
	TestCase string
	Upstream suiteWorkload
	Variant  string
	Run      int
	// Namespace and Pods are the measured pods': the namespace of the
	// workload's createPods op that collects metrics, and its count.
	Namespace string
	Pods      int
	// PodTemplate and TemplateParams are that op's pod template (an
	// absolute path; "" for scheduler_perf's built-in pod) and its
	// parameters, resolved.
	PodTemplate    string
	TemplateParams map[string]any
}

// celschedConfigFile is the name of the celsched runs' scheduler
// configuration in the output directory.
const celschedConfigFile = "scheduler-config-celsched.yaml"

// writeUpstreamConfig writes into dir out the scheduler configuration of
// the celsched variants and the scheduler_perf configuration that runs
// the suite's workloads in variants, runs times each, and returns the
// latter's path and its runs in order.
func writeUpstreamConfig(out, dir string, suite *upstreamSuite, variants []string, runs int) (string, []upstreamRun, error) {
	celschedConfig := filepath.Join(out, celschedConfigFile)
	data, err := celschedSchedulerConfig()
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(celschedConfig, data, 0o644); err != nil {
		return "", nil, err
	}
	testCases, all, err := upstreamConfig(dir, suite, variants, runs, celschedConfig)
	if err != nil {
		return "", nil, err
	}
	if data, err = yaml.Marshal(testCases); err != nil {
		return "", nil, err
	}
	header := "# Generated by BenchmarkPerfSchedulingUpstream (test/performance/upstream_test.go) from\n# " + dir + "\n"
	path := filepath.Join(out, "upstream-config.yaml")
	return path, all, os.WriteFile(path, append([]byte(header), data...), 0o644)
}

// celschedSchedulerConfig is the scheduler configuration of the celsched
// variants: the one profile of config/scheduler/scheduler-config.yaml,
// named default-scheduler, the profile of pods that set no schedulerName.
func celschedSchedulerConfig() ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(defaultconfig.DefaultConfig, &cfg); err != nil {
		return nil, fmt.Errorf("config/scheduler/scheduler-config.yaml: %w", err)
	}
	profiles, ok := cfg["profiles"].([]any)
	if !ok || len(profiles) != 1 {
		return nil, fmt.Errorf("config/scheduler/scheduler-config.yaml: %d profiles, want one", len(profiles))
	}
	profile, ok := profiles[0].(map[string]any)
	if !ok {
		return nil, errors.New("config/scheduler/scheduler-config.yaml: its profile is not an object")
	}
	profile["schedulerName"] = "default-scheduler"
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte("# config/scheduler/scheduler-config.yaml's profile as default-scheduler (BenchmarkPerfSchedulingUpstream)\n"), data...), nil
}

// upstreamConfig returns the test cases of the runs: per suite workload,
// per run, one test case per variant, named perfdata.UpstreamTestCase.
func upstreamConfig(dir string, suite *upstreamSuite, variants []string, runs int, celschedConfig string) ([]map[string]any, []upstreamRun, error) {
	files := map[string][]map[string]any{}
	var testCases []map[string]any
	var all []upstreamRun
	for _, sw := range suite.Workloads {
		path := filepath.Join(dir, sw.Config)
		if files[path] == nil {
			tcs, err := readUpstreamConfig(path)
			if err != nil {
				return nil, nil, err
			}
			files[path] = tcs
		}
		tc, w, err := findWorkload(files[path], sw)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, ok := tc["schedulerConfigPath"]; ok {
			return nil, nil, fmt.Errorf("%s: test case %s has a scheduler configuration of its own", path, sw.TestCase)
		}
		base := filepath.Dir(path)
		measured, err := measuredPods(tc, w, base)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: test case %s, workload %s: %w", path, sw.TestCase, sw.Workload, err)
		}
		for run := 1; run <= runs; run++ {
			for i := range variants {
				variant := variants[(i+run-1)%len(variants)]
				r := measured
				r.TestCase = perfdata.UpstreamTestCase(sw.TestCase, variant, run)
				r.Upstream, r.Variant, r.Run = sw, variant, run
				derived, err := deepCopy(tc)
				if err != nil {
					return nil, nil, err
				}
				derived["name"] = r.TestCase
				derived["workloads"] = []any{w}
				if variant != perfdata.VariantStock {
					derived["schedulerConfigPath"] = celschedConfig
				}
				testCases = append(testCases, resolvePaths(derived, base).(map[string]any))
				all = append(all, r)
			}
		}
	}
	return testCases, all, nil
}

// readUpstreamConfig reads the test cases of a scheduler_perf
// configuration as plain values.
func readUpstreamConfig(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tcs []map[string]any
	if err := yaml.Unmarshal(data, &tcs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tcs, nil
}

// findWorkload returns the test case and workload that sw names.
func findWorkload(testCases []map[string]any, sw suiteWorkload) (map[string]any, map[string]any, error) {
	for _, tc := range testCases {
		if tc["name"] != sw.TestCase {
			continue
		}
		workloads, _ := tc["workloads"].([]any)
		for _, w := range workloads {
			if w, ok := w.(map[string]any); ok && w["name"] == sw.Workload {
				return tc, w, nil
			}
		}
		return nil, nil, fmt.Errorf("test case %s has no workload %s", sw.TestCase, sw.Workload)
	}
	return nil, nil, fmt.Errorf("no test case %s", sw.TestCase)
}

// measuredPods finds the createPods op of tc's workload template that
// collects metrics, and returns its namespace (scheduler_perf's default is
// namespace-<op index>), count, pod template and template parameters with
// w's parameters.
func measuredPods(tc, w map[string]any, base string) (upstreamRun, error) {
	params, _ := w["params"].(map[string]any)
	param := func(ref any) (int, error) {
		name, _ := ref.(string)
		v, ok := params[strings.TrimPrefix(name, "$")].(float64)
		if !strings.HasPrefix(name, "$") || !ok {
			return 0, fmt.Errorf("parameter %v is not a number of the workload", ref)
		}
		return int(v), nil
	}
	ops, _ := tc["workloadTemplate"].([]any)
	var found []upstreamRun
	for i, o := range ops {
		op, _ := o.(map[string]any)
		switch op["opcode"] {
		case "createPodSets":
			// scheduler_perf unrolls these into ops of their own, which
			// shifts the indices that name namespaces.
			return upstreamRun{}, errors.New("createPodSets is not supported")
		case "startCollectingMetrics":
			return upstreamRun{}, errors.New("startCollectingMetrics is not supported: the measured pods are those of a createPods op that collects metrics")
		case "createPods":
		default:
			continue
		}
		if collect, _ := op["collectMetrics"].(bool); !collect {
			continue
		}
		r := upstreamRun{Namespace: fmt.Sprintf("namespace-%d", i), TemplateParams: map[string]any{}}
		if ns, ok := op["namespace"].(string); ok {
			r.Namespace = ns
		}
		if c, ok := op["count"].(float64); ok {
			r.Pods = int(c)
		}
		var err error
		if ref, ok := op["countParam"]; ok {
			if r.Pods, err = param(ref); err != nil {
				return upstreamRun{}, err
			}
		}
		if ref, ok := op["countMultiplierParam"]; ok {
			m, err := param(ref)
			if err != nil {
				return upstreamRun{}, err
			}
			r.Pods *= m
		}
		template, ok := op["podTemplatePath"].(string)
		if !ok {
			template, _ = tc["defaultPodTemplatePath"].(string)
		}
		if template != "" {
			r.PodTemplate = resolvePath(template, base)
		}
		tp, _ := op["templateParams"].(map[string]any)
		for k, v := range tp {
			if ref, ok := v.(string); ok && strings.HasPrefix(ref, "$") {
				if v, ok = params[ref[1:]]; !ok {
					return upstreamRun{}, fmt.Errorf("template parameter %s: the workload has no parameter %s", k, ref)
				}
			}
			r.TemplateParams[k] = v
		}
		found = append(found, r)
	}
	if len(found) != 1 {
		return upstreamRun{}, fmt.Errorf("%d createPods ops collect metrics, want one", len(found))
	}
	if found[0].Pods <= 0 {
		return upstreamRun{}, errors.New("the measured createPods op creates no pod")
	}
	return found[0], nil
}

// resolvePaths returns v with the value of every field named *Path, and
// every item of those named *Paths, made absolute relative to base:
// scheduler_perf reads them relative to its working directory, upstream's
// from the configuration's own directory.
func resolvePaths(v any, base string) any {
	return mapPaths(v, func(p string) string { return resolvePath(p, base) })
}

func resolvePath(p, base string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// mapPaths replaces, in place, the value of every field of v named *Path,
// and every item of those named *Paths, with f of it, and returns v.
func mapPaths(v any, f func(string) string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, item := range v {
			switch s := item.(type) {
			case string:
				if strings.HasSuffix(k, "Path") {
					v[k] = f(s)
				}
			case []any:
				if strings.HasSuffix(k, "Paths") {
					for i, p := range s {
						if p, ok := p.(string); ok {
							s[i] = f(p)
						}
					}
					continue
				}
				v[k] = mapPaths(s, f)
			default:
				v[k] = mapPaths(item, f)
			}
		}
	case []any:
		for i := range v {
			v[i] = mapPaths(v[i], f)
		}
	}
	return v
}

func deepCopy(v map[string]any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var c map[string]any
	return c, json.Unmarshal(data, &c)
}

// upstreamOptions are the harness options of the upstream runs: a fresh
// celsched runtime per workload (which the CEL plugins build if the
// profile has them), and before the first op, the variant's policies
// installed and compiled, and the measured pods' meter.
func upstreamOptions(runs map[string]upstreamRun, policySets map[string][]string) []benchmark.SchedulerPerfOption {
	runOf := func(tCtx ktesting.TContext) (upstreamRun, error) {
		parts := strings.Split(tCtx.Name(), "/")
		if len(parts) < 3 {
			return upstreamRun{}, fmt.Errorf("test name %q is not <benchmark>/<test case>/<workload>", tCtx.Name())
		}
		r, ok := runs[parts[1]]
		if !ok {
			return upstreamRun{}, fmt.Errorf("test case %s is not one of the suite's runs", parts[1])
		}
		return r, nil
	}
	return []benchmark.SchedulerPerfOption{
		benchmark.WithPreRunFn(func(tCtx ktesting.TContext, _ *benchmark.Workload) (func(), error) {
			r, err := runOf(tCtx)
			if err != nil {
				return nil, err
			}
			current.Store(&workloadRuntime{measurePods: r.Pods})
			return nil, nil
		}),
		benchmark.WithPrepareFn(func(tCtx ktesting.TContext) error {
			r, err := runOf(tCtx)
			if err != nil {
				return err
			}
			return prepareUpstream(tCtx, r, policySets[r.Variant])
		}),
	}
}

// prepareUpstream checks that the run's scheduler runs the CEL plugins
// exactly when its variant is celsched's, creates the variant's policies
// (files policyFiles) and waits until they are compiled, and starts the
// meter of the measured pods.
func prepareUpstream(tCtx ktesting.TContext, r upstreamRun, policyFiles []string) error {
	w := current.Load()
	celsched := w != nil && w.registry.Load() != nil
	switch {
	case r.Variant == perfdata.VariantStock && celsched:
		return fmt.Errorf("%s: the stock run's scheduler runs the CEL plugins", r.TestCase)
	case r.Variant != perfdata.VariantStock && !celsched:
		return fmt.Errorf("%s: profile default-scheduler does not run the CEL plugins", r.TestCase)
	}
	var policies []*unstructured.Unstructured
	for _, f := range policyFiles {
		ps, err := readPolicyFile(f)
		if err != nil {
			return err
		}
		policies = append(policies, ps...)
	}
	if len(policies) > 0 {
		created, err := createPolicies(tCtx, policies)
		if err != nil {
			return err
		}
		if err := waitCompiled(tCtx, w.registry.Load(), created); err != nil {
			return fmt.Errorf("%s: %w", r.TestCase, err)
		}
		tCtx.Logf("%d SchedulingPolicies of the %s variant compiled", len(created), r.Variant)
	}
	if *phasesFile == "" {
		if *profilesDir != "" {
			return errors.New("-celsched-cpuprofiles needs -celsched-phases: the phases' meter takes the profiles")
		}
		return nil
	}
	informer, err := namespacePods(tCtx, r.Namespace)
	if err != nil {
		return err
	}
	meter := newPhaseMeter(r.TestCase, r.Upstream.Workload, r.Pods, *profilesDir)
	meter.namespace = r.Namespace
	return startMeter(tCtx, informer, meter)
}

// namespacePods returns a started and synced informer of the pods of
// namespace ns, stopped when the workload is done (after the meter's
// cleanup, which is registered later). Every variant meters on such an
// informer of its own (the stock profile has no celsched runtime whose
// informer it could ride on), so each pays the same for it.
func namespacePods(tCtx ktesting.TContext, ns string) (cache.SharedIndexInformer, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(tCtx.Client(), 0, informers.WithNamespace(ns))
	informer := factory.Core().V1().Pods().Informer()
	ctx, cancel := context.WithCancel(tCtx)
	factory.Start(ctx.Done())
	tCtx.Cleanup(func() {
		cancel()
		factory.Shutdown() // waits for the informer's goroutines: scheduler_perf checks for leaks
	})
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("waiting for the pod informer of namespace %s to sync: %w", ns, context.Cause(ctx))
	}
	return informer, nil
}
