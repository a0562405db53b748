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
	metricsURL := "http://" + metricsAddr + "/metrics/scheduler"
	// measure schedules one batch, and says where its time went.
	measure := func(namespace string, pod *corev1.Pod, profile string) (float64, string, error) {
		before, err := scrapeScheduler(metricsURL)
		if err != nil {
			return 0, "", err
		}
		cpuBefore := readCPU(mgr.Process.Pid)
		reqBefore, err := apiRequests(ctx, cs)
		if err != nil {
			return 0, "", err
		}
		rate, err := m.batch(ctx, cs, namespace, pod, o.pods)
		if err != nil {
			return 0, "", err
		}
		cpuAfter := readCPU(mgr.Process.Pid)
		spread, err := placement(ctx, cs, namespace)
		if err != nil {
			return 0, "", err
		}
		reqAfter, err := apiRequests(ctx, cs)
		if err != nil {
			return 0, "", err
		}
		after, err := scrapeScheduler(metricsURL)
		if err != nil {
			return 0, "", err
		}
		return rate, spread + "; " + cpuAfter.perPod(cpuBefore, o.pods) + "; " + requestsPerPod(reqBefore, reqAfter, o.pods) + "; " + breakdown(before, after, profile, o.pods), nil
	}
	// What the manager and the machine use when nothing is scheduled:
	// part of every batch's CPU per pod, more of a slower batch's.
	idleBefore, idleStart := readCPU(mgr.Process.Pid), time.Now()
	time.Sleep(3 * time.Second)
	idleAfter, idleFor := readCPU(mgr.Process.Pid), time.Since(idleStart).Seconds()
	fmt.Printf("perf-binary: idle CPU (cores): manager %.2f, machine %.2f\n",
		(idleAfter.manager-idleBefore.manager)/idleFor, (idleAfter.machine-idleBefore.machine)/idleFor)
	var ratios []float64
	fmt.Printf("%-6s %-9s %8s %10s %7s  %s\n", "round", "profile", "pods", "pods/s", "ratio", "where the time went (kube-scheduler's histograms)")
	for r := 1; r <= o.rounds; r++ {
		stock, where, err := measure(fmt.Sprintf("stock-%d", r), stockPod, stockPod.Spec.SchedulerName)
		if err != nil {
			return err
		}
		fmt.Printf("%-6d %-9s %8d %10.1f %7s  %s\n", r, "stock", o.pods, stock, "1", where)
		celsched, where, err := measure(fmt.Sprintf("celsched-%d", r), celschedPod, celschedPod.Spec.SchedulerName)
		if err != nil {
			return err
		}
		ratios = append(ratios, celsched/stock)
		fmt.Printf("%-6d %-9s %8d %10.1f %7.2f  %s\n", r, "celsched", o.pods, celsched, celsched/stock, where)
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
	if scrape, err := scrapeScheduler(metricsURL); err == nil {
		fmt.Printf("perf-binary: scheduling attempts by profile and result: %s\n", scrape.attempts())
	}

	if o.profilePods > 0 {
		path := filepath.Join(o.dir, "cpu.pprof")
		done := make(chan error, 1)
		go func() {
			done <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, o.profileSeconds), path)
		}()
		// The heap profile's allocation counts before and after the batch:
		// go tool pprof -sample_index=alloc_space -base allocs-before.pprof
		// gives what the batch allocated.
		allocsBefore := filepath.Join(o.dir, "allocs-before.pprof")
		if err := fetch("http://"+pprofAddr+"/debug/pprof/allocs", allocsBefore); err != nil {
			return fmt.Errorf("taking the allocation profile: %w", err)
		}
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
		allocs := filepath.Join(o.dir, "allocs.pprof")
		if err := fetch("http://"+pprofAddr+"/debug/pprof/allocs", allocs); err != nil {
			return fmt.Errorf("taking the allocation profile: %w", err)
		}
		fmt.Printf("perf-binary: what the batch allocated: go tool pprof -sample_index=alloc_space -base %s %s %s\n", allocsBefore, o.manager, allocs)
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

// cpuTimes are the CPU seconds used so far by the manager, the API
// server, etcd, this program and the whole machine, from /proc (Linux);
// zero where it cannot be read.
type cpuTimes struct{ manager, apiserver, etcd, self, machine float64 }

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

func readCPU(manager int) cpuTimes {
	t := cpuTimes{manager: processCPU(manager), self: processCPU(os.Getpid())}
	// The control plane's processes, by name (this machine runs one).
	if dirs, err := os.ReadDir("/proc"); err == nil {
		for _, d := range dirs {
			var pid int
			if _, err := fmt.Sscan(d.Name(), &pid); err != nil {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				continue
			}
			switch strings.TrimSpace(string(comm)) {
			case "kube-apiserver":
				t.apiserver += processCPU(pid)
			case "etcd":
				t.etcd += processCPU(pid)
			}
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		if f := strings.Fields(line); len(f) > 8 && f[0] == "cpu" {
			// user nice system idle iowait irq softirq steal: all but idle
			// and iowait.
			for _, i := range []int{1, 2, 3, 6, 7, 8} {
				var v float64
				_, _ = fmt.Sscan(f[i], &v)
				t.machine += v / clockTicks
			}
		}
	}
	return t
}

// processCPU returns the user and system CPU seconds of a process.
func processCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) <= 12 {
		return 0
	}
	var user, system float64
	_, _ = fmt.Sscan(f[11], &user)
	_, _ = fmt.Sscan(f[12], &system)
	return (user + system) / clockTicks
}

