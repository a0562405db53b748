// Command manager is the celsched binary: a controller-runtime manager that
// compiles SchedulingPolicy objects and runs kube-scheduler with the CEL
// plugins. It connects with --kubeconfig, $KUBECONFIG or the in-cluster
// service account, and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"

	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/celsched/celsched/cmd/manager/app"
)

// celschedVersion is celsched's own version, set by the Makefile with -ldflags.
var celschedVersion = "v0.0.0-dev"

func main() {
	opts, showVersion := addFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Printf("celsched %s (kube-scheduler %s)\n", celschedVersion, version.Get().GitVersion)
		return
	}
	logger := klog.NewKlogr()
	ctrl.SetLogger(logger)

	if err := run(*opts); err != nil {
		logger.Error(err, "celsched manager failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// addFlags registers the binary's flags on fs: the manager's options,
// --version, and klog's (-v, --vmodule, ...).
func addFlags(fs *flag.FlagSet) (opts *app.Options, showVersion *bool) {
	opts = &app.Options{}
	opts.AddFlags(fs)
	showVersion = fs.Bool("version", false, "Print the versions and exit.")
	klog.InitFlags(fs)
	return opts, showVersion
}

func run(opts app.Options) error {
	ctx := klog.NewContext(ctrl.SetupSignalHandler(), klog.NewKlogr())
	cfg, err := ctrl.GetConfig() // --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	mgr, err := app.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting the celsched manager", "version", celschedVersion,
		"kubeScheduler", version.Get().GitVersion, "host", cfg.Host, "schedulerNames", mgr.SchedulerNames)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
