package failover

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lines of the manager's log (klog) that the tests look for.
const (
	// client-go's leader election, once the Lease is this replica's.
	logAcquiredLease = "Successfully acquired lease"
	// kube-scheduler's, at -v=2, for every pod it binds.
	logBound = "Successfully bound pod to node"
	// controller-runtime's, when the leader could not renew in time.
	logLeaderElectionLost = "leader election lost"
)

// leaderElection configures a manager's election; the zero value runs
// without leader election.
type leaderElection struct {
	// id is the Lease, in leaseNamespace.
	id string
	// lease, renew and retry are the flags' durations.
	lease, renew, retry time.Duration
}

// fastElection elects in seconds: a killed leader is replaced about 4s
// after its last renewal.
func fastElection(id string) leaderElection {
	return leaderElection{id: id, lease: 4 * time.Second, renew: 3 * time.Second, retry: time.Second}
}

// managerProcess is a running manager binary.
type managerProcess struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	probes  string // host:port of /healthz and /readyz
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// startManager starts the manager binary against the test cluster, with
// its log in a file of the test's temporary directory. When the test
// fails, the end of the log is attached; a manager still running when the
// test ends is killed.
func startManager(t *testing.T, name string, le leaderElection) *managerProcess {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	m := &managerProcess{
		name:    name,
		logPath: filepath.Join(t.TempDir(), name+".log"),
		probes:  net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited:  make(chan struct{}),
	}
	args := []string{
		"--kubeconfig", kubeconfig,
		"--leader-elect=" + strconv.FormatBool(le.id != ""),
		"--leader-elect-namespace", leaseNamespace,
		"--webhook-port=0",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + m.probes,
		"-v=2",
	}
	if le.id != "" {
		args = append(args, "--leader-elect-id", le.id,
			"--leader-elect-lease-duration", le.lease.String(),
			"--leader-elect-renew-deadline", le.renew.String(),
			"--leader-elect-retry-period", le.retry.String())
	}
	logFile, err := os.Create(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(managerBinary, args...)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	if err := m.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting manager %s: %v", name, err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		logFile.Close()
		close(m.exited)
	}()
	t.Cleanup(func() {
		if m.running() {
			m.signal(t, syscall.SIGKILL)
			<-m.exited
		}
		if t.Failed() {
			t.Logf("manager %s (%s): end of its log:\n%s", name, m.exitStatus(), m.tail(40))
		}
	})
	t.Logf("started manager %s (pid %d): %s", name, m.cmd.Process.Pid, strings.Join(m.cmd.Args[1:], " "))
	return m
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (m *managerProcess) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

func (m *managerProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("sending %v to manager %s: %v", sig, m.name, err)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (m *managerProcess) stop(t *testing.T) {
	t.Helper()
	m.signal(t, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(waitTimeout):
		t.Fatalf("manager %s did not exit within %v of SIGTERM", m.name, waitTimeout)
	}
	if m.waitErr != nil {
		t.Errorf("manager %s exited after SIGTERM with %v, want exit status 0", m.name, m.waitErr)
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (m *managerProcess) kill(t *testing.T) {
	t.Helper()
	m.signal(t, syscall.SIGKILL)
	<-m.exited
	t.Logf("killed manager %s", m.name)
}

// waitExit waits up to timeout for the process to exit by itself.
func (m *managerProcess) waitExit(timeout time.Duration) bool {
	select {
	case <-m.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (m *managerProcess) exitStatus() string {
	if m.running() {
		return "running"
	}
	if m.waitErr == nil {
		return "exit status 0"
	}
	return m.waitErr.Error()
}

// log returns the log so far.
func (m *managerProcess) log(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// waitLog waits until the log has a line containing s.
func (m *managerProcess) waitLog(t *testing.T, s string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		if !m.running() {
			return false, fmt.Errorf("manager %s exited (%s)", m.name, m.exitStatus())
		}
		return bytes.Contains(m.log(t), []byte(s)), nil
	})
	if err != nil {
		t.Fatalf("manager %s did not log %q: %v", m.name, s, err)
	}
}

// waitLogCount waits until the log has n lines containing s.
func (m *managerProcess) waitLogCount(t *testing.T, s string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		if !m.running() {
			return false, fmt.Errorf("manager %s exited (%s)", m.name, m.exitStatus())
		}
		return m.countLog(t, s, 0) >= n, nil
	})
	if err != nil {
		t.Fatalf("manager %s did not log %q %d times: %v", m.name, s, n, err)
	}
}

// becameLeader is the event a replica logs when it becomes the leader,
// with its identity: the Lease's holderIdentity.
var becameLeader = regexp.MustCompile(`"(\S+) became leader"`)

// waitLeader waits until the manager logs that it acquired the Lease of le,
// and checks that the Lease names it as the holder.
func (m *managerProcess) waitLeader(t *testing.T, le leaderElection) {
	t.Helper()
	m.waitLog(t, logAcquiredLease)
	var identity string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		if match := becameLeader.FindSubmatch(m.log(t)); match != nil {
			identity = string(match[1])
		}
		return identity != "", nil
	})
	if err != nil {
		t.Fatalf("manager %s did not log %q: %v", m.name, "<identity> became leader", err)
	}
	lease := &coordinationv1.Lease{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: leaseNamespace, Name: le.id}, lease); err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != identity {
		t.Fatalf("manager %s (%s) acquired the Lease %s, but its holder is %q", m.name, identity, le.id, holder)
	}
}

// hasLogged tells whether the log has a line containing s.
func (m *managerProcess) hasLogged(t *testing.T, s string) bool {
	t.Helper()
	return bytes.Contains(m.log(t), []byte(s))
}

// countLog counts the lines containing s from byte offset on.
func (m *managerProcess) countLog(t *testing.T, s string, offset int) int {
	t.Helper()
	return bytes.Count(m.log(t)[offset:], []byte(s))
}

// waitReady waits until the manager's /readyz answers 200.
func (m *managerProcess) waitReady(t *testing.T) {
	t.Helper()
	url := "http://" + m.probes + "/readyz"
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if !m.running() {
			return false, fmt.Errorf("manager %s exited (%s)", m.name, m.exitStatus())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("manager %s did not become ready: %v", m.name, err)
	}
}

// interesting are the log lines worth seeing beyond the tail: errors,
// warnings, leader election and the scheduler's start.
var interesting = regexp.MustCompile(`^[EW]\d{4} |Starting the scheduler|lease|leader`)

// tail returns the interesting lines of the log before its last n lines
// (each message once, at most n), then those last n lines.
func (m *managerProcess) tail(n int) string {
	lines, err := m.lines()
	if err != nil {
		return err.Error()
	}
	head := lines[:max(0, len(lines)-n)]
	var picked []string
	seen := map[string]bool{}
	for _, l := range head {
		msg := l[strings.Index(l, "] ")+1:] // without klog's header
		if interesting.MatchString(l) && !seen[msg] && len(picked) < n {
			seen[msg] = true
			picked = append(picked, l)
		}
	}
	var b strings.Builder
	for _, l := range picked {
		b.WriteString(l + "\n")
	}
	if len(head) > 0 {
		fmt.Fprintf(&b, "[%d lines, of which the above]\n", len(head))
	}
	b.WriteString(strings.Join(lines[len(head):], "\n"))
	return b.String()
}

// firstLine returns the first line of the log that contains every part,
// or "none".
func (m *managerProcess) firstLine(parts ...string) string {
	lines, err := m.lines()
	if err != nil {
		return err.Error()
	}
next:
	for _, l := range lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return l
	}
	return "none"
}

func (m *managerProcess) lines() ([]string, error) {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}
