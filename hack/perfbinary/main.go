// Command perfbinary is `make perf-binary`: it measures the built manager
// binary as an operator runs it. It starts a local control plane (the
// kube-apiserver and etcd of the tests), runs bin/manager as a separate
// process against it with two scheduler profiles (a stock one and the
// celsched one, test/performance/scheduler-config.yaml), creates simulated
// nodes and a workload's SchedulingPolicies (test/performance/testdata),
// and then, round after round, creates identical pods for the stock profile
// and for the celsched profile, and times the first to the last bind of each
// batch. A batch is created while the manager is stopped (SIGSTOP) and
// scheduled once it continues (SIGCONT), so that the API server's pod
// creation rate (about 50 pods/s on a 2-core machine) is not what is timed. It prints each round's pods/s and the ratio
// celsched/stock of the same round, and can take a CPU profile of the
// manager (--pprof-bind-address) while it schedules celsched pods.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/testenv"
)

// workloads are what the celsched pods are measured with, and the stock
// pods' native counterpart (test/performance/templates), as in make perf.
var workloads = map[string]struct{ policies, stockPod string }{
	"NoPolicy":         {"NoPolicy", "pod-stock.yaml"},
	"NonMatching10":    {"NonMatching10", "pod-stock.yaml"},
	"NodeOnly10":       {"NodeOnly10", "pod-stock.yaml"},
	"RequiredAffinity": {"RequiredAffinity", "pod-stock-required-affinity.yaml"},
}

type options struct {
	manager, dir, workload, perfDir string
	nodes, pods, rounds             int
	profilePods                     int
	profileSeconds                  int
	// profileStock profiles stock pods rather than celsched ones.
	profileStock bool
}

