// Package kwok gives the envtest control plane (test/testenv) nodes that
// behave like nodes: it runs KWOK's controller (sigs.k8s.io/kwok, built into
// bin/kwok/<version>/ by the Makefile from the module pinned in
// hack/tools/kwok) against it, as a separate process. On the nodes it
// manages (Node builds one), pods bound there go Running, a terminating pod
// (a graceful deletion, as an eviction makes) is deleted, nodes are Ready
// and renew their Lease, and a node can be made NotReady (SetNotReady).
//
// The stages it runs are KWOK's own (the Makefile's KWOK_STAGE_FILES),
// written next to the binary as kwok-stages.yaml: kwokctl's default set
// (node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete,
// pod-delete) and the node-not-ready chaos stage.
package kwok

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ManagedAnnotation and ManagedValue mark the nodes KWOK manages (its
	// --manage-nodes-with-annotation-selector, as in KWOK's own
	// deployment); nodes without it are left alone.
	ManagedAnnotation = "kwok.x-k8s.io/node"
	ManagedValue      = "fake"

	// NotReadyLabel set to "true" on a managed node makes it NotReady:
	// KWOK's node-not-ready stage (kustomize/stage/node/chaos) then
	// writes its Ready condition False (reason nodeFailed), and keeps it
	// so while the label is there; without it, node-initialize makes the
	// node Ready again.
	NotReadyLabel = "node-not-ready.stage.kwok.x-k8s.io"

	// stagesFile is the name of the stages the Makefile writes next to
	// the kwok binary.
	stagesFile = "kwok-stages.yaml"

	// readyTimeout bounds how long Start waits for KWOK's health endpoint
	// (the machine may be loaded).
	readyTimeout = 2 * time.Minute
	// stopTimeout is how long stop waits for KWOK to exit after SIGTERM
	// before it kills it.
	stopTimeout = 30 * time.Second
)

// Option configures Start.
type Option func(*options)

type options struct {
	logFile string
}

// WithLogFile sends KWOK's log to path (created or truncated) and keeps
// it; by default it goes to a temporary file, removed by stop, whose last
// lines Start's and stop's errors quote.
func WithLogFile(path string) Option {
	return func(o *options) { o.logFile = path }
}

// Binary returns the kwok binary that $KWOK names (the Makefile sets it:
// make test, make run; `make -s kwok` builds it and prints its path), and
// checks that it and its stages are there.
func Binary() (string, error) {
	bin := os.Getenv("KWOK")
	if bin == "" {
		return "", errors.New("KWOK is not set: run through make (make test, make run), or set KWOK to the path `make -s kwok` prints")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	for _, f := range []string{bin, filepath.Join(filepath.Dir(bin), stagesFile)} {
		if _, err := os.Stat(f); err != nil {
			return "", fmt.Errorf("KWOK=%s: %w (make kwok builds it)", os.Getenv("KWOK"), err)
		}
	}
	return bin, nil
}

// Start runs KWOK's controller against the control plane of cfg (whose
// user must be allowed to write nodes, pods and leases: envtest's admin),
// managing the nodes annotated ManagedAnnotation=ManagedValue, serving its
// health endpoint on loopback only, and returns once that answers. stop
// sends it SIGTERM, waits for it to exit (killing it after a while) and
// removes its files; call it before the control plane stops. Start fails
// when $KWOK is not set (see Binary).
func Start(ctx context.Context, cfg *rest.Config, opts ...Option) (stop func() error, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "celsched-kwok-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		cleanup()
		return nil, err
	}
	if o.logFile == "" {
		o.logFile = filepath.Join(dir, "kwok.log")
	}
	// The port is free when chosen, and may be taken before KWOK listens:
	// then KWOK exits, and another port is tried.
	for attempt := 1; ; attempt++ {
		stop, err := run(ctx, bin, kubeconfig, dir, o.logFile, cleanup)
		if errors.Is(err, errPortTaken) && attempt < 3 {
			continue
		}
		if err != nil {
			cleanup()
			return nil, err
		}
		return stop, nil
	}
}

// errPortTaken is run's error when KWOK could not listen on its port.
var errPortTaken = errors.New("KWOK's port was taken")

