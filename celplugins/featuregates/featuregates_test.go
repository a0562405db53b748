package featuregates_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/celplugins/featuregates/featuregatestest"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

// state is what Apply sets: the kube component's versions and the gates
// the tests look at.
type state struct {
	Emulation, MinCompatibility string
	Gates                       map[featuregate.Feature]bool
}

// watched are gates whose defaults or existence differ between Kubernetes
// 1.34, 1.35, 1.36 and 1.37.
var watched = []featuregate.Feature{
	features.NodeDeclaredFeatures,               // alpha off 1.35, beta on 1.36, GA locked on 1.37
	features.StorageCapacityScoring,             // alpha off until 1.36, beta on 1.37
	features.TaintTolerationComparisonOperators, // alpha off since 1.35
	features.DRAPrioritizedList,                 // on; GA 1.36, locked 1.37
}

func current() state {
	ev := featuregates.EffectiveVersion()
	s := state{Emulation: ev.EmulationVersion().String(), MinCompatibility: ev.MinCompatibilityVersion().String(), Gates: map[featuregate.Feature]bool{}}
	for _, f := range watched {
		s.Gates[f] = utilfeature.DefaultFeatureGate.Enabled(f)
	}
	return s
}

// TestApply: --emulated-version sets the kube component's emulation
// version (and the minimum compatibility version, the one before it) and
// the gates' defaults at that version, with kube-scheduler's syntax and
// range; gates are checked at that version (one that does not exist yet
// fails, one locked only later may be set), as kube-scheduler's
// "emulated version" cases do. An error names the flag and its value, and
// changes nothing.
func TestApply(t *testing.T) {
	binary := current()
	if binary.Emulation != "1.37" {
		t.Fatalf("the tests expect Kubernetes 1.37, the process emulates %s", binary.Emulation)
	}
	for name, tc := range map[string]struct {
		settings featuregates.Settings
		want     state
		wantErr  string
	}{
		"binary version": {settings: featuregates.Settings{EmulatedVersion: "1.37"}, want: binary},
		"1.36": {settings: featuregates.Settings{EmulatedVersion: "1.36"}, want: state{Emulation: "1.36", MinCompatibility: "1.35", Gates: map[featuregate.Feature]bool{
			features.NodeDeclaredFeatures: true, features.StorageCapacityScoring: false, features.TaintTolerationComparisonOperators: false, features.DRAPrioritizedList: true}}},
		"kube=1.35": {settings: featuregates.Settings{EmulatedVersion: "kube=1.35"}, want: state{Emulation: "1.35", MinCompatibility: "1.34", Gates: map[featuregate.Feature]bool{
			features.NodeDeclaredFeatures: false, features.StorageCapacityScoring: false, features.TaintTolerationComparisonOperators: false, features.DRAPrioritizedList: true}}},
		"gates at the emulated version": {settings: featuregates.Settings{EmulatedVersion: "1.36",
			FeatureGates: map[string]bool{string(features.DRAPrioritizedList): false, string(features.TaintTolerationComparisonOperators): true}},
			want: state{Emulation: "1.36", MinCompatibility: "1.35", Gates: map[featuregate.Feature]bool{
				features.NodeDeclaredFeatures: true, features.StorageCapacityScoring: false, features.TaintTolerationComparisonOperators: true, features.DRAPrioritizedList: false}}},

		"below the range":  {settings: featuregates.Settings{EmulatedVersion: "1.33"}, wantErr: "--emulated-version=1.33: emulation version 1.33 is not between [1.34, 1.37.0]"},
		"above the binary": {settings: featuregates.Settings{EmulatedVersion: "1.38"}, wantErr: "--emulated-version=1.38: emulation version 1.38 is not between [1.34, 1.37.0]"},
		"patch version":    {settings: featuregates.Settings{EmulatedVersion: "1.36.1"}, wantErr: "--emulated-version=1.36.1: patch version not allowed, got: kube=1.36.1"},
		"not a version":    {settings: featuregates.Settings{EmulatedVersion: "one.two"}, wantErr: `--emulated-version=one.two: could not parse "one.two" as version`},
		"other component":  {settings: featuregates.Settings{EmulatedVersion: "wardle=1.2"}, wantErr: "--emulated-version=wardle=1.2: component not registered: wardle"},
		"two versions":     {settings: featuregates.Settings{EmulatedVersion: "1.35,1.36"}, wantErr: "--emulated-version=1.35,1.36: duplicate version flag, kube=1.35 and kube=1.36"},
		"gate not yet there": {settings: featuregates.Settings{EmulatedVersion: "1.34", FeatureGates: map[string]bool{string(features.TaintTolerationComparisonOperators): true}},
			wantErr: "--feature-gates=TaintTolerationComparisonOperators=true at --emulated-version=1.34: cannot set feature gate TaintTolerationComparisonOperators to true, feature is PreAlpha at emulated version 1.34"},
		"gate locked at the binary version": {settings: featuregates.Settings{FeatureGates: map[string]bool{string(features.DRAPrioritizedList): false}},
			wantErr: "--feature-gates=DRAPrioritizedList=false: cannot set feature gate DRAPrioritizedList to false, feature is locked to true"},
		"unknown gate beside a valid version": {settings: featuregates.Settings{EmulatedVersion: "1.36", FeatureGates: map[string]bool{"NoSuchGate": true}},
			wantErr: "--feature-gates=NoSuchGate=true at --emulated-version=1.36: unrecognized feature gate: NoSuchGate"},
	} {
		t.Run(name, func(t *testing.T) {
			featuregatestest.Restore(t)
			checkErr := featuregates.Check(tc.settings)
			if got := current(); !cmp.Equal(got, binary) {
				t.Errorf("Check changed the process (-before +after):\n%s", cmp.Diff(binary, got))
			}
			err := featuregates.Apply(tc.settings)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("Apply: error %v, want one starting with %q", err, tc.wantErr)
				}
				if checkErr == nil || checkErr.Error() != err.Error() {
					t.Errorf("Check: error %v, want Apply's", checkErr)
				}
				if diff := cmp.Diff(binary, current()); diff != "" {
					t.Errorf("a rejected value changed the process (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil || checkErr != nil {
				t.Fatalf("Apply: %v; Check: %v", err, checkErr)
			}
			if diff := cmp.Diff(tc.want, current()); diff != "" {
				t.Errorf("after Apply (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(binary, current()); diff != "" {
		t.Errorf("not restored after the test (-want +got):\n%s", diff)
	}
}

// TestEmulatedDefaultPlugins: the scheduler configuration loaded after
// Apply has the default plugins of the emulated version, as
// kube-scheduler's: NodeDeclaredFeatures, on by default since 1.36, is off
// at 1.35, and its plugin is not in the profile.
func TestEmulatedDefaultPlugins(t *testing.T) {
	runs := func() bool {
		t.Helper()
		cfg, err := defaultconfig.Load("")
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(cfg.Profiles[0].Plugins.MultiPoint.Enabled, func(p schedulerconfig.Plugin) bool {
			return p.Name == names.NodeDeclaredFeatures
		})
	}
	featuregatestest.Restore(t)
	if !runs() {
		t.Fatalf("at the binary's version, the profile does not run %s", names.NodeDeclaredFeatures)
	}
	if err := featuregates.Apply(featuregates.Settings{EmulatedVersion: "1.35"}); err != nil {
		t.Fatal(err)
	}
	if runs() {
		t.Errorf("at --emulated-version=1.35, the profile runs %s", names.NodeDeclaredFeatures)
	}
}
