// Package examples finds the examples in the docs (the commands of their
// shell blocks and transcripts, the SchedulingPolicies of their YAML
// blocks), runs them, and compares what they print with what the doc
// shows, or with a golden file where the doc shows nothing. The convention
// that says which blocks run is in docs/development.md, "Examples in the
// docs"; TestExamples runs the docs against make run's cluster.
package examples

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kind is what an example is.
type Kind int

const (
	// Command is a shell command; its output is the doc's (Shown) or a
	// golden file's.
	Command Kind = iota
	// Policy is a YAML block of a SchedulingPolicy: `celsched validate -f -`
	// must accept it.
	Policy
	// MakeRunOutput is a block that shows what `make run` prints: the test
	// compares it with what make run's program printed.
	MakeRunOutput
)

// Example is one example of a doc.
type Example struct {
	Kind Kind
	// Doc and Line say where it is: the line of the command (or of the
	// block's first line).
	Doc  string
	Line int
	// Command is the shell text, continuation lines included; Stdin is
	// fed to it (a Policy's YAML).
	Command, Stdin string
	// Prelude are the `cd` and `export` commands before it in its block,
	// run before it in the same shell.
	Prelude []string
	// Shown says whether the doc shows the output (Want, after the
	// command in a transcript, nothing when no line follows it; or a
	// MakeRunOutput block).
	Shown bool
	Want  []string
	// Exit is the exit code the doc expects: 0, or what an `echo $?`
	// after it or an `exit N` directive says.
	Exit int
}

// Illustrative is a block that does not run, and why.
type Illustrative struct {
	Doc    string
	Line   int
	Reason string
}

// Doc is what Extract found in a doc.
type Doc struct {
	Examples     []Example
	Illustrative []Illustrative
}

// directive is what an HTML comment `<!-- example: ... -->` right before a
// block says about it.
type directive struct {
	illustrative string // the reason; non-empty when the block does not run
	exit         int
	makeRun      bool
}

var (
	fenceRE     = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")
	directiveRE = regexp.MustCompile(`^\s*<!--\s*example:\s*(.*?)\s*-->\s*$`)
)

// shellInfo are the info strings of blocks whose every line is a command.
var shellInfo = map[string]bool{"sh": true, "shell": true, "bash": true, "console": true}

// Extract finds the examples of a Markdown doc: see docs/development.md,
// "Examples in the docs". An error is a doc that breaks the convention (a
// directive without a reason, or one that is not understood, a shell
// block that never ends).
func Extract(doc string, text []byte) (Doc, error) {
	var out Doc
	var errs []error
	lines := strings.Split(string(text), "\n")
	lastNonBlank := -1
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.TrimSpace(lines[i]) != "" {
				lastNonBlank = i
			}
			continue
		}
		indent, fence, info := len(m[1]), m[2], strings.ToLower(m[3])
		start := i
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimSpace(l); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				closed = true
				break
			}
			if len(l)-len(strings.TrimLeft(l, " ")) >= indent {
				l = l[indent:]
			} else {
				l = strings.TrimLeft(l, " ")
			}
			body = append(body, l)
		}
		if !closed {
			errs = append(errs, fmt.Errorf("%s:%d: a code block that does not end", doc, start+1))
			break
		}
		var d directive
		if lastNonBlank >= 0 && directiveRE.MatchString(lines[lastNonBlank]) {
			var err error
			if d, err = parseDirective(directiveRE.FindStringSubmatch(lines[lastNonBlank])[1]); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", doc, lastNonBlank+1, err))
				continue
			}
		}
		lastNonBlank = i
		first := start + 2 // the line of body[0]
		switch {
		case d.illustrative != "":
			out.Illustrative = append(out.Illustrative, Illustrative{Doc: doc, Line: start + 1, Reason: d.illustrative})
		case d.makeRun:
			out.Examples = append(out.Examples, Example{Kind: MakeRunOutput, Doc: doc, Line: first, Shown: true, Want: body})
		case hasPrompt(body):
			exs, err := transcript(doc, first, body, d.exit)
			if err != nil {
				errs = append(errs, err)
			}
			out.Examples = append(out.Examples, exs...)
		case shellInfo[info]:
			out.Examples = append(out.Examples, script(doc, first, body, d.exit)...)
		case info == "yaml" && isPolicy(body):
			out.Examples = append(out.Examples, Example{Kind: Policy, Doc: doc, Line: first,
				Command: "celsched validate -f -", Stdin: strings.Join(body, "\n") + "\n", Exit: d.exit})
		}
	}
	return out, errors.Join(errs...)
}

