// Package featuregates sets the Kubernetes version that kube-scheduler
// emulates and the feature gates that its framework and plugins read, from
// --emulated-version and --feature-gates, for the manager and the dry-run
// CLI alike.
//
// kube-scheduler registers the process's effective version and its default
// feature gate (k8s.io/apiserver/pkg/util/feature.DefaultMutableFeatureGate)
// as the "kube" component of compatibility.DefaultComponentGlobalsRegistry,
// and sets both from its flags before it loads its configuration and builds
// the scheduler: first the emulation version (the gates' defaults, and which
// gates exist, are those of that version), then the gates. The default
// plugin set of a profile, the in-tree plugins' feature.Features (built by
// frameworkplugins.NewInTreeRegistry from that gate), the scheduler's queue
// and cache, and the CEL environments built from the registry's
// compatibility version (k8s.io/apiserver/pkg/cel/environment, which
// celsched's engine uses) all read them. celsched does the same, so the
// manager's scheduler and a dry run (simulate/verdict, which builds its
// frameworks from the same registry) see the same versions and gates.
package featuregates

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
)

// The flags' names, as kube-scheduler spells them.
const (
	FlagName                = "feature-gates"
	EmulatedVersionFlagName = "emulated-version"
)

// Settings are the values of kube-scheduler's --emulated-version and
// --feature-gates.
type Settings struct {
	// EmulatedVersion is --emulated-version as given: major.minor, or
	// kube=major.minor. Empty leaves the process's emulation version as it
	// is: the binary's version, unless an earlier Apply changed it.
	EmulatedVersion string
	// FeatureGates are the gates set, Name: on.
	FeatureGates map[string]bool
}

// NewFlag returns the value of a --feature-gates flag, a flag.Value and a
// pflag.Value, that parses comma-separated Name=true|false pairs into
// gates. A malformed pair or a value that is not a boolean is a flag
// error; the names are checked by Apply.
func NewFlag(gates *map[string]bool) *cliflag.MapStringBool {
	return cliflag.NewMapStringBool(gates)
}

// Usage is --feature-gates' help text: its format and every known gate
// with its stage and default, as kube-scheduler's --feature-gates lists
// them.
func Usage() string {
	return "Comma-separated Name=true|false pairs that set kube-scheduler's feature gates, as kube-scheduler's --feature-gates does (e.g. GenericWorkload=true). " +
		"An unknown name, a gate that does not exist at --emulated-version, a locked gate set to a value other than its default or a gate whose dependencies are off fails start-up. Gates (at the binary's version):\n" +
		strings.Join(utilfeature.DefaultFeatureGate.KnownFeatures(), "\n")
}

// EmulatedVersionUsage is --emulated-version's help text, with the range
// the binary allows.
func EmulatedVersionUsage() string {
	ev, _ := kube()
	return "The Kubernetes version whose feature gates kube-scheduler emulates, as kube-scheduler's --emulated-version: major.minor (or kube=major.minor). " +
		"The gates' defaults, and which gates exist and may be set with --feature-gates, are that version's (e.g. GenericWorkload is alpha at 1.36, beta at 1.37); " +
		"new CEL expressions get the libraries of the version before it (or of the range's start). A malformed value or one out of range is an error that names it. Allowed: " +
		ev.AllowedEmulationVersionRange()
}

// EffectiveVersion returns the process's versions of the kube component:
// the binary's, the emulated one and the minimum compatibility version
// (the emulated version's predecessor, what CEL environments are built
// for).
func EffectiveVersion() basecompatibility.EffectiveVersion {
	ev, _ := kube()
	return ev
}

// kube returns the effective version and feature gate of the process's
// kube component, registering them as kube-scheduler's options.NewOptions
// does when nothing has.
func kube() (basecompatibility.MutableEffectiveVersion, featuregate.MutableVersionedFeatureGate) {
	return compatibility.DefaultComponentGlobalsRegistry.ComponentGlobalsOrRegister(basecompatibility.DefaultKubeComponent,
		compatibility.DefaultBuildEffectiveVersion(), utilfeature.DefaultMutableFeatureGate)
}

