package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version"
)

// versions is what `celsched version` and `celsched --version` print, in the
// manager's --version words: celsched's version and that of the
// kube-scheduler whose framework the dry run evaluates with. The Makefile
// stamps both with -ldflags.
func versions() string {
	return fmt.Sprintf("celsched %s (kube-scheduler %s)", Version, version.Get().GitVersion)
}

// newVersionCommand is `celsched version`.
func newVersionCommand(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of celsched and of the kube-scheduler it evaluates with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(s.out, versions())
			return err
		},
	}
}