func parseDirective(text string) (directive, error) {
	var d directive
	switch {
	case strings.HasPrefix(text, "illustrative"):
		reason := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(text, "illustrative"), ":"))
		if reason == "" {
			return d, errors.New(`example: illustrative needs a reason ("<!-- example: illustrative: why it does not run -->")`)
		}
		d.illustrative = reason
	case strings.HasPrefix(text, "exit "):
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(text, "exit ")))
		if err != nil || n <= 0 {
			return d, fmt.Errorf("example: %q: want exit N, N > 0", text)
		}
		d.exit = n
	case text == "make run output":
		d.makeRun = true
	default:
		return d, fmt.Errorf("example: %q is not a directive (illustrative: REASON, exit N, make run output)", text)
	}
	return d, nil
}

func hasPrompt(body []string) bool {
	for _, l := range body {
		if strings.HasPrefix(l, "$ ") {
			return true
		}
	}
	return false
}

func isPolicy(body []string) bool {
	for _, l := range body {
		if strings.TrimSpace(l) == "kind: SchedulingPolicy" {
			return true
		}
	}
	return false
}

// command joins a command's continuation lines (a line ending in `\`)
// from body[i]; it returns the command and the index after it.
func command(body []string, i int) (string, int) {
	cmd := body[i]
	for strings.HasSuffix(strings.TrimRight(cmd, " "), `\`) && i+1 < len(body) {
		i++
		cmd += "\n" + body[i]
	}
	return cmd, i + 1
}

// isPrelude says whether a command sets the shell's state for the
// commands after it in its block.
func isPrelude(cmd string) bool {
	return strings.HasPrefix(cmd, "cd ") || strings.HasPrefix(cmd, "export ")
}

// script reads a shell block: each command is an example with no output
// shown.
func script(doc string, first int, body []string, exit int) []Example {
	var out []Example
	var prelude []string
	for i := 0; i < len(body); {
		line := strings.TrimSpace(body[i])
		if line == "" || strings.HasPrefix(line, "#") {
			i++
			continue
		}
		at := i
		cmd, next := command(body, i)
		i = next
		if isPrelude(cmd) {
			prelude = append(prelude, cmd)
			continue
		}
		out = append(out, Example{Kind: Command, Doc: doc, Line: first + at, Command: cmd, Prelude: clone(prelude), Exit: exit})
	}
	return out
}

// transcript reads a block of `$ command` lines, each followed by its
// output. `$ echo $?` is not run: its output is the exit code the
// command before it must give.
func transcript(doc string, first int, body []string, exit int) ([]Example, error) {
	var out []Example
	var prelude []string
	i := 0
	for i < len(body) && !strings.HasPrefix(body[i], "$ ") {
		if strings.TrimSpace(body[i]) != "" {
			return nil, fmt.Errorf("%s:%d: a transcript's first line must be a `$ ` command", doc, first+i)
		}
		i++
	}
	for i < len(body) {
		at := i
		body[i] = strings.TrimPrefix(body[i], "$ ")
		cmd, next := command(body, i)
		i = next
		var shown []string
		for i < len(body) && !strings.HasPrefix(body[i], "$ ") {
			shown = append(shown, body[i])
			i++
		}
		for len(shown) > 0 && strings.TrimSpace(shown[len(shown)-1]) == "" {
			shown = shown[:len(shown)-1]
		}
		switch {
		case cmd == "echo $?":
			if len(out) == 0 || len(shown) != 1 {
				return out, fmt.Errorf("%s:%d: `echo $?` must follow a command and show its exit code", doc, first+at)
			}
			code, err := strconv.Atoi(shown[0])
			if err != nil {
				return out, fmt.Errorf("%s:%d: `echo $?` shows %q, not an exit code", doc, first+at, shown[0])
			}
			out[len(out)-1].Exit = code
		case isPrelude(cmd):
			if len(shown) > 0 {
				return out, fmt.Errorf("%s:%d: %q shows output", doc, first+at, cmd)
			}
			prelude = append(prelude, cmd)
		default:
			out = append(out, Example{Kind: Command, Doc: doc, Line: first + at, Command: cmd, Prelude: clone(prelude),
				Shown: true, Want: shown, Exit: exit})
		}
	}
	return out, nil
}

func clone(s []string) []string { return append([]string(nil), s...) }

// Shell is where examples run: the directory of the doc's commands and
// their environment (PATH with the CLI and kubectl first, KUBECONFIG).
type Shell struct {
	Dir string
	Env []string
	// Prefix runs bash through another command (nsenter, to reach a
	// cluster in a network namespace).
	Prefix  []string
	Timeout time.Duration
}

// Run runs an example's command (after its prelude) in bash, and returns
// its output (stdout and stderr, in order) and exit code.
func (s Shell) Run(ex Example) (string, int) {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	script := strings.Join(append(clone(ex.Prelude), ex.Command), "\n")
	args := append(clone(s.Prefix), "bash", "-o", "pipefail", "-c", script)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = s.Dir, s.Env
	cmd.Stdin = strings.NewReader(ex.Stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		if ctx.Err() != nil {
			fmt.Fprintf(&out, "\n(killed after %s)\n", timeout)
		}
		return out.String(), exit.ExitCode()
	default:
		return out.String() + err.Error(), -1
	}
}

// Check says what is wrong with an example's run: an exit code other
// than the doc's, or (when the doc shows output) output that differs from
// it after Normalize. nil when it is as the doc says.
func Check(ex Example, got string, code int) error {
	if code != ex.Exit {
		return fmt.Errorf("%s:%d: %s\nexit code %d, want %d; output:\n%s", ex.Doc, ex.Line, ex.Command, code, ex.Exit, got)
	}
	if !ex.Shown {
		return nil
	}
	if !Match(ex.Want, Lines(got)) {
		return fmt.Errorf("%s:%d: %s\noutput differs from the doc's (normalized; a line `...` stands for any lines, `...` in a line for any text):\n--- doc\n%s\n--- got\n%s",
			ex.Doc, ex.Line, ex.Command, strings.Join(normalizeAll(ex.Want), "\n"), strings.Join(normalizeAll(Lines(got)), "\n"))
	}
	return nil
}

// Lines splits output into lines without the trailing empty ones.
func Lines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

// volatile are what changes from run to run, and what stands for it.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uid>"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?( [A-Z]{3,4})?`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`), "<time>"},
	{regexp.MustCompile(`(resourceVersion|generation|observedGeneration)("?:\s*)"?\d+"?`), "$1$2<n>"},
	// Ages and durations: 37s, 5m3s, 1.5s, 120ms, 2d.
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h|d)(\d+(\.\d+)?(ms|s|m|h))*\b`), "<duration>"},
}

// columns are runs of spaces that align a table's columns: they widen
// with the values above (an age, a name).
var columns = regexp.MustCompile(`(\S)  +`)

// Mask replaces what changes from run to run: UIDs, timestamps, ages and
// durations, resourceVersions and generations. Golden files hold masked
// output.
func Mask(line string) string {
	line = strings.TrimRight(line, " \t")
	for _, v := range volatile {
		line = v.re.ReplaceAllString(line, v.with)
	}
	return line
}

// Normalize masks a line and narrows the runs of spaces between columns
// to two: lines are compared normalized.
func Normalize(line string) string {
	return columns.ReplaceAllString(Mask(line), "$1  ")
}

func normalizeAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = Normalize(l)
	}
	return out
}

// Match says whether got is what want shows, both normalized: a want line
// `...` stands for any number of lines, and `...` within a line for any
// text.
func Match(want, got []string) bool {
	want, got = normalizeAll(want), normalizeAll(got)
	memo := map[[2]int]bool{}
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(want) {
			return j == len(got)
		}
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var ok bool
		if strings.TrimSpace(want[i]) == "..." {
			ok = match(i+1, j) || j < len(got) && match(i, j+1)
		} else {
			ok = j < len(got) && lineMatches(want[i], got[j]) && match(i+1, j+1)
		}
		memo[key] = ok
		return ok
	}
	return match(0, 0)
}

// lineMatches matches a line in which `...` stands for any text.
func lineMatches(want, got string) bool {
	if !strings.Contains(want, "...") {
		return want == got
	}
	parts := strings.Split(want, "...")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}
