package main

import (
	"flag"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/celsched/celsched/celplugins/featuregates/featuregatestest"
	"github.com/celsched/celsched/cmd/manager/app"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/testenv"
)

// TestEmulatedVersion starts the manager, with the binary's flags, at
// --emulated-version=1.35 with a gate that is alpha at 1.35, against a
// real API server: the scheduler's profile has kube-scheduler's default
// plugins of 1.35 (NodeDeclaredFeatures, on by default since 1.36, is
// not among them), the gate is on, the versions are logged and exported
// as kube-scheduler exports them.
//
// In this package, a process of its own: one manager per process
// (controller-runtime's controller names are unique in a process), and
// cmd/manager/app's tests start theirs at the binary's version.
func TestEmulatedVersion(t *testing.T) {
	ctrl.SetLogger(klog.NewKlogr())
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	shipped, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if !runs(shipped.Profiles[0].Plugins.MultiPoint, names.NodeDeclaredFeatures) {
		t.Fatalf("at the binary's version, profile %s does not run %s: %v", shipped.Profiles[0].SchedulerName, names.NodeDeclaredFeatures, shipped.Profiles[0].Plugins.MultiPoint.Enabled)
	}
	featuregatestest.Restore(t)

	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	opts, _ := addFlags(fs)
	if err := fs.Parse([]string{"--emulated-version=1.35", "--feature-gates=" + string(features.TaintTolerationComparisonOperators) + "=true",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-port=0", "--leader-elect=false"}); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	mgr, err := app.New(ctx, cfg, *opts)
	if err != nil {
		t.Fatalf("starting the manager with --emulated-version=%s: %v", opts.EmulatedVersion, err)
	}

	gates := map[string]bool{}
	for _, f := range []string{string(features.NodeDeclaredFeatures), string(features.TaintTolerationComparisonOperators)} {
		gates[f] = utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(f))
	}
	if want := map[string]bool{string(features.NodeDeclaredFeatures): false, string(features.TaintTolerationComparisonOperators): true}; !maps.Equal(gates, want) {
		t.Errorf("feature gates %v, want %v", gates, want)
	}
	plugins := mgr.Plugins("celsched")
	if plugins == nil {
		t.Fatal("the manager has no framework for profile celsched")
	}
	if runs(plugins.PreFilter, names.NodeDeclaredFeatures) || runs(plugins.Filter, names.NodeDeclaredFeatures) {
		t.Errorf("at 1.35 profile celsched runs %s: PreFilter %v, Filter %v", names.NodeDeclaredFeatures, plugins.PreFilter.Enabled, plugins.Filter.Enabled)
	}
	if !runs(plugins.Filter, names.TaintToleration) || !runs(plugins.Filter, "CELFilter") {
		t.Errorf("profile celsched does not run TaintToleration and CELFilter: %v", plugins.Filter.Enabled)
	}

	log := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{"Feature gates set", `emulationVersion="1.35"`, `minCompatibilityVersion="1.34"`, `binaryVersion="1.37`, `featureGates="TaintTolerationComparisonOperators=true"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the manager's log does not contain %s:\n%s", want, log)
		}
	}
	checkMetric(t, "version_info", map[string]string{"component": "kube", "emulation": "1.35", "min_compat": "1.34"})
	checkMetric(t, "kubernetes_feature_enabled", map[string]string{"name": string(features.TaintTolerationComparisonOperators), "stage": "ALPHA"})

}

// checkMetric fails unless component-base's legacy registry (the
// manager's /metrics/scheduler) has a series of name with these labels,
// at 1.
func checkMetric(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == name })
	if i < 0 {
		t.Errorf("no metric %s", name)
		return
	}
	for _, m := range families[i].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if _, ok := labels[l.GetName()]; ok {
				got[l.GetName()] = l.GetValue()
			}
		}
		if maps.Equal(got, labels) && m.GetGauge().GetValue() == 1 {
			return
		}
	}
	t.Errorf("no series %s%v at 1 in %v", name, labels, families[i].GetMetric())
}

func runs(set schedulerconfig.PluginSet, name string) bool {
	return slices.ContainsFunc(set.Enabled, func(p schedulerconfig.Plugin) bool { return p.Name == name })
}