// Apply sets the emulation version, then the gates, of the process, as
// kube-scheduler's flags set them. It checks them all first: a malformed
// version, a version out of range or a gate the version rejects is an
// error that names the flag and its value, and then nothing changes. Call
// it before building a scheduler configuration, a framework or a CEL
// environment.
func Apply(s Settings) error {
	emulation, minCompatibility, err := s.check()
	if err != nil {
		return err
	}
	ev, fg := kube()
	if s.EmulatedVersion != "" {
		ev.SetEmulationVersion(emulation)
		ev.SetMinCompatibilityVersion(minCompatibility)
		if err := fg.SetEmulationVersionAndMinCompatibilityVersion(emulation, minCompatibility); err != nil {
			return s.versionError(err)
		}
	}
	if len(s.FeatureGates) == 0 {
		return nil
	}
	if err := fg.SetFromMap(s.FeatureGates); err != nil {
		return s.gatesError(err)
	}
	return nil
}

// Check returns the error that Apply would return for s, and changes
// nothing.
func Check(s Settings) error {
	_, _, err := s.check()
	return err
}

// check applies s to copies of the process's effective version and
// feature gate, on a registry of their own, with kube-scheduler's code:
// the registry's --emulated-version parses the version (major.minor, an
// optional component, no patch) and the effective version checks its
// range. It returns the emulation and minimum compatibility versions that
// s sets. (The gate keeps a name it rejected and fails every later call
// with it, so the process's own gate is only set once this passed.)
func (s Settings) check() (emulation, minCompatibility *version.Version, err error) {
	ev, fg := kube()
	evCopy := compatibility.DefaultBuildEffectiveVersion()
	evCopy.SetEmulationVersion(ev.EmulationVersion())
	evCopy.SetMinCompatibilityVersion(ev.MinCompatibilityVersion())
	fgCopy := fg.DeepCopy()
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, evCopy, fgCopy); err != nil {
		return nil, nil, err
	}
	if s.EmulatedVersion != "" {
		fs := pflag.NewFlagSet(EmulatedVersionFlagName, pflag.ContinueOnError)
		registry.AddFlags(fs)
		if err := fs.Set(EmulatedVersionFlagName, s.EmulatedVersion); err != nil {
			return nil, nil, s.versionError(err)
		}
		// Set sets the version, then re-checks the gates already set at
		// it; the range is checked after, as kube-scheduler's Validate
		// does, and reported first.
		setErr := registry.Set()
		if errs := evCopy.Validate(); len(errs) > 0 {
			// The first is the emulation version's range; the minimum
			// compatibility version's, derived from it, only follows.
			return nil, nil, s.versionError(errs[0])
		}
		if setErr != nil {
			return nil, nil, s.versionError(setErr)
		}
	}
	if len(s.FeatureGates) > 0 {
		if err := fgCopy.SetFromMap(s.FeatureGates); err != nil {
			return nil, nil, s.gatesError(err)
		}
	}
	if s.EmulatedVersion != "" {
		// Warns, as kube-scheduler does, of alpha gates on at an emulated
		// version older than the binary.
		if errs := registry.Validate(); len(errs) > 0 {
			return nil, nil, s.versionError(utilerrors.NewAggregate(errs))
		}
	}
	return evCopy.EmulationVersion(), evCopy.MinCompatibilityVersion(), nil
}

func (s Settings) versionError(err error) error {
	return fmt.Errorf("--%s=%s: %w", EmulatedVersionFlagName, s.EmulatedVersion, err)
}

func (s Settings) gatesError(err error) error {
	if s.EmulatedVersion != "" {
		return fmt.Errorf("--%s=%s at --%s=%s: %w", FlagName, String(s.FeatureGates), EmulatedVersionFlagName, s.EmulatedVersion, err)
	}
	return fmt.Errorf("--%s=%s: %w", FlagName, String(s.FeatureGates), err)
}

// AddMetrics records the process's versions and gates in the metrics that
// kube-scheduler exposes for them (version_info and
// kubernetes_feature_enabled, in component-base's legacy registry). Call
// it once, after Apply.
func AddMetrics() {
	_, fg := kube()
	fg.AddMetrics()
	compatibility.DefaultComponentGlobalsRegistry.AddMetrics()
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
