// Package featuregatestest restores, after a test, the process's emulated
// Kubernetes version and feature gates that the test set through
// featuregates.Apply (a manager's or the CLI's --emulated-version and
// --feature-gates): they are process-wide, and shared by the tests of a
// package.
package featuregatestest

import (
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"

	"github.com/celsched/celsched/celplugins/featuregates"
)

// Restore sets the process's emulated version and its explicitly set
// feature gates back, when tb ends, to what they are when Restore is
// called; call it before the test changes them. Gates set with
// featuregatetesting before Restore are restored too, in their order:
// Restore's cleanup runs first, and puts the emulation version back, as
// featuregatetesting's cleanup requires.
func Restore(tb testing.TB) {
	tb.Helper()
	emulated := featuregates.EffectiveVersion().EmulationVersion().String()
	gates := explicitlySet()
	tb.Cleanup(func() {
		// The gates the test set may not exist at the version restored,
		// or be locked there: reset them all first.
		for name := range explicitlySet() {
			if err := utilfeature.DefaultMutableFeatureGate.ResetFeatureValueToDefault(featuregate.Feature(name)); err != nil {
				tb.Errorf("resetting feature gate %s: %v", name, err)
			}
		}
		if err := featuregates.Apply(featuregates.Settings{EmulatedVersion: emulated, FeatureGates: gates}); err != nil {
			tb.Errorf("restoring the emulated version and the feature gates: %v", err)
		}
	})
}

// explicitlySet returns the gates set explicitly on the process's gate,
// with their values.
func explicitlySet() map[string]bool {
	fg := utilfeature.DefaultMutableFeatureGate
	set := map[string]bool{}
	for name := range fg.GetAllVersioned() {
		if fg.ExplicitlySet(name) {
			set[string(name)] = fg.Enabled(name)
		}
	}
	return set
}
