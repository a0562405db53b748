// Command manager is the celsched binary: a controller-runtime manager that
// compiles SchedulingPolicy objects and runs kube-scheduler with the CEL
// plugins.
//
// For now it links kube-scheduler as a library, prints the versions and exits;
// the manager itself comes with the scheduler issue.
package main

import (
	"fmt"

	"k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// celschedVersion is celsched's own version, set by the Makefile with -ldflags.
var celschedVersion = "v0.0.0-dev"

func main() {
	scheduler := app.NewSchedulerCommand()
	fmt.Printf("celsched %s (%s %s)\n", celschedVersion, scheduler.Name(), version.Get().GitVersion)
}
