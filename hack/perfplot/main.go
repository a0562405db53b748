// Command perfplot draws the ratios of every full `make perf` run in
// docs/perf-history/runs.csv as an SVG, one panel per workload: the
// celsched profile against the native rules where the workload has them,
// against plain stock pods otherwise (docs/performance.md, "History").
//
//	go run ./hack/perfplot -in docs/perf-history/runs.csv -out docs/perf-history/ratios.svg
//
// `make perf-plot` runs it. The output depends on the CSV alone: the same
// file gives the same bytes.
package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "docs/perf-history/runs.csv", "the runs, as docs/performance.md describes them")
	out := flag.String("out", "docs/perf-history/ratios.svg", "the SVG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "perfplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := readRows(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	svg, err := render(rows)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, svg, 0o644)
}

// point is one workload's headline ratio in one run, at one size and
// batching mode: the median over the run's phases and its spread.
type point struct {
	run      int // index into the runs, oldest first
	nodes    int
	batching bool
	ratio    float64
	min, max float64 // 0 when the source gives no spread
}

// runKey says which run a row belongs to: one `make perf` at one commit.
type runKey struct {
	date, time, commit string
	nodes              int
	runs               string // "1": the early runs, one phase per profile
}

// data is what the plot shows, read from the CSV.
type data struct {
	runs      []runKey
	workloads []string           // in panel order
	native    map[string]bool    // whether a workload's panel shows vs native
	points    map[string][]point // by workload
}

// readRows reads the CSV into maps keyed by its header's column names.
func readRows(r io.Reader) ([]map[string]string, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the header: %w", err)
	}
	var rows []map[string]string
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		row := make(map[string]string, len(header))
		for i, name := range header {
			row[name] = rec[i]
		}
		rows = append(rows, row)
	}
}

// panelOrder puts the workloads without a native phase first, then those
// with one, each in the order docs/performance.md lists them; a workload
// it does not know goes last, by name.
var panelOrder = []string{
	"NoPolicy", "NonMatching10", "NodeOnly10", "NodeOnly10Batchable", "Mixed100",
	"NodeOnly10Native", "NodeOnly10Plugin", "Mixed100Native", "RequiredAffinity",
	"PreferredAffinity", "PodAndNode", "Spread", "Gangs",
}

// collect keeps the full scheduler_perf runs and each row's headline ratio:
// vs native where the workload has a native phase, vs stock otherwise. A
// workload whose full-run rows do not all have the one or all the other
// is an error: its panel would mix two references.
func collect(rows []map[string]string) (*data, error) {
	d := &data{native: map[string]bool{}, points: map[string][]point{}}
	runIndex := map[runKey]int{}
	withNative := map[string]int{}
	for i, row := range rows {
		if row["harness"] != "scheduler_perf" || row["scope"] != "full" {
			continue
		}
		line := i + 2 // the header is line 1
		nodes, err := strconv.Atoi(row["nodes"])
		if err != nil {
			return nil, fmt.Errorf("line %d: nodes: %w", line, err)
		}
		key := runKey{date: row["date"], time: row["time_utc"], commit: row["commit"], nodes: nodes, runs: row["runs"]}
		idx, ok := runIndex[key]
		if !ok {
			idx = len(d.runs)
			runIndex[key] = idx
			d.runs = append(d.runs, key)
		}
		wl := row["workload"]
		ref := "celsched_vs_stock"
		if row["celsched_vs_native"] != "" {
			ref = "celsched_vs_native"
			withNative[wl]++
		}
		p := point{run: idx, nodes: nodes, batching: row["batching"] == "on"}
		for _, f := range []struct {
			col string
			dst *float64
		}{{ref, &p.ratio}, {ref + "_min", &p.min}, {ref + "_max", &p.max}} {
			if row[f.col] == "" {
				continue
			}
			if *f.dst, err = strconv.ParseFloat(row[f.col], 64); err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", line, f.col, err)
			}
		}
		if p.ratio == 0 {
			return nil, fmt.Errorf("line %d: %s has no ratio", line, wl)
		}
		d.points[wl] = append(d.points[wl], p)
	}
	for wl, ps := range d.points {
		switch withNative[wl] {
		case 0:
		case len(ps):
			d.native[wl] = true
		default:
			return nil, fmt.Errorf("workload %s: %d of its %d full-run rows have a ratio to the native rules, the others to stock", wl, withNative[wl], len(ps))
		}
	}
	known := map[string]bool{}
	for _, wl := range panelOrder {
		known[wl] = true
		if len(d.points[wl]) > 0 {
			d.workloads = append(d.workloads, wl)
		}
	}
	var other []string
	for wl := range d.points {
		if !known[wl] {
			other = append(other, wl)
		}
	}
	sort.Strings(other)
	d.workloads = append(d.workloads, other...)
	return d, nil
}

