package app

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/version"
)

// TestVersion: `celsched version` and `celsched --version` print the same
// line, the manager's --version's: celsched's version and kube-scheduler's.
func TestVersion(t *testing.T) {
	want := fmt.Sprintf("celsched %s (kube-scheduler %s)\n", Version, version.Get().GitVersion)
	for name, args := range map[string][]string{
		"command": {"version"},
		"flag":    {"--version"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, args...)
			if code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}
