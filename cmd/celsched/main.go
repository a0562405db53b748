// Command celsched is the dry-run CLI of celsched (see package app). Named
// kubectl-celsched on the PATH, it is the kubectl plugin `kubectl celsched`.
package main

import (
	"os"

	"github.com/celsched/celsched/cmd/celsched/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
