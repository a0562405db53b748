package performance

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/celsched/celsched/test/performance/perfdata"
)

// phasesFile, when set, is where each workload appends what its measured
// phases cost the process, one perfdata.Phase per JSON line (`make perf`
// writes DIR/phases.jsonl beside the DataItems file, which perftable reads).
var phasesFile = flag.String("celsched-phases", "", "append a JSON line per measured phase with the process's CPU time and heap allocations over it (perfdata.Phase)")

// profilesDir, when set, is where the meter writes a CPU profile of each
// measured phase, <test case>_<workload>_<namespace>.pprof, and the
// process's allocation profile at its start and end
// (....allocs-start.pprof, ....allocs.pprof: `go tool pprof -diff_base`
// of the two is what the phase allocated). Profiling costs the process
// some CPU, the same for every profile: a run with profiles is for
// reading where the time goes, not for the ratios.
var profilesDir = flag.String("celsched-cpuprofiles", "", "write a CPU profile and allocation profiles of each measured phase into this directory (needs -celsched-phases)")

// phaseMeter measures what each measured phase of one workload costs the
// test process: CPU time (getrusage) and heap allocations (runtime/metrics)
// from the moment the first pod of the phase's namespace is created to the
// moment its last pod is bound, as the scheduler's own pod informer sees
// them. A phase is the pods of one namespace named <profile>-<run>
// (perfdata.ParseNamespace); it ends when its pods-th pod is bound.
//
// What the process holds, so what the numbers include: the scheduler with
// both profiles (only one of them has pods during a phase), the in-process
// kube-apiserver (pod creation, binding, events, watches), scheduler_perf's
// pod creator and collectors (one throughput sample a second), and the
// controllers that scheduler_perf starts (garbage collector, namespaces,
// fake PV); etcd is a separate process and is not included. The
// apiserver's and the harness's work per pod is the same for every
// profile, so differences between profiles of one workload are the
// scheduler's.
//
// Its handler runs on the informer's delivery goroutine and does a map
// lookup per pod event; the samples are taken there, once at the start and
// once at the end of a phase.
type phaseMeter struct {
	testCase, workload string
	// pods is the number of pods per measured phase (the workload's
	// measurePods).
	pods int
	// profiles is the directory of the phases' CPU profiles, or "".
	profiles string
	// namespace, when set, is the one namespace whose pods are a phase
	// (an upstream workload's measured pods); otherwise a phase is each
	// namespace that names a profile.
	namespace string

	mu     sync.Mutex
	phases map[string]*meteredPhase // by namespace
	done   []perfdata.Phase         // in the order they ended
}

type meteredPhase struct {
	start          costSample
	created, bound int
	// err is why the phase cannot be measured.
	err error
	// profile is the file of the phase's CPU profile, while it runs.
	profile *os.File
	// base is the path of the phase's profiles without their suffix, or "".
	base string
}

// costSample is the process's counters at one moment.
type costSample struct {
	wall                     time.Time
	cpu                      time.Duration
	gcCPUSeconds             float64
	gcCycles                 uint64
	allocBytes, allocObjects uint64
}

// The runtime/metrics samples of a costSample, in this order.
var costMetrics = []string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
}

func takeSample() (costSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return costSample{}, fmt.Errorf("getrusage: %w", err)
	}
	samples := make([]metrics.Sample, len(costMetrics))
	for i, name := range costMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindBad {
			return costSample{}, fmt.Errorf("runtime/metrics has no %s", s.Name)
		}
	}
	return costSample{
		wall:         time.Now(),
		cpu:          time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		gcCPUSeconds: samples[0].Value.Float64(),
		gcCycles:     samples[1].Value.Uint64(),
		allocBytes:   samples[2].Value.Uint64(),
		allocObjects: samples[3].Value.Uint64(),
	}, nil
}

// newPhaseMeter returns a meter of the phases of one workload with pods
// pods each, writing CPU profiles into the directory profiles unless it is
// "".
func newPhaseMeter(testCase, workload string, pods int, profiles string) *phaseMeter {
	return &phaseMeter{testCase: testCase, workload: workload, pods: pods, profiles: profiles, phases: map[string]*meteredPhase{}}
}

