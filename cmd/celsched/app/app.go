// Package app is the celsched CLI: it validates, evaluates, explains and
// tests SchedulingPolicies with the same engine and scheduling framework as
// the scheduler. cmd/celsched is its binary; the integration tests run it
// in-process against a live control plane.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/simulate/source"
)

// Version is set by the Makefile with -ldflags.
var Version = "v0.0.0-dev"

var discardLogs sync.Once

// Run executes the CLI and returns its exit code: 0 on success, 1 when
// policies are invalid or tests fail, 2 on bad usage or input.
func Run(args []string, in io.Reader, out, errOut io.Writer) int {
	s := &streams{in: in, out: out, err: errOut}
	// kube-scheduler's framework logs through klog; the CLI prints reports.
	// Once per process: the informers of an earlier Run's dry-run
	// schedulers may still be stopping and logging (tests call Run again
	// and again).
	discardLogs.Do(func() { klog.SetLogger(logr.Discard()) })
	root := &cobra.Command{
		Use:           "celsched",
		Short:         "Validate, evaluate, explain and test celsched SchedulingPolicies before they act",
		Version:       Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// kube-scheduler's emulated version and feature gates, as the manager
	// takes them: the dry run's frameworks and CEL environment read the
	// same process-wide version and gate (celplugins/featuregates).
	var gates featuregates.Settings
	root.PersistentFlags().StringVar(&gates.EmulatedVersion, featuregates.EmulatedVersionFlagName, "",
		"The manager's --emulated-version, for the dry run's scheduling framework: give the manager's to evaluate as its scheduler does. "+featuregates.EmulatedVersionUsage())
	root.PersistentFlags().Var(featuregates.NewFlag(&gates.FeatureGates), featuregates.FlagName,
		"kube-scheduler's feature gates for the dry run's scheduling framework (Name=true,Other=false), as the manager's --feature-gates: give the manager's to evaluate as its scheduler does")
	var prof profiling
	prof.addFlags(root)
	// The version and the gates are set before the profile starts and the
	// command runs.
	startProfile := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := featuregates.Apply(gates); err != nil {
			return &usageErr{err: err}
		}
		return startProfile(cmd, args)
	}
	root.SetArgs(args)
	// The same discarding logger in the commands' context: the framework
	// takes its logger from there (klog.FromContext), and asks it at
	// every node whether a verbose level is on. klog's own logger answers
	// that with an allocation each time (2.4 million on impact's 5000
	// nodes); the discarding one answers no at once.
	root.SetContext(klog.NewContext(context.Background(), logr.Discard()))
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetVersionTemplate(versions() + "\n")
	root.AddCommand(commands(s)...)
	cmd, err := root.ExecuteC()
	err = errors.Join(err, prof.stop())
	if err == nil {
		return 0
	}
	// The error names the command the user ran: one of a script's
	// several celsched commands, or kubectl celsched's.
	if cmd != nil && cmd != root {
		err = fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	fmt.Fprintln(s.err, "error:", err)
	var usage *usageErr
	var input *source.InputError
	if errors.As(err, &usage) || errors.As(err, &input) {
		return 2
	}
	return 1
}

// commands are the CLI's commands, under its root command.
func commands(s *streams) []*cobra.Command {
	return []*cobra.Command{newVersionCommand(s), newValidateCommand(s), newEvalCommand(s), newExplainCommand(s), newTestCommand(s), newImpactCommand(s), newAnalyzeCommand(s), newRolloutCommand(s)}
}

// usageErr is bad usage or unreadable input: exit code 2.
type usageErr struct{ err error }

func (e *usageErr) Error() string { return e.err.Error() }

func usageError(msg string) error { return &usageErr{err: errors.New(msg)} }

// inputError marks an error reading or decoding the input files.
func inputError(err error) error { return &usageErr{err: err} }