func main() {
	var o options
	flag.StringVar(&o.manager, "manager", filepath.Join("bin", "manager"), "The manager binary (make build).")
	flag.StringVar(&o.dir, "dir", filepath.Join("bin", "perf-binary"), "Directory for the kubeconfig, the manager's log and the CPU profile.")
	flag.StringVar(&o.perfDir, "perf-dir", filepath.Join("test", "performance"), "The scheduler_perf suite's directory: scheduler configuration, templates, policies.")
	flag.StringVar(&o.workload, "workload", "NodeOnly10", "The workload: NoPolicy, NonMatching10, NodeOnly10 or RequiredAffinity.")
	flag.IntVar(&o.nodes, "nodes", 1000, "Simulated nodes.")
	flag.IntVar(&o.pods, "pods", 1000, "Pods per profile and round.")
	flag.IntVar(&o.rounds, "rounds", 3, "Rounds (stock, then celsched).")
	flag.IntVar(&o.profilePods, "profile-pods", 0, "After the rounds, celsched pods to schedule under a CPU profile (0: none).")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 12, "Length of the CPU profile.")
	flag.BoolVar(&o.profileStock, "profile-stock", false, "Profile stock pods instead of celsched ones (to compare the two profiles' CPU).")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "perf-binary:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	w, ok := workloads[o.workload]
	if !ok {
		return fmt.Errorf("unknown workload %q", o.workload)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	// No node lifecycle controller runs: new nodes must not be tainted
	// not-ready (docs: design, verified facts).
	env.ControlPlane.GetAPIServer().Configure().Append("disable-admission-plugins", "TaintNodesByCondition")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 5000, 5000
	kubeconfig, err := testenv.WriteAdminKubeconfig(env, cfg, o.dir)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	_ = schedv1alpha1.AddToScheme(c.Scheme())

	pprofAddr, probeAddr, metricsAddr := freeAddr(), freeAddr(), freeAddr()
	logPath := filepath.Join(o.dir, "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	schedulerConfig, err := writeSchedulerConfig(filepath.Join(o.perfDir, "scheduler-config.yaml"), o.dir)
	if err != nil {
		return err
	}
	mgr := exec.Command(o.manager, "--kubeconfig", kubeconfig, "--leader-elect=false", "--webhook-port=0",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", probeAddr, "--pprof-bind-address", pprofAddr,
		"--config", schedulerConfig)
	mgr.Stdout, mgr.Stderr = logFile, logFile
	if err := mgr.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", o.manager, err)
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait() }()
	fmt.Printf("perf-binary: manager %s (pid %d), log %s\n", o.manager, mgr.Process.Pid, logPath)

	start := time.Now()
	if err := createNodes(ctx, cs, o); err != nil {
		return err
	}
	fmt.Printf("perf-binary: %d nodes in %v\n", o.nodes, time.Since(start).Round(time.Millisecond))
	names, err := applyPolicies(ctx, c, filepath.Join(o.perfDir, "testdata", w.policies+".yaml"))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, "http://"+probeAddr+"/readyz"); err != nil {
		return fmt.Errorf("the manager is not ready (see %s): %w", logPath, err)
	}
	if err := waitPoliciesReady(ctx, c, names); err != nil {
		return err
	}
	fmt.Printf("perf-binary: workload %s, %d policies ready; %d rounds of %d pods per profile\n", o.workload, len(names), o.rounds, o.pods)

	stockPod, err := readPod(filepath.Join(o.perfDir, "templates", w.stockPod))
	if err != nil {
		return err
	}
	celschedPod, err := readPod(filepath.Join(o.perfDir, "templates", "pod-celsched.yaml"))
	if err != nil {
		return err
	}
	m := newMeter(ctx, cs, mgr.Process)
	var ratios []float64
	fmt.Printf("%-6s %-9s %8s %10s %7s\n", "round", "profile", "pods", "pods/s", "ratio")
	for r := 1; r <= o.rounds; r++ {
		stock, err := m.batch(ctx, cs, fmt.Sprintf("stock-%d", r), stockPod, o.pods)
		if err != nil {
			return err
		}
		fmt.Printf("%-6d %-9s %8d %10.1f %7s\n", r, "stock", o.pods, stock, "1")
		celsched, err := m.batch(ctx, cs, fmt.Sprintf("celsched-%d", r), celschedPod, o.pods)
		if err != nil {
			return err
		}
		ratios = append(ratios, celsched/stock)
		fmt.Printf("%-6d %-9s %8d %10.1f %7.2f\n", r, "celsched", o.pods, celsched, celsched/stock)
		// Each round starts from empty nodes, as the first did.
		for _, ns := range []string{fmt.Sprintf("stock-%d", r), fmt.Sprintf("celsched-%d", r)} {
			if err := deletePods(ctx, cs, ns); err != nil {
				return err
			}
		}
	}
	sorted := slices.Clone(ratios)
	sort.Float64s(sorted)
	fmt.Printf("perf-binary: %s, %d nodes: celsched/stock per round %s, median %.2f\n", o.workload, o.nodes, formatRatios(ratios), sorted[len(sorted)/2])
	// Attempts that did not bind a pod (retried) cost time no CPU shows.
	if attempts, err := scheduleAttempts("http://" + metricsAddr + "/metrics/scheduler"); err == nil {
		fmt.Printf("perf-binary: scheduling attempts by profile and result: %s\n", attempts)
	}

	if o.profilePods > 0 {
		path := filepath.Join(o.dir, "cpu.pprof")
		done := make(chan error, 1)
		go func() {
			done <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, o.profileSeconds), path)
		}()
		profiled, profile := celschedPod, "celsched"
		if o.profileStock {
			profiled, profile = stockPod, "stock"
		}
		rate, err := m.batch(ctx, cs, "profiled", profiled, o.profilePods)
		if err != nil {
			return err
		}
		if err := <-done; err != nil {
			return fmt.Errorf("taking the CPU profile: %w", err)
		}
		fmt.Printf("perf-binary: %d %s pods at %.1f pods/s under a %ds CPU profile: %s (go tool pprof -top %s %s)\n",
			o.profilePods, profile, rate, o.profileSeconds, path, o.manager, path)
	}
	return nil
}