// handler is the meter's pod event handler.
func (m *phaseMeter) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				m.observe(pod.Namespace, true, pod.Spec.NodeName != "")
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			oldPod, ok1 := oldObj.(*corev1.Pod)
			newPod, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && oldPod.Spec.NodeName == "" && newPod.Spec.NodeName != "" {
				m.observe(newPod.Namespace, false, true)
			}
		},
	}
}

// observe counts a pod created and/or bound in namespace ns, and takes
// the samples that start and end its phase.
func (m *phaseMeter) observe(ns string, created, bound bool) {
	if !m.measures(ns) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.phases[ns]
	if p == nil {
		var base string
		if m.profiles != "" {
			// Upstream's workload names may have slashes.
			base = filepath.Join(m.profiles, strings.ReplaceAll(fmt.Sprintf("%s_%s_%s", m.testCase, m.workload, ns), "/", "_"))
			writeAllocs(base + ".allocs-start.pprof")
		}
		s, err := takeSample()
		p = &meteredPhase{start: s, err: err} // finish reports err
		m.phases[ns] = p
		if err == nil && base != "" {
			p.base = base
			p.profile = startProfile(p.base + ".pprof")
		}
	}
	if p.err != nil {
		return
	}
	if created {
		p.created++
	}
	if !bound {
		return
	}
	p.bound++
	if p.bound != m.pods {
		return
	}
	end, err := takeSample()
	if p.profile != nil {
		pprof.StopCPUProfile()
		_ = p.profile.Close()
		p.profile = nil
	}
	if p.base != "" {
		writeAllocs(p.base + ".allocs.pprof")
	}
	if err != nil {
		p.err = err
		return
	}
	m.done = append(m.done, phaseCost(m.testCase, m.workload, ns, p.bound, p.start, end))
}

// measures says whether the pods of namespace ns are a phase.
func (m *phaseMeter) measures(ns string) bool {
	if m.namespace != "" {
		return ns == m.namespace
	}
	_, _, ok := perfdata.ParseNamespace(ns)
	return ok
}

// startProfile starts a CPU profile into a new file at path, and returns
// the file, or nil if it could not: a process has one CPU profile at a
// time, so a phase that starts while another's runs (the workloads'
// phases follow one another) has none. The profiles are a diagnostic:
// no profile fails no phase.
func startProfile(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil
	}
	return f
}

// writeAllocs writes the process's allocation profile (allocations since
// it started, sampled) into a new file at path; like startProfile, a
// diagnostic that fails nothing. The runtime publishes the profile as of
// the last completed garbage collection, which would leave up to a
// collection's worth of allocations (hundreds of MB here) on the wrong
// side of a phase's edge: writeAllocs collects first, outside the phase's
// samples (at a phase's start before its first sample, at its end after
// the last).
func writeAllocs(path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return
	}
	_ = f.Close()
}

// phaseCost is the cost of a phase of pods pods between two samples.
func phaseCost(testCase, workload, ns string, pods int, start, end costSample) perfdata.Phase {
	return perfdata.Phase{
		TestCase:     testCase,
		Workload:     workload,
		Namespace:    ns,
		Pods:         pods,
		WallSeconds:  end.wall.Sub(start.wall).Seconds(),
		CPUSeconds:   (end.cpu - start.cpu).Seconds(),
		GCCPUSeconds: end.gcCPUSeconds - start.gcCPUSeconds,
		GCCycles:     end.gcCycles - start.gcCycles,
		AllocBytes:   end.allocBytes - start.allocBytes,
		AllocObjects: end.allocObjects - start.allocObjects,
	}
}

// finish returns the phases that ended, and an error naming those that
// started and did not end with all their pods bound.
func (m *phaseMeter) finish() ([]perfdata.Phase, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ended := map[string]bool{}
	for _, p := range m.done {
		ended[p.Namespace] = true
	}
	var unfinished []string
	for ns, p := range m.phases {
		if p.profile != nil {
			pprof.StopCPUProfile()
			_ = p.profile.Close()
			p.profile = nil
		}
		switch {
		case p.err != nil:
			unfinished = append(unfinished, fmt.Sprintf("%s (%v)", ns, p.err))
		case !ended[ns]:
			unfinished = append(unfinished, fmt.Sprintf("%s (%d created, %d of %d bound)", ns, p.created, p.bound, m.pods))
		}
	}
	var err error
	if len(unfinished) > 0 {
		err = fmt.Errorf("phases not measured: %v", unfinished)
	}
	return append([]perfdata.Phase(nil), m.done...), err
}