// run starts KWOK once, on a free port, and waits until it is healthy.
// Its stop calls cleanup once KWOK has exited.
func run(ctx context.Context, bin, kubeconfig, home, logPath string, cleanup func()) (stop func() error, err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating KWOK's log: %w", err)
	}
	port, err := freePort()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--config="+filepath.Join(filepath.Dir(bin), stagesFile),
		"--manage-nodes-with-annotation-selector="+ManagedAnnotation+"="+ManagedValue,
		// Its server (health, logs, exec...) on loopback only; the
		// nodes' kubelet endpoint and address say the same.
		"--server-address="+address,
		"--node-port="+strconv.Itoa(port),
		"--node-ip=127.0.0.1",
		// Pod IPs: KWOK's default /24 holds 254 pods.
		"--cidr=10.0.0.0/16",
		"--node-lease-duration-seconds=40",
	)
	// KWOK also reads ~/.kwok/kwok.yaml when there is one: a home of its
	// own keeps a developer's configuration out.
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A process group of its own: a terminal's Ctrl-C (SIGINT to the
	// foreground group, `make run`'s) reaches the program that started
	// KWOK, which stops it (stop), not KWOK directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	// terminate stops KWOK: SIGTERM, then SIGKILL after stopTimeout.
	terminate := func() error {
		select {
		case <-exited:
			return fmt.Errorf("KWOK exited before it was stopped: %v%s", waitErr, tail(logPath))
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("KWOK did not exit within %s of SIGTERM; killed it%s", stopTimeout, tail(logPath))
		}
		// KWOK's exit status after SIGTERM says nothing: v0.8.0 exits 1
		// when its server stops with "context canceled".
		return nil
	}
	if err := waitHealthy(ctx, "http://"+address+"/healthz", exited); err != nil {
		log := tail(logPath)
		stopErr := terminate()
		if strings.Contains(log, "address already in use") {
			return nil, errPortTaken
		}
		return nil, errors.Join(fmt.Errorf("KWOK (%s) did not become healthy: %w%s", bin, err, log), stopErr)
	}
	return sync.OnceValue(func() error {
		defer cleanup()
		return terminate()
	}), nil
}

// waitHealthy polls url until it answers 200, KWOK exits, or readyTimeout.
func waitHealthy(ctx context.Context, url string, exited <-chan struct{}) error {
	httpClient := &http.Client{Timeout: 5 * time.Second}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("it exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s answered %s", url, resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// freePort returns a loopback TCP port that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for KWOK: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeKubeconfig writes a kubeconfig of cfg's server and credentials.
func writeKubeconfig(cfg *rest.Config, path string) error {
	if cfg == nil || cfg.Host == "" {
		return errors.New("kwok: the rest.Config has no host")
	}
	const name = "envtest"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
		TLSServerName:            cfg.ServerName,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
		TokenFile:             cfg.BearerTokenFile,
		Username:              cfg.Username,
		Password:              cfg.Password,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing KWOK's kubeconfig: %w", err)
	}
	return nil
}

// tail returns the last lines of KWOK's log, for an error message.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	const maxTail = 4000
	if len(data) > maxTail {
		data = data[len(data)-maxTail:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return "; the end of its log (" + path + "):\n" + strings.TrimRight(string(data), "\n")
}

// Node returns a node for KWOK to manage (annotated
// ManagedAnnotation=ManagedValue), with labels (the well-known hostname,
// os and arch labels added unless given) and a capacity, allocatable too,
// of 32 CPUs, 256Gi of memory and 110 pods, which KWOK keeps. Create it
// as it is (the API server keeps a node's status on create), or change
// its capacity first; KWOK then makes it Ready, gives it addresses and
// renews its Lease.
func Node(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range labels {
		l[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{ManagedAnnotation: ManagedValue},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}

// SetNotReady makes a KWOK node NotReady (notReady) or Ready again, by
// setting or removing NotReadyLabel; KWOK writes the condition within a
// few seconds (the stage's delay).
func SetNotReady(ctx context.Context, c client.Client, name string, notReady bool) error {
	value := "null"
	if notReady {
		value = `"true"`
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, NotReadyLabel, value))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling node %s %s: %w", name, NotReadyLabel, err)
	}
	return nil
}

// Ready reports whether node's Ready condition is True.
func Ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
