package app

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// profiling writes Go's CPU and heap profiles of one command, for
// measuring the CLI on a large cluster (go tool pprof reads them). The
// flags are hidden: they are for developers, not part of the CLI's
// interface.
type profiling struct {
	cpu, mem string
	cpuFile  *os.File
}

func (p *profiling) addFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the command to this file")
	f.StringVar(&p.mem, "memprofile", "", "write a heap profile (allocations since start) at the end of the command to this file")
	_ = f.MarkHidden("cpuprofile")
	_ = f.MarkHidden("memprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return p.start() }
}

func (p *profiling) start() error {
	if p.cpu == "" {
		return nil
	}
	f, err := os.Create(p.cpu)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	p.cpuFile = f
	return nil
}

// stop ends the CPU profile and writes the heap profile; a no-op without
// the flags.
func (p *profiling) stop() error {
	var errs []error
	if p.cpuFile != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.cpuFile.Close())
		p.cpuFile = nil
	}
	if p.mem != "" {
		f, err := os.Create(p.mem)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("--memprofile: %w", err))...)
		}
		runtime.GC()
		errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
	}
	return errors.Join(errs...)
}