// Layout, in SVG user units.
const (
	cols        = 3
	panelW      = 400.0
	panelH      = 190.0
	gapX        = 70.0
	gapY        = 58.0
	marginLeft  = 60.0
	marginTop   = 92.0
	legendLineH = 15.0
)

// The series: node count by colour, batching by line and marker.
var nodeColour = map[int]string{1000: "#1f77b4", 5000: "#d95f02"}

func colour(nodes int) string {
	if c, ok := nodeColour[nodes]; ok {
		return c
	}
	return "#555555"
}

func render(rows []map[string]string) ([]byte, error) {
	d, err := collect(rows)
	if err != nil {
		return nil, err
	}
	if len(d.runs) == 0 {
		return nil, errors.New("no full scheduler_perf run")
	}
	panelRows := (len(d.workloads) + cols - 1) / cols
	width := marginLeft + cols*panelW + (cols-1)*gapX + 30
	legendTop := marginTop + float64(panelRows)*(panelH+gapY) + 10
	height := legendTop + float64(len(d.runs)+1)*legendLineH + 20

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="11">`+"\n",
		num(width), num(height), num(width), num(height))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%s" y="24" font-size="16" font-weight="bold">celsched in make perf: the median ratio per workload and full run</text>`+"\n", num(marginLeft))
	fmt.Fprintf(&b, `<text x="%s" y="42">Above 1 the celsched profile schedules faster than the reference. Whiskers: the spread (min-max) over a run's three phases. Grey: runs of one phase per profile (no spread).</text>`+"\n", num(marginLeft))
	drawKey(&b, marginLeft, 62)

	for i, wl := range d.workloads {
		x0 := marginLeft + float64(i%cols)*(panelW+gapX)
		y0 := marginTop + float64(i/cols)*(panelH+gapY)
		drawPanel(&b, d, wl, x0, y0)
	}

	fmt.Fprintf(&b, `<text x="%s" y="%s" font-weight="bold">Runs (x axis), oldest first: date, commit, nodes</text>`+"\n", num(marginLeft), num(legendTop))
	for i, r := range d.runs {
		label := fmt.Sprintf("%d  %s %s  %s  %d nodes", i+1, r.date, r.time, r.commit, r.nodes)
		if r.runs == "1" {
			label += "  (one phase per profile)"
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`+"\n", num(marginLeft), num(legendTop+float64(i+1)*legendLineH), html.EscapeString(strings.Join(strings.Fields(label), " ")))
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

func drawKey(b *bytes.Buffer, x, y float64) {
	items := []struct {
		nodes    int
		batching bool
		label    string
	}{
		{1000, true, "1000 nodes, batching on"},
		{1000, false, "1000 nodes, batching off"},
		{5000, true, "5000 nodes, batching on"},
		{5000, false, "5000 nodes, batching off"},
	}
	for i, it := range items {
		xi := x + float64(i)*210
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5"%s/>`+"\n",
			num(xi), num(y), num(xi+28), num(y), colour(it.nodes), dash(it.batching))
		marker(b, xi+14, y, it.nodes, it.batching)
		fmt.Fprintf(b, `<text x="%s" y="%s">%s</text>`+"\n", num(xi+36), num(y+4), it.label)
	}
}