// perPod says how much CPU a batch of pods cost each process and the
// whole machine.
func (t cpuTimes) perPod(before cpuTimes, pods int) string {
	ms := func(after, before float64) float64 { return (after - before) * 1e3 / float64(pods) }
	return fmt.Sprintf("CPU ms per pod: manager %.2f, kube-apiserver %.2f, etcd %.2f, perf-binary %.2f, machine %.2f",
		ms(t.manager, before.manager), ms(t.apiserver, before.apiserver), ms(t.etcd, before.etcd), ms(t.self, before.self), ms(t.machine, before.machine))
}

// placement says on how many nodes a batch's pods landed, and the most
// on one node: where the pods go changes what kube-scheduler does per pod
// (a node's NodeInfo is copied into the snapshot each time a pod lands on
// it, with all its pods).
func placement(ctx context.Context, cs kubernetes.Interface, namespace string) (string, error) {
	perNode := map[string]int{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			perNode[list.Items[i].Spec.NodeName]++
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	most := 0
	for _, n := range perNode {
		most = max(most, n)
	}
	return fmt.Sprintf("on %d nodes, at most %d on one", len(perNode), most), nil
}

// apiRequests reads the API server's apiserver_request_total, by verb and
// resource (with subresource).
func apiRequests(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		series, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(series, "} ")
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			continue
		}
		key := label(labels, "verb") + " " + label(labels, "resource")
		if sub := label(labels, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	return out, nil
}

func label(labels, name string) string {
	_, rest, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}

// requestsPerPod says which API requests a batch made, per pod, the most
// frequent first (at least 0.05 per pod).
func requestsPerPod(before, after map[string]float64, pods int) string {
	type count struct {
		key string
		n   float64
	}
	var counts []count
	for k, v := range after {
		if d := (v - before[k]) / float64(pods); d >= 0.05 {
			counts = append(counts, count{k, d})
		}
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].n > counts[j].n })
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%s %.2f", c.key, c.n)
	}
	return "API requests per pod: " + strings.Join(parts, ", ")
}

// schedulerMetrics is one scrape of the manager's /metrics/scheduler
// (kube-scheduler's registry, with the Go runtime's metrics): the value of
// each sample line, by its name and labels as printed.
type schedulerMetrics map[string]float64

// scrapeScheduler reads kube-scheduler's metrics from the manager.
func scrapeScheduler(url string) (schedulerMetrics, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := schedulerMetrics{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "scheduler_") && !strings.HasPrefix(line, "go_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out, scanner.Err()
}

// sum adds the samples of a metric whose labels include every given
// name="value" pair.
func (m schedulerMetrics) sum(metric string, labels ...string) float64 {
	var total float64
	for series, v := range m {
		name, rest, _ := strings.Cut(series, "{")
		if name != metric {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// attempts prints scheduler_schedule_attempts_total as
// "profile/result=count" pairs: attempts that did not bind a pod (retried)
// cost time that no CPU profile shows.
func (m schedulerMetrics) attempts() string {
	var out []string
	for series, v := range m {
		if rest, ok := strings.CutPrefix(series, "scheduler_schedule_attempts_total"); ok {
			out = append(out, fmt.Sprintf("%s %.0f", rest, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// breakdown says where a batch's scheduling time went, per pod, from the
// scheduler's own histograms (the difference of two scrapes around the
// batch, of the profile that scheduled it): the whole attempt (scheduling
// and binding cycles), the scheduling algorithm, and each extension point
// that kube-scheduler times once per cycle (Filter: every node's filters).
func breakdown(before, after schedulerMetrics, profile string, pods int) string {
	perPod := func(metric string, labels ...string) string {
		d := after.sum(metric, labels...) - before.sum(metric, labels...)
		return fmt.Sprintf("%.0f", d/float64(pods)*1e6)
	}
	p := `profile="` + profile + `"`
	parts := []string{
		"attempt " + perPod("scheduler_scheduling_attempt_duration_seconds_sum", p),
		// The algorithm's histogram has no profile label: a batch is one
		// profile's pods.
		"algorithm " + perPod("scheduler_scheduling_algorithm_duration_seconds_sum"),
	}
	for _, point := range []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve", "Bind"} {
		parts = append(parts, point+" "+perPod("scheduler_framework_extension_point_duration_seconds_sum", p, `extension_point="`+point+`"`))
	}
	gcs := after.sum("go_gc_duration_seconds_count") - before.sum("go_gc_duration_seconds_count")
	allocated := after.sum("go_memstats_alloc_bytes_total") - before.sum("go_memstats_alloc_bytes_total")
	return fmt.Sprintf("us per pod: %s; KiB allocated per pod %.0f, %.0f GCs, heap %.0f MiB",
		strings.Join(parts, ", "), allocated/float64(pods)/1024, gcs, after.sum("go_memstats_heap_inuse_bytes")/(1<<20))
}
