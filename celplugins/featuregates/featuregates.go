// Package featuregates sets the Kubernetes feature gates that
// kube-scheduler's framework and its plugins read, from a --feature-gates
// flag, for the manager and the dry-run CLI alike.
//
// kube-scheduler's own --feature-gates sets the process's default feature
// gate (k8s.io/apiserver/pkg/util/feature.DefaultMutableFeatureGate) before
// it loads its configuration and builds the scheduler: the default plugin
// set of a profile, the in-tree plugins' feature.Features (built by
// frameworkplugins.NewInTreeRegistry from that gate) and the scheduler's
// queue and cache all read it. celsched does the same, so the manager's
// scheduler and a dry run (celplugins/verdict, which builds its frameworks
// from the same registry) see the same gates.
package featuregates

import (
	"fmt"
	"sort"
	"strings"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
)

// FlagName is the flag's name, as kube-scheduler spells it.
const FlagName = "feature-gates"

// NewFlag returns the value of a --feature-gates flag, a flag.Value and a
// pflag.Value, that parses comma-separated Name=true|false pairs into
// gates. A malformed pair or a value that is not a boolean is a flag
// error; the names are checked by Set.
func NewFlag(gates *map[string]bool) *cliflag.MapStringBool {
	return cliflag.NewMapStringBool(gates)
}

// Usage is the flag's help text: its format and every known gate with its
// stage and default, as kube-scheduler's --feature-gates lists them.
func Usage() string {
	return "Comma-separated Name=true|false pairs that set kube-scheduler's feature gates, as kube-scheduler's --feature-gates does (e.g. GenericWorkload=true). " +
		"An unknown name, a locked gate set to a value other than its default or a gate whose dependencies are off fails start-up. Gates:\n" +
		strings.Join(utilfeature.DefaultFeatureGate.KnownFeatures(), "\n")
}

// Set sets gates on the process's default feature gate. It checks them all
// first: an unknown name, a locked gate or an unmet dependency is an error
// that names it, and then nothing changes. Call it before building a
// scheduler configuration or a framework.
func Set(gates map[string]bool) error {
	if len(gates) == 0 {
		return nil
	}
	// The gate keeps a name it rejected and fails every later call with
	// it: check the change first.
	if err := Check(gates); err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		return fmt.Errorf("--%s=%s: %w", FlagName, String(gates), err)
	}
	return nil
}

// Check returns the error that Set would return for gates, and changes
// nothing: it sets them on a copy of the process's feature gate.
func Check(gates map[string]bool) error {
	if err := utilfeature.DefaultMutableFeatureGate.DeepCopy().SetFromMap(gates); err != nil {
		return fmt.Errorf("--%s=%s: %w", FlagName, String(gates), err)
	}
	return nil
}

// String formats gates as the flag takes them, sorted by name.
func String(gates map[string]bool) string {
	pairs := make([]string, 0, len(gates))
	for name, on := range gates {
		pairs = append(pairs, fmt.Sprintf("%s=%t", name, on))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}