func dash(batching bool) string {
	if batching {
		return ""
	}
	return ` stroke-dasharray="4 3"`
}

func marker(b *bytes.Buffer, x, y float64, nodes int, batching bool) {
	fill := colour(nodes)
	if !batching {
		fill = "#ffffff"
	}
	fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s" stroke="%s" stroke-width="1.2"/>`+"\n", num(x), num(y), fill, colour(nodes))
}

func drawPanel(b *bytes.Buffer, d *data, wl string, x0, y0 float64) {
	ps := d.points[wl]
	lo, hi := 1.0, 1.0
	for _, p := range ps {
		for _, v := range []float64{p.ratio, p.min, p.max} {
			if v == 0 {
				continue
			}
			lo = min(lo, v)
			hi = max(hi, v)
		}
	}
	step := 0.25
	if hi-lo > 2 {
		step = 0.5
	}
	lo = floorTo(lo-0.05, step)
	hi = ceilTo(hi+0.05, step)
	n := len(d.runs)
	xOf := func(run int) float64 { return x0 + (float64(run)+0.5)*panelW/float64(n) }
	yOf := func(v float64) float64 { return y0 + panelH - (v-lo)/(hi-lo)*panelH }

	// Background: the early runs of one phase per profile, in grey.
	for i, r := range d.runs {
		if r.runs == "1" {
			fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="#eeeeee"/>`+"\n",
				num(x0+float64(i)*panelW/float64(n)), num(y0), num(panelW/float64(n)), num(panelH))
		}
	}
	// Grid and y labels.
	for v := lo; v <= hi+1e-9; v += step {
		y := yOf(v)
		stroke, w := "#dddddd", "1"
		if v > 1-1e-9 && v < 1+1e-9 {
			stroke, w = "#333333", "1.2"
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"/>`+"\n", num(x0), num(y), num(x0+panelW), num(y), stroke, w)
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(x0-5), num(y+4), strconv.FormatFloat(v, 'f', 2, 64))
	}
	// X ticks: the run numbers.
	for i := range d.runs {
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" font-size="9" fill="#555555">%d</text>`+"\n", num(xOf(i)), num(y0+panelH+12), i+1)
	}
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#999999"/>`+"\n", num(x0), num(y0), num(panelW), num(panelH))
	ref := "stock"
	if d.native[wl] {
		ref = "native"
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" font-size="13" font-weight="bold">%s</text>`+"\n", num(x0), num(y0-8), html.EscapeString(wl))
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" fill="#555555">celsched vs %s</text>`+"\n", num(x0+panelW), num(y0-8), ref)

	// The series, each in run order.
	for _, nodes := range []int{1000, 5000} {
		for _, batching := range []bool{true, false} {
			var s []point
			for _, p := range ps {
				if p.nodes == nodes && p.batching == batching {
					s = append(s, p)
				}
			}
			sort.SliceStable(s, func(i, j int) bool { return s[i].run < s[j].run })
			if len(s) == 0 {
				continue
			}
			var path strings.Builder
			for i, p := range s {
				cmd := "L"
				if i == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%s %s ", cmd, num(xOf(p.run)), num(yOf(p.ratio)))
			}
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.2"%s/>`+"\n", strings.TrimSpace(path.String()), colour(nodes), dash(batching))
			for _, p := range s {
				if p.min != 0 && p.max != 0 {
					fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="0.8" opacity="0.6"/>`+"\n",
						num(xOf(p.run)), num(yOf(p.min)), num(xOf(p.run)), num(yOf(p.max)), colour(nodes))
				}
				marker(b, xOf(p.run), yOf(p.ratio), nodes, batching)
			}
		}
	}
}

func floorTo(v, step float64) float64 {
	n := int(v / step)
	if float64(n)*step > v {
		n--
	}
	return float64(n) * step
}

func ceilTo(v, step float64) float64 {
	n := int(v / step)
	if float64(n)*step < v {
		n++
	}
	return float64(n) * step
}

// num formats a coordinate with one decimal, so that the output does not
// depend on floating-point noise beyond it.
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}
