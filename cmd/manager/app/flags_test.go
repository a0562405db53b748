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
