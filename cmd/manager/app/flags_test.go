package app

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestRolloutIntervalDeprecated: --rollout-interval still parses, so that
// existing command lines start, and its help says that it does nothing.
func TestRolloutIntervalDeprecated(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--rollout-interval=5s"}); err != nil {
		t.Fatal(err)
	}
	if o.RolloutInterval != 5*time.Second {
		t.Errorf("RolloutInterval %s, want 5s", o.RolloutInterval)
	}
	if usage := fs.Lookup("rollout-interval").Usage; !strings.HasPrefix(usage, "Deprecated, no effect") {
		t.Errorf("help of --rollout-interval: %q", usage)
	}
}

// TestRemediationFlag: remediation is allowed by default (each policy
// still opts in with spec.remediation); --remediation=false disables it.
func TestRemediationFlag(t *testing.T) {
	for args, want := range map[string]bool{"": true, "--remediation=false": false} {
		var o Options
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		if o.Remediation != want {
			t.Errorf("%q: Remediation %v, want %v", args, o.Remediation, want)
		}
	}
}
