// Package localrun tests `make run`'s program (hack/local) as a newcomer
// meets it: on a host without a default route, and stopped with one
// Ctrl-C.
package localrun

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMakeRunStopsCleanly starts `make run`'s program in a network
// namespace with only loopback (no default route: the local control
// plane must bind and advertise 127.0.0.1), waits until it has applied the
// samples and created its pods, sends one SIGINT, and checks that it
// prints one line after it ("Stopping the control plane."), exits 0, and
// leaves none of its children (kube-apiserver, etcd, KWOK) running.
func TestMakeRunStopsCleanly(t *testing.T) {
	assets, kwok := os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("KWOK")
	if assets == "" || kwok == "" {
		t.Fatal("KUBEBUILDER_ASSETS and KWOK are not set: run through make test, which builds them into bin/")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "celsched-local")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/celsched/celsched/hack/local").CombinedOutput(); err != nil {
		t.Fatalf("building hack/local: %v\n%s", err, out)
	}
	args := []string{bin, "-dir", filepath.Join(dir, "local")}
	// Only loopback, and up: unshare -n gives a network namespace with lo
	// down and no route. Where the kernel does not allow one, the test
	// runs on the host's network (and says so).
	if err := exec.Command("unshare", "-n", "true").Run(); err == nil {
		args = append([]string{"unshare", "-n", "sh", "-c", `ip link set lo up && exec "$0" "$@"`}, args...)
	} else {
		t.Logf("no network namespace (unshare -n: %v): running with the host's network", err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets, "KWOK="+kwok)
	// Its own process group, as a shell gives a foreground job: the
	// SIGINT goes to it alone, as Ctrl-C to make run's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()

	var mu sync.Mutex
	var lines []string
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		scanner := bufio.NewScanner(stdout)
		once := sync.Once{}
		for scanner.Scan() {
			mu.Lock()
			lines = append(lines, scanner.Text())
			mu.Unlock()
			if strings.HasPrefix(scanner.Text(), "Created ") && strings.Contains(scanner.Text(), "pods with schedulerName celsched") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-done:
		t.Fatalf("make run's program exited before it was ready:\n%s\n%s", strings.Join(lines, "\n"), stderr.String())
	case <-time.After(4 * time.Minute):
		t.Fatalf("make run's program was not ready within 4 minutes:\n%s\n%s", strings.Join(lines, "\n"), stderr.String())
	}
	time.Sleep(2 * time.Second) // the pods are scheduled and the watch prints them
	children := descendants(cmd.Process.Pid)
	names := map[int]string{}
	for _, pid := range children {
		names[pid] = comm(pid)
	}
	if len(children) < 3 {
		t.Errorf("%d processes under make run's program, want at least kube-apiserver, etcd and KWOK: %v", len(children), children)
	}
	mu.Lock()
	before := len(lines)
	mu.Unlock()

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { <-done; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("make run's program exited with %v after SIGINT; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("make run's program did not stop within a minute of SIGINT")
	}
	mu.Lock()
	after := lines[before:]
	mu.Unlock()
	if len(after) != 1 || after[0] != "Stopping the control plane." {
		t.Errorf("after SIGINT, output %q, want the one line %q", after, "Stopping the control plane.")
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr is not empty:\n%s", stderr.String())
	}
	for _, pid := range children {
		// The same pid and command: not a new process given the pid.
		if alive(pid) && comm(pid) == names[pid] {
			t.Errorf("process %d (%s) survived make run's program", pid, names[pid])
		}
	}
}

// procDir is Linux's process table.
const procDir = "/proc"

// descendants are the processes under pid, found in /proc.
func descendants(pid int) []int {
	parents := map[int][]int{}
	entries, _ := os.ReadDir(procDir)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parent(child); ppid > 0 {
			parents[ppid] = append(parents[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range parents[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parent is a process's parent pid, from /proc/<pid>/stat; 0 if gone.
func parent(pid int) int {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// alive says whether the process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func comm(pid int) string {
	data, _ := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(data))
}
