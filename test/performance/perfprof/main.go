// Command perfprof says where a workload's profiles spend what the celsched
// profile costs more than the stock one: it reads the phase profiles that
// `bin/perf.test ... -celsched-phases FILE -celsched-cpuprofiles DIR`
// writes (test/performance/meter_test.go: a CPU profile of each measured
// phase, and the allocation profile at its start and end), sorts every
// sample by the frames of its stack into the groups below (the first
// that matches), and prints per group the CPU seconds and the MB
// allocated of each profile's phases together, and the native and the
// celsched phases' excess over the stock phases' as a share of the stock
// phases' total (docs/performance.md, "Where the rest of the cost is").
//
// Usage: perfprof [-workload REGEXP] DIR
//
// It runs `go tool pprof -raw` on each file (an allocation profile as the
// difference of a phase's end and start: what the phase allocated).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/celsched/celsched/test/performance/perfdata"
)

// groups sort a sample by its stack: the first whose pattern matches one
// of its frames' functions takes it. A workload's own Go plugin
// (NodeOnly10Plugin's, in the test package) comes before the harness,
// which is nobody's cost; celsched's own code before GC, so that what it
// allocates is its own.
var groups = []struct {
	name    string
	pattern *regexp.Regexp
}{
	{"the workload's Go plugin (NodeOnly10Plugin)", regexp.MustCompile(`^github\.com/celsched/celsched/test/performance\.nodeOnly10Plugin\.`)},
	{"the harness and its profiling", regexp.MustCompile(`^github\.com/celsched/celsched/test/|^runtime/pprof\.`)},
	{"celsched's own code", regexp.MustCompile(`^github\.com/celsched/celsched/`)},
	{"GC and allocation", regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcDrain|gcAssistAlloc|bgsweep|bgscavenge|mallocgc)`)},
	{"kube-scheduler: score bookkeeping", regexp.MustCompile(`^k8s\.io/kubernetes/pkg/scheduler.*\.(RunScorePlugins|runRawScorePlugins|normalizeScores|prioritizeNodes)`)},
	{"kube-scheduler: filter loop's logger per node", regexp.MustCompile(`^k8s\.io/klog/v2\.LoggerWithName|textlogger`)},
	{"kube-scheduler: NodeResourcesFit per node", regexp.MustCompile(`noderesources\.fitsRequest`)},
	{"kube-scheduler: metrics", regexp.MustCompile(`^k8s\.io/kubernetes/pkg/scheduler/metrics`)},
	{"kube-scheduler: the rest", regexp.MustCompile(`^k8s\.io/kubernetes/pkg/scheduler`)},
	{"the API server and etcd's client", regexp.MustCompile(`^k8s\.io/apiserver|^go\.etcd\.io|^google\.golang\.org/grpc`)},
}

// other is the group of the samples no pattern matches.
const other = "other"

func main() {
	workload := flag.String("workload", "", "only the test cases and workloads matching this regular expression (e.g. 'Mixed100_5000Nodes_NoBatching')")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: perfprof [-workload REGEXP] DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	var match *regexp.Regexp
	if *workload != "" {
		var err error
		if match, err = regexp.Compile(*workload); err != nil {
			fmt.Fprintln(os.Stderr, "perfprof: -workload:", err)
			os.Exit(2)
		}
	}
	if err := run(os.Stdout, flag.Arg(0), match, goToolPprof); err != nil {
		fmt.Fprintln(os.Stderr, "perfprof:", err)
		os.Exit(1)
	}
}

// phase is one measured phase's profiles.
type phase struct {
	// key is the test case and workload, e.g. Mixed100_5000Nodes_NoBatching.
	key, profile string
	run          int
	// base is the files' path without their suffixes.
	base string
}

// phases finds the phases whose three profiles are in dir.
func phases(dir string) ([]phase, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.allocs-start.pprof"))
	if err != nil {
		return nil, err
	}
	var out []phase
	for _, f := range files {
		base := strings.TrimSuffix(f, ".allocs-start.pprof")
		name := filepath.Base(base)
		i := strings.LastIndexByte(name, '_')
		if i < 0 {
			continue
		}
		profile, run, ok := perfdata.ParseNamespace(name[i+1:])
		if !ok {
			continue
		}
		if !exists(base+".pprof") || !exists(base+".allocs.pprof") {
			continue // a phase that did not end, or had no CPU profile
		}
		out = append(out, phase{key: name[:i], profile: profile, run: run, base: base})
	}
	return out, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// pprofRaw returns the `go tool pprof -raw` text of a profile: of cpu, or
// of what was allocated between base and allocs.
type pprofRaw func(cpu, base, allocs string) ([]byte, error)

func goToolPprof(cpu, base, allocs string) ([]byte, error) {
	args := []string{"tool", "pprof", "-raw"}
	if cpu != "" {
		args = append(args, cpu)
	} else {
		args = append(args, "-sample_index=alloc_space", "-diff_base="+base, allocs)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// totals are a profile's sums per group: CPU nanoseconds and bytes.
type totals struct {
	phases     int
	cpu, alloc map[string]int64
}

func run(w io.Writer, dir string, match *regexp.Regexp, raw pprofRaw) error {
	all, err := phases(dir)
	if err != nil {
		return err
	}
	byKey := map[string]map[string]*totals{}
	for _, p := range all {
		if match != nil && !match.MatchString(p.key) {
			continue
		}
		profiles := byKey[p.key]
		if profiles == nil {
			profiles = map[string]*totals{}
			byKey[p.key] = profiles
		}
		t := profiles[p.profile]
		if t == nil {
			t = &totals{cpu: map[string]int64{}, alloc: map[string]int64{}}
			profiles[p.profile] = t
		}
		t.phases++
		cpu, err := raw(p.base+".pprof", "", "")
		if err != nil {
			return err
		}
		allocs, err := raw("", p.base+".allocs-start.pprof", p.base+".allocs.pprof")
		if err != nil {
			return err
		}
		for _, kind := range []struct {
			text []byte
			into map[string]int64
		}{{cpu, t.cpu}, {allocs, t.alloc}} {
			sums, err := groupSums(kind.text)
			if err != nil {
				return fmt.Errorf("%s: %w", p.base, err)
			}
			for g, v := range sums {
				kind.into[g] += v
			}
		}
	}
	if len(byKey) == 0 {
		return fmt.Errorf("%s: no phase profiles (-celsched-cpuprofiles)", dir)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			fmt.Fprintln(w)
		}
		writeTable(w, k, byKey[k])
	}
	return nil
}

// groupNames are the groups in the order they are printed.
func groupNames() []string {
	names := make([]string, 0, len(groups)+1)
	for _, g := range groups {
		names = append(names, g.name)
	}
	return append(names, other)
}

// writeTable prints a workload's table: per group and profile (stock,
// native, celsched) CPU seconds and MB allocated, and the native and the
// celsched phases' excess over the stock phases' in percent of the stock
// total.
func writeTable(w io.Writer, key string, profiles map[string]*totals) {
	var names []string
	for _, p := range []string{perfdata.StockProfile, perfdata.NativeProfile, perfdata.CelschedProfile} {
		if profiles[p] != nil {
			names = append(names, p)
		}
	}
	stock := profiles[perfdata.StockProfile]
	var compared []string // the profiles set against stock's
	if stock != nil {
		compared = names[1:] // stock is names[0]
	}
	fmt.Fprintf(w, "%s (phases:", key)
	for _, n := range names {
		fmt.Fprintf(w, " %s %d", n, profiles[n].phases)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintln(w)
	header := "| group |"
	rule := "|---|"
	for _, n := range names {
		header += fmt.Sprintf(" %s CPU s | %s MB |", n, n)
		rule += "---:|---:|"
	}
	for _, n := range compared {
		header += fmt.Sprintf(" %s - stock, CPU | %s - stock, allocated |", n, n)
		rule += "---:|---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	row := func(name string, value func(map[string]int64) int64) {
		line := "| " + name + " |"
		for _, n := range names {
			line += fmt.Sprintf(" %.1f | %.1f |", float64(value(profiles[n].cpu))/1e9, float64(value(profiles[n].alloc))/(1<<20))
		}
		for _, n := range compared {
			line += " " + excess(value(profiles[n].cpu), value(stock.cpu), sum(stock.cpu), 1e9, "s") + " |"
			line += " " + excess(value(profiles[n].alloc), value(stock.alloc), sum(stock.alloc), 1<<20, "MB") + " |"
		}
		fmt.Fprintln(w, line)
	}
	for _, g := range groupNames() {
		row(g, func(m map[string]int64) int64 { return m[g] })
	}
	row("all", sum)
}

// excess formats a group's value in a profile less its stock value, in
// unit and in percent of the stock total.
func excess(value, stock, stockTotal int64, unit float64, name string) string {
	d := value - stock
	if stockTotal == 0 {
		return fmt.Sprintf("%+.1f %s", float64(d)/unit, name)
	}
	return fmt.Sprintf("%+.1f %s (%+.1f%%)", float64(d)/unit, name, 100*float64(d)/float64(stockTotal))
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// groupSums reads `go tool pprof -raw` text and sums the default sample
// value (the column marked [dflt], else the last) per group.
func groupSums(text []byte) (map[string]int64, error) {
	var (
		column  = -1
		samples []rawSample
		frames  = map[int][]string{}
		section string
		loc     = -1
	)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Text()
		switch line {
		case "Samples:":
			section = "types"
			continue
		case "Locations":
			section = "locations"
			continue
		case "Mappings":
			section = ""
			continue
		}
		switch section {
		case "types":
			types := strings.Fields(line)
			column = len(types) - 1
			for i, t := range types {
				if strings.HasSuffix(t, "[dflt]") {
					column = i
				}
			}
			section = "samples"
		case "samples":
			values, ids, ok := strings.Cut(line, ":")
			fields := strings.Fields(values)
			if !ok || len(fields) <= column || strings.HasPrefix(strings.TrimSpace(line), "bytes:") || !isNumber(fields[0]) {
				continue // a label line
			}
			v, err := strconv.ParseInt(fields[column], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("sample %q: %w", line, err)
			}
			s := rawSample{value: v}
			for _, id := range strings.Fields(ids) {
				n, err := strconv.Atoi(id)
				if err != nil {
					return nil, fmt.Errorf("sample %q: %w", line, err)
				}
				s.locations = append(s.locations, n)
			}
			samples = append(samples, s)
		case "locations":
			if m := locationLine.FindStringSubmatch(line); m != nil {
				loc, _ = strconv.Atoi(m[1])
				frames[loc] = append(frames[loc], m[2])
			} else if m := inlinedLine.FindStringSubmatch(line); m != nil && loc >= 0 {
				frames[loc] = append(frames[loc], m[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if column < 0 {
		return nil, fmt.Errorf("no samples section")
	}
	sums := map[string]int64{}
	for _, s := range samples {
		sums[group(s.locations, frames)] += s.value
	}
	return sums, nil
}

type rawSample struct {
	value     int64
	locations []int
}

var (
	// locationLine: "     12: 0x4a6f08 M=1 pkg.Func /path/file.go:581:0 s=579"
	// (a function's name may hold spaces: generic shapes).
	locationLine = regexp.MustCompile(`^\s*(\d+): 0x[0-9a-f]+ M=\d+ (.+) \S+ s=\d+$`)
	// inlinedLine: a function inlined at the location above.
	inlinedLine = regexp.MustCompile(`^\s+(.+) \S+ s=\d+$`)
)

func isNumber(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// group returns the group of a sample's stack.
func group(locations []int, frames map[int][]string) string {
	for _, g := range groups {
		for _, l := range locations {
			for _, f := range frames[l] {
				if g.pattern.MatchString(f) {
					return g.name
				}
			}
		}
	}
	return other
}