func formatRatios(r []float64) string {
	parts := make([]string, len(r))
	for i, v := range r {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(parts, " ")
}

// freeAddr returns a free loopback address.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeSchedulerConfig writes the scheduler configuration of the
// scheduler_perf suite (a stock profile and the celsched one) with a client
// rate limit of 5000 requests per second: with kube-scheduler's default of
// 50, binding (one request per pod) caps both profiles at about 50 pods/s,
// and the CPU the plugins cost would not show.
func writeSchedulerConfig(from, dir string) (string, error) {
	data, err := os.ReadFile(from)
	if err != nil {
		return "", err
	}
	data = append(data, []byte("clientConnection:\n  qps: 5000\n  burst: 5000\n")...)
	path := filepath.Join(dir, "scheduler-config.yaml")
	return path, os.WriteFile(path, data, 0o600)
}

// createNodes creates the nodes of test/performance/templates/node.yaml,
// with their status.
func createNodes(ctx context.Context, cs kubernetes.Interface, o options) error {
	text, err := os.ReadFile(filepath.Join(o.perfDir, "templates", "node.yaml"))
	if err != nil {
		return err
	}
	tmpl, err := template.New("node").Funcs(template.FuncMap{"Mod": func(a, b int) int { return a % b }}).Parse(string(text))
	if err != nil {
		return err
	}
	return parallel(16, o.nodes, func(i int) error {
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, map[string]int{"Index": i}); err != nil {
			return err
		}
		node := &corev1.Node{}
		if err := yaml.UnmarshalStrict(buf.Bytes(), node); err != nil {
			return err
		}
		node.GenerateName = ""
		node.Name = fmt.Sprintf("perf-node-%05d", i)
		node.Labels[corev1.LabelHostname] = node.Name
		status := node.Status
		created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// applyPolicies creates the SchedulingPolicies of a file, and returns
// their names.
func applyPolicies(ctx context.Context, c client.Client, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // NoPolicy
		}
		return nil, err
	}
	var names []string
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("creating %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
}

// waitPoliciesReady waits until the manager reports every policy compiled.
func waitPoliciesReady(ctx context.Context, c client.Client, names []string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			p := &schedv1alpha1.SchedulingPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
				return false, err
			}
			ready := meta.FindStatusCondition(p.Status.Conditions, schedv1alpha1.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != p.Generation {
				return false, nil
			}
		}
		return true, nil
	})
}

func waitHTTP(ctx context.Context, url string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func readPod(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pod, nil
}

// meter records when each pod is bound, from an informer.
type meter struct {
	// manager is stopped while a batch is created.
	manager *os.Process
	mu      sync.Mutex
	bound   map[string][]time.Time // namespace -> bind times
}

func newMeter(ctx context.Context, cs kubernetes.Interface, manager *os.Process) *meter {
	m := &meter{manager: manager, bound: map[string][]time.Time{}}
	factory := informers.NewSharedInformerFactory(cs, 0)
	pods := factory.Core().V1().Pods().Informer()
	record := func(oldObj, newObj any) {
		pod, ok := newObj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		if old, ok := oldObj.(*corev1.Pod); ok && old.Spec.NodeName != "" {
			return
		}
		m.mu.Lock()
		m.bound[pod.Namespace] = append(m.bound[pod.Namespace], time.Now())
		m.mu.Unlock()
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record(nil, obj) },
		UpdateFunc: record,
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return m
}

// batch creates n copies of pod in a new namespace at once, waits until
// all are bound, and returns the pods per second from the first bind to
// the last.
func (m *meter) batch(ctx context.Context, cs kubernetes.Interface, namespace string, pod *corev1.Pod, n int) (float64, error) {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	if err := m.manager.Signal(syscall.SIGSTOP); err != nil {
		return 0, fmt.Errorf("stopping the manager: %w", err)
	}
	var created atomic.Int64
	err := parallel(32, n, func(i int) error {
		p := pod.DeepCopy()
		p.GenerateName = ""
		p.Name = fmt.Sprintf("pod-%05d", i)
		p.Namespace = namespace
		_, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		created.Add(1)
		return err
	})
	if cerr := m.manager.Signal(syscall.SIGCONT); cerr != nil {
		return 0, fmt.Errorf("continuing the manager: %w", cerr)
	}
	if err != nil {
		return 0, err
	}
	var times []time.Time
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		times = slices.Clone(m.bound[namespace])
		m.mu.Unlock()
		return len(times) >= n, nil
	})
	if err != nil {
		return 0, fmt.Errorf("namespace %s: %d of %d pods bound: %w", namespace, len(times), n, err)
	}
	first, last := slices.MinFunc(times, time.Time.Compare), slices.MaxFunc(times, time.Time.Compare)
	return float64(n-1) / last.Sub(first).Seconds(), nil
}

// deletePods deletes a namespace's pods at once (no kubelet runs: they go
// at once) and waits until they are gone.
func deletePods(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	zero := int64(0)
	if err := cs.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, err
	})
}

// parallel runs f(0..n-1) on workers goroutines, and returns the first
// error.
func parallel(workers, n int, f func(int) error) error {
	var (
		next     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// scheduleAttempts reads kube-scheduler's scheduler_schedule_attempts_total
// from the manager's metrics, as "profile/result=count" pairs.
func scheduleAttempts(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "scheduler_schedule_attempts_total{") {
			out = append(out, strings.TrimPrefix(line, "scheduler_schedule_attempts_total"))
		}
	}
	return strings.Join(out, " "), nil
}
