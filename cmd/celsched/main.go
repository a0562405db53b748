// Command celsched is the dry-run CLI of celsched: it validates, evaluates
// and tests SchedulingPolicies with the same engine as the scheduler. Named
// kubectl-celsched on the PATH, it is the kubectl plugin `kubectl celsched`.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// celschedVersion is set by the Makefile with -ldflags.
var celschedVersion = "v0.0.0-dev"

func main() {
	os.Exit(run(os.Args[1:], &streams{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

// run executes the CLI and returns its exit code: 0 on success, 1 when
// policies are invalid or tests fail, 2 on bad usage or input.
func run(args []string, s *streams) int {
	// kube-scheduler's framework logs through klog; the CLI prints reports.
	klog.SetLogger(logr.Discard())
	root := &cobra.Command{
		Use:           "celsched",
		Short:         "Validate, evaluate and test celsched SchedulingPolicies before they act",
		Version:       celschedVersion,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.AddCommand(newValidateCommand(s), newEvalCommand(s), newTestCommand(s))
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(s.err, "error:", err)
	var usage *usageErr
	if errors.As(err, &usage) {
		return 2
	}
	return 1
}

// usageErr is bad usage or unreadable input: exit code 2.
type usageErr struct{ err error }

func (e *usageErr) Error() string { return e.err.Error() }

func usageError(msg string) error { return &usageErr{err: errors.New(msg)} }

// inputError marks an error reading or decoding the input files.
func inputError(err error) error { return &usageErr{err: err} }
