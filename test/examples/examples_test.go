package examples

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	// The -update flag of the repository's golden files.
	_ "github.com/celsched/celsched/test/golden"
	"github.com/celsched/celsched/test/testenv"
)

// docSpec is a doc whose examples TestExamples runs, each doc on a fresh
// make run cluster.
type docSpec struct {
	// path is the doc's, from the repository's root.
	path string
	// dir is where its commands run, under the workspace (the
	// repository's root); fixtures, a directory of testdata, is copied
	// there first, and setup run there.
	dir, fixtures string
	setup         []string
	// exits are the exit codes of commands that the doc cannot mark with
	// a directive (the help examples, generated from the CLI's code).
	exits map[string]int
}

// docs are the docs TestExamples runs, in this order.
func docs(t *testing.T, root string) []docSpec {
	out := []docSpec{
		{path: "README.md"},
		{path: "docs/getting-started.md"},
		{path: "docs/cli.md"},
		{path: "docs/testing-policies.md"},
		{path: "docs/gitops-ci.md"},
		{path: "docs/policy-reference.md"},
		{path: "docs/security.md"},
		{
			// The CLI's --help examples name files a user has: the
			// test's are in testdata/help, and cluster.yaml is a dump of
			// the cluster as docs/cli.md (impact) says to take one.
			path: "cmd/celsched/app/testdata/help-examples.md", dir: "help", fixtures: "testdata/help",
			setup: []string{"kubectl get nodes,namespaces,pods,schedulingpolicies,tenantplacements -A -o yaml > cluster.yaml"},
			exits: map[string]int{
				// team-c has no TenantPlacement: a params-mismatch.
				"celsched analyze --dump cluster.yaml --fail-on no-feasible-node,params-mismatch": 1,
			},
		},
	}
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "*", "README.md"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no config/samples/*/README.md (%v)", err)
	}
	for _, s := range samples {
		rel, _ := filepath.Rel(root, s)
		out = append(out, docSpec{path: filepath.ToSlash(rel)})
	}
	return out
}

// TestExamples runs the examples of the README, the docs that docs lists,
// the CLI's --help (cmd/celsched/app/testdata/help-examples.md) and the
// samples' READMEs (docs/development.md, "Examples in the docs"), each doc
// against a fresh cluster of make run's program, with the CLI and kubectl
// built from the module first on PATH, and checks what they print: the
// output the doc shows, or a golden file of testdata/golden (`go test
// ./test/examples -args -update` rewrites them). The counts the README
// and getting-started state about make run's cluster must be the ones
// make run prints.
func TestExamples(t *testing.T) {
	assets, kwok := os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("KWOK")
	if assets == "" || kwok == "" {
		t.Fatal("KUBEBUILDER_ASSETS and KWOK are not set: run through make test, which builds them into bin/")
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl beside kube-apiserver (%v): hack/envtest-assets.sh builds it", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ws := workspace(t, root, kubectl)
	local := filepath.Join(t.TempDir(), "celsched-local")
	if out, err := exec.Command("go", "build", "-o", local, "github.com/celsched/celsched/hack/local").CombinedOutput(); err != nil {
		t.Fatalf("building hack/local: %v\n%s", err, out)
	}
	home := t.TempDir() // kubectl's cache
	for _, spec := range docs(t, root) {
		t.Run(spec.path, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(root, spec.path))
			if err != nil {
				t.Fatal(err)
			}
			doc, err := Extract(spec.path, text)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(ws, spec.dir)
			if spec.fixtures != "" {
				if err := os.CopyFS(dir, os.DirFS(spec.fixtures)); err != nil {
					t.Fatal(err)
				}
			}
			c := startCluster(t, local, ws, assets, kwok)
			// A command that appends to $GITHUB_STEP_SUMMARY, as in CI:
			// what it wrote goes into its golden file.
			stepSummary := filepath.Join(t.TempDir(), "step-summary.md")
			shell := Shell{Dir: dir, Env: append(environ(), "PATH="+filepath.Join(ws, "bin")+":"+os.Getenv("PATH"),
				"HOME="+home, "KUBECONFIG="+c.kubeconfig, "GITHUB_STEP_SUMMARY="+stepSummary)}
			shell = c.wrap(shell)
			if checked, errs := CheckCounts(spec.path, text, c.facts); len(errs) > 0 {
				for _, err := range errs {
					t.Error(err)
				}
			} else if checked > 0 {
				t.Logf("%d counts of make run's cluster as make run prints them", checked)
			}
			for _, cmd := range spec.setup {
				if out, code := shell.Run(Example{Command: cmd}); code != 0 {
					t.Fatalf("setup %q: exit code %d\n%s", cmd, code, out)
				}
			}
			goldenDir := filepath.Join("testdata", "golden", strings.ReplaceAll(spec.path, "/", "_"))
			if updating() {
				if err := os.MkdirAll(goldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			used := map[string]bool{}
			n := 0
			for _, ex := range doc.Examples {
				if code, ok := spec.exits[ex.Command]; ok {
					ex.Exit = code
				}
				switch ex.Kind {
				case MakeRunOutput:
					if !Match(ex.Want, c.table) {
						t.Errorf("%s:%d: make run's output differs from the doc's (normalized):\n--- doc\n%s\n--- make run\n%s",
							ex.Doc, ex.Line, strings.Join(normalizeAll(ex.Want), "\n"), strings.Join(normalizeAll(c.table), "\n"))
					}
				case Policy, Command:
					out, code := shell.Run(ex)
					if err := Check(ex, out, code); err != nil {
						t.Error(err)
					}
					if ex.Kind == Command && !ex.Shown {
						n++
						name := fmt.Sprintf("%02d-%s.golden", n, slug(ex.Command))
						used[name] = true
						if summary, err := os.ReadFile(stepSummary); err == nil {
							out += "--- $GITHUB_STEP_SUMMARY\n" + string(summary)
							_ = os.Remove(stepSummary)
						}
						compareGolden(t, ex, filepath.Join(goldenDir, name), out, code)
					}
				}
			}
			staleGoldens(t, goldenDir, used)
			t.Logf("%d examples run (%d against goldens), %d illustrative", len(doc.Examples), n, len(doc.Illustrative))
		})
	}
}

// environ is the test's environment without what the examples get from
// the test (PATH, HOME, KUBECONFIG).
func environ() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, k := range []string{"PATH=", "HOME=", "KUBECONFIG=", "GITHUB_STEP_SUMMARY="} {
			if strings.HasPrefix(kv, k) {
				return true
			}
		}
		return false
	})
}

// workspace is where the examples run: a directory holding the
// repository's files and directories (links to them), and a bin/ of its
// own with what `make build` puts there (celsched, kubectl-celsched) and
// kubectl, so that `bin/celsched` and `bin/local/kubeconfig` in a doc are
// the test's, never the checkout's.
func workspace(t *testing.T, root, kubectl string) string {
	ws := filepath.Join(t.TempDir(), "celsched")
	bin := filepath.Join(ws, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(ws, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testenv.BuildCLI(bin); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"kubectl-celsched": "celsched", "kubectl": kubectl} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// cluster is a running make run program.
type cluster struct {
	kubeconfig string
	// netns is the process whose network namespace the cluster listens
	// in; 0 for the host's.
	netns int
	facts Facts
	// table is the placements table make run printed.
	table []string
}

// wrap runs the shell's commands in the cluster's network namespace.
func (c *cluster) wrap(s Shell) Shell {
	if c.netns != 0 {
		s.Prefix = []string{"nsenter", "-t", strconv.Itoa(c.netns), "-n", "--"}
	}
	return s
}

// startCluster starts make run's program in the workspace (its
// kubeconfig in bin/local, as make run's), waits until it has printed its
// placements, and stops it (one SIGINT, as Ctrl-C) when the test ends. It
// runs in a network namespace with only loopback where the kernel allows
// one (as TestMakeRunStopsCleanly does): make run binds the manager's
// metrics and health ports, which a developer's own make run may hold.
func startCluster(t *testing.T, local, ws, assets, kwok string) *cluster {
	t.Helper()
	dir := filepath.Join(ws, "bin", "local")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	args := []string{local, "-dir", dir}
	netns := exec.Command("unshare", "-n", "true").Run() == nil && exec.Command("nsenter", "--version").Run() == nil
	if netns {
		args = append([]string{"unshare", "-n", "sh", "-c", `ip link set lo up && exec "$0" "$@"`}, args...)
	} else {
		t.Log("no network namespace: make run's program runs with the host's network")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ws
	cmd.Env = append(environ(), "PATH="+os.Getenv("PATH"), "KUBEBUILDER_ASSETS="+assets, "KWOK="+kwok)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out strings.Builder
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		scanner := bufio.NewScanner(stdout)
		once := sync.Once{}
		for scanner.Scan() {
			mu.Lock()
			out.WriteString(scanner.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(scanner.Text(), "New placements are printed below.") {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("make run's program did not stop within a minute of SIGINT")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-done:
		t.Fatalf("make run's program exited before it was ready:\n%s\n%s", out.String(), stderr.String())
	case <-time.After(4 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("make run's program was not ready within 4 minutes:\n%s\n%s", out.String(), stderr.String())
	}
	t.Logf("make run's cluster ready in %s", time.Since(start).Round(100*time.Millisecond))
	mu.Lock()
	printed := out.String()
	mu.Unlock()
	c := &cluster{kubeconfig: filepath.Join(dir, "kubeconfig"), table: placements(printed)}
	if netns {
		c.netns = cmd.Process.Pid
	}
	if c.facts, err = ParseMakeRun(printed); err != nil {
		t.Fatal(err)
	}
	return c
}

// placements are the lines of make run's table, from its header to the
// blank line after it.
func placements(out string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "POD ") {
			end := i
			for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
				end++
			}
			return lines[i:end]
		}
	}
	return nil
}

// compareGolden compares a command's output with its golden file, which
// holds the command, its masked output and its exit code when it is not 0;
// lines are compared normalized. -update rewrites the file.
func compareGolden(t *testing.T, ex Example, path, out string, code int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("$ " + ex.Command + "\n")
	for _, l := range Lines(out) {
		b.WriteString(Mask(l) + "\n")
	}
	if code != 0 {
		fmt.Fprintf(&b, "(exit code %d)\n", code)
	}
	got := b.String()
	if updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s:%d: %s: %v (go test ./test/examples -args -update writes it)", ex.Doc, ex.Line, ex.Command, err)
		return
	}
	if diff := cmp.Diff(normalizeAll(Lines(string(want))), normalizeAll(Lines(got))); diff != "" {
		t.Errorf("%s:%d: %s\noutput differs from %s (normalized, -want +got):\n%s", ex.Doc, ex.Line, ex.Command, path, diff)
	}
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// slug names a golden file after its command.
func slug(cmd string) string {
	s := strings.Trim(nonWord.ReplaceAllString(strings.ToLower(cmd), "-"), "-")
	if len(s) > 48 {
		s = strings.TrimRight(s[:48], "-")
	}
	return s
}

// staleGoldens fails on golden files of a doc that no example wrote
// (under -update, removes them).
func staleGoldens(t *testing.T, dir string, used map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if used[e.Name()] {
			continue
		}
		if updating() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: no example of the doc writes it (go test -update removes it)", filepath.Join(dir, e.Name()))
	}
}

// updating says whether the test runs with -update (test/golden's flag).
func updating() bool {
	return flag.Lookup("update").Value.(flag.Getter).Get().(bool)
}
