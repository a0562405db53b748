package app_test

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/celplugins/featuregates/featuregatestest"
	"github.com/celsched/celsched/cmd/manager/app"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/test/testenv"
)

// The gate the test turns on and off: alpha and off by default in
// Kubernetes 1.37, it adds the built-in DeferredPodScheduling plugin to
// every profile's default plugins, and needs no API the test API server
// lacks.
const (
	gate       = features.InPlacePodVerticalScalingSchedulerPreemption
	gatePlugin = names.DeferredPodScheduling
)

// TestFeatureGates starts the manager against a real API server with
// --feature-gates: a gate the manager does not know or a locked gate fails
// with an error that names it and changes no gate, and so do an
// --emulated-version out of kube-scheduler's range or malformed, and a
// gate that does not exist yet at the emulated version (cmd/manager's
// TestEmulatedVersion starts one at a valid one); a malformed value is a
// flag error; a valid gate reaches the process's feature gate and the
// scheduler's framework (a built-in plugin that the gate adds to the
// profile), and the scheduler schedules with it.
//
// One manager per process (controller-runtime's controller names are
// unique in a process): the test starts one, with the gate on; the
// baseline without it is the shipped configuration as loaded.
func TestFeatureGates(t *testing.T) {
	ctrl.SetLogger(klog.NewKlogr())
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "..", "config"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	c, err := testenv.Client(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the test sets, the gate and the emulated version are back
	// at their defaults after it.
	featuregatestest.Restore(t)

	for name, tc := range map[string]struct {
		emulatedVersion string
		gates           map[string]bool
		wantErr         string
	}{
		"unknown gate": {gates: map[string]bool{"NoSuchGate": true, string(gate): true}, wantErr: "--feature-gates=" + string(gate) + "=true,NoSuchGate=true: unrecognized feature gate: NoSuchGate"},
		// GA and locked to true in Kubernetes 1.37.
		"locked gate": {gates: map[string]bool{string(features.NodeDeclaredFeatures): false}, wantErr: "--feature-gates=NodeDeclaredFeatures=false: cannot set feature gate NodeDeclaredFeatures to false, feature is locked to true"},
		// kube-scheduler 1.37 emulates 1.34 to 1.37, as major.minor.
		"emulated version out of range": {emulatedVersion: "1.33", gates: map[string]bool{string(gate): true}, wantErr: "--emulated-version=1.33: emulation version 1.33 is not between [1.34, 1.37.0]"},
		"emulated version malformed":    {emulatedVersion: "1.36.2", gates: map[string]bool{string(gate): true}, wantErr: "--emulated-version=1.36.2: patch version not allowed, got: kube=1.36.2"},
		// InterPodAffinityHostnameFastPath is new in 1.37.
		"gate not yet at the emulated version": {emulatedVersion: "1.36", gates: map[string]bool{string(features.InterPodAffinityHostnameFastPath): true},
			wantErr: "--feature-gates=InterPodAffinityHostnameFastPath=true at --emulated-version=1.36: cannot set feature gate InterPodAffinityHostnameFastPath to true, feature is PreAlpha at emulated version 1.36"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			o := managerOptions(tc.gates)
			o.EmulatedVersion = tc.emulatedVersion
			_, err := app.New(ctx, cfg, o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("app.New: error %v, want one containing %q", err, tc.wantErr)
			}
			// Nothing changed: the valid gate beside the bad one is not
			// set, the version beside the bad gate not emulated.
			for name := range tc.gates {
				if f := featuregate.Feature(name); name != "NoSuchGate" && utilfeature.DefaultFeatureGate.Enabled(f) != utilfeature.DefaultMutableFeatureGate.GetAll()[f].Default {
					t.Errorf("feature gate %s is not at its default after a failed start", name)
				}
			}
			if v := featuregates.EffectiveVersion().EmulationVersion().String(); v != "1.37" {
				t.Errorf("the process emulates %s after a failed start, want 1.37", v)
			}
		})
	}

	t.Run("malformed value", func(t *testing.T) {
		for value, wantErr := range map[string]string{
			string(gate) + "=maybe": "invalid value of " + string(gate) + ": maybe",
			string(gate):            "malformed pair, expect string=bool",
		} {
			var o app.Options
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse([]string{"--feature-gates=" + value})
			if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "-feature-gates") {
				t.Errorf("--feature-gates=%s: error %v, want one naming the flag and containing %q", value, err, wantErr)
			}
		}
	})

	t.Run("off by default", func(t *testing.T) {
		shipped, err := defaultconfig.Load("")
		if err != nil {
			t.Fatal(err)
		}
		if utilfeature.DefaultFeatureGate.Enabled(gate) || runs(shipped.Profiles[0].Plugins.MultiPoint, gatePlugin) {
			t.Errorf("without the gate, feature gate %s = %v and profile %s runs %v, want off and without %s", gate,
				utilfeature.DefaultFeatureGate.Enabled(gate), shipped.Profiles[0].SchedulerName, shipped.Profiles[0].Plugins.MultiPoint.Enabled, gatePlugin)
		}
	})

	t.Run("on", func(t *testing.T) {
		// The flag as the binary parses it.
		var o app.Options
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--feature-gates=" + string(gate) + "=true", "--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-port=0", "--leader-elect=false"}); err != nil {
			t.Fatal(err)
		}
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		mgr, err := app.New(ctx, cfg, o)
		if err != nil {
			t.Fatalf("starting the manager with --feature-gates=%v: %v", o.FeatureGates, err)
		}
		if !utilfeature.DefaultFeatureGate.Enabled(gate) {
			t.Errorf("feature gate %s is off, want on", gate)
		}
		plugins := mgr.Plugins("celsched")
		if plugins == nil {
			t.Fatal("the manager has no framework for profile celsched")
		}
		if !runs(plugins.PreFilter, gatePlugin) || !runs(plugins.Filter, gatePlugin) || !runs(plugins.Permit, gatePlugin) {
			t.Errorf("profile celsched does not run %s at PreFilter, Filter and Permit: %v, %v, %v", gatePlugin,
				plugins.PreFilter.Enabled, plugins.Filter.Enabled, plugins.Permit.Enabled)
		}
		if !runs(plugins.Filter, "CELFilter") {
			t.Errorf("profile celsched does not run CELFilter: %v", plugins.Filter.Enabled)
		}
		if mgr.Plugins("no-such-profile") != nil {
			t.Error("Plugins of a profile the scheduler does not serve is not nil")
		}
		// The scheduler with the gate schedules.
		createNode(t, c, "node-a")
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		pod := createPod(t, c, "pod-a")
		if node := waitBound(t, c, pod); node != "node-a" {
			t.Errorf("pod %s bound to %q, want node-a", pod.Name, node)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with an error: %v", err)
		}
	})
}

// managerOptions runs no webhook, metrics or probe server and no leader
// election.
func managerOptions(gates map[string]bool) app.Options {
	return app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", FeatureGates: gates}
}

func runs(set schedulerconfig.PluginSet, name string) bool {
	return slices.ContainsFunc(set.Enabled, func(p schedulerconfig.Plugin) bool { return p.Name == name })
}

func createNode(t *testing.T, c client.Client, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if err := c.Create(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}
	if err := c.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
}

func createPod(t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{Name: "c", Image: "pause",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
	}
	if err := c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// waitBound returns the node pod is bound to.
func waitBound(t *testing.T, c client.Client, pod *corev1.Pod) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		node = got.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s was not scheduled: %v", pod.Name, err)
	}
	return node
}
