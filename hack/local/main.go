// Command local is `make run`: it starts a local control plane (the
// kube-apiserver and etcd of the tests), KWOK (test/kwok: the nodes' and
// pods' lifecycle, as kubelets would) and kube-controller-manager's
// ReplicaSet, disruption, garbage collector and PodGroup protection controllers (test/kubecontrollers), installs
// the CRD, creates simulated nodes and namespaces, applies the sample
// policies, runs the celsched manager against it, creates sample pods and
// prints where each landed (and that it runs) or why it is pending. It then
// keeps running, so that more policies and pods can be applied with
// kubectl, until Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/kubecontrollers"
	"github.com/celsched/celsched/test/kwok"
	"github.com/celsched/celsched/test/testenv"
)

func main() {
	workDir := flag.String("dir", filepath.Join("bin", "local"), "Directory for the kubeconfig, the manager's log and KWOK's.")
	samples := flag.String("samples", filepath.Join("config", "samples"), "Directory of the SchedulingPolicies to apply.")
	var gates featuregates.Settings
	flag.StringVar(&gates.EmulatedVersion, featuregates.EmulatedVersionFlagName, "", "The manager's emulated Kubernetes version (make run EMULATED_VERSION=...); the local kube-apiserver runs at its own, as an API server upgraded before its scheduler. "+featuregates.EmulatedVersionUsage())
	flag.Var(featuregates.NewFlag(&gates.FeatureGates), featuregates.FlagName, "The manager's and the local kube-apiserver's feature gates (make run FEATURE_GATES=...). "+featuregates.Usage())
	klog.InitFlags(nil)
	flag.Parse()
	// A bad version or gate fails before the control plane starts.
	if err := featuregates.Apply(gates); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(2)
	}
	if err := run(*workDir, *samples, gates); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run(workDir, samplesDir string, gates featuregates.Settings) error {
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return err
	}
	logFile := filepath.Join(workDir, "manager.log")
	if err := logTo(logFile); err != nil {
		return err
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Println("Starting a local control plane (kube-apiserver and etcd)...")
	env, cfg, err := testenv.StartWithFeatureGates("config", gates.FeatureGates)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the control plane.")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	kubeconfig, err := testenv.WriteAdminKubeconfig(env, cfg, workDir)
	if err != nil {
		return err
	}
	// KWOK stops before the control plane (defers run last-in first-out).
	kwokLog := filepath.Join(workDir, "kwok.log")
	stopKWOK, err := kwok.Start(ctx, cfg, kwok.WithLogFile(kwokLog))
	if err != nil {
		return err
	}
	defer func() {
		if err := stopKWOK(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping KWOK:", err)
		}
	}()
	stopControllers, err := kubecontrollers.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopControllers()
	fmt.Printf("Started KWOK (nodes heartbeat, bound pods run, terminating pods are deleted; its log is %s) and the ReplicaSet, disruption, garbage collector and PodGroup protection controllers.\n", kwokLog)

	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return err
	}
	gangs := gates.FeatureGates["GenericWorkload"] && gates.FeatureGates["TopologyAwareWorkloadScheduling"]
	if err := createCluster(ctx, c, gangs); err != nil {
		return err
	}
	mgrCtx, cancelMgr := context.WithCancel(klog.NewContext(ctx, klog.NewKlogr()))
	defer cancelMgr()
	mgrDone, err := startManager(mgrCtx, env, cfg, c, logFile, gates)
	if err != nil {
		return err
	}
	if err := populate(ctx, c, samplesDir, gangs); err != nil {
		return err
	}
	printTryThis(kubeconfig)
	if err := watchPlacements(ctx, cfg); err != nil {
		return err
	}
	cancelMgr()
	return <-mgrDone
}

// logTo sends the manager's and the scheduler's logs to a file; the
// terminal shows the placements.
func logTo(logFile string) error {
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL", "log_file": logFile, "one_output": "true"} {
		if err := flag.Set(k, v); err != nil {
			return err
		}
	}
	ctrl.SetLogger(klog.NewKlogr())
	return nil
}

// startManager starts the celsched manager, with the webhook's certificate
// provisioned in its namespace as in a cluster installed from
// config/default, and returns what its Start returns, when it does.
func startManager(ctx context.Context, env *envtest.Environment, cfg *rest.Config, c client.Client, logFile string, gates featuregates.Settings) (<-chan error, error) {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", managerNamespace, err)
	}
	opts := app.Options{MetricsBindAddress: "127.0.0.1:8080", HealthProbeBindAddress: "127.0.0.1:8081", Reports: true, Remediation: true,
		EmulatedVersion: gates.EmulatedVersion, FeatureGates: gates.FeatureGates}
	testenv.SelfSignedWebhook(env, &opts, managerNamespace)
	mgr, err := app.New(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	fmt.Printf("Started the celsched manager (scheduler %v); its log is %s\n", mgr.SchedulerNames, logFile)
	return done, nil
}

// populate applies the sample policies (once the manager's webhook is
// called: it validates them) and their params, waits for them to be Ready,
// creates the sample pods (and, with gangs, the sample pod groups) and
// prints where they went.
func populate(ctx context.Context, c client.Client, samplesDir string, gangs bool) error {
	if err := testenv.WaitWebhook(ctx, c, true, time.Minute); err != nil {
		return err
	}
	policies, err := applySamples(ctx, c, samplesDir)
	if err != nil {
		return err
	}
	if err := applyParams(ctx, c, samplesDir); err != nil {
		return err
	}
	if err := waitReady(ctx, c, policies); err != nil {
		return err
	}
	pods, err := createPods(ctx, c, gangs)
	if err != nil {
		return err
	}
	if err := waitSettled(ctx, c, pods); err != nil {
		return err
	}
	if err := printTable(ctx, c, pods); err != nil {
		return err
	}
	return preemptionDemo(ctx, c, samplesDir)
}

func printTryThis(kubeconfig string) {
	fmt.Printf(`
The cluster keeps running. Try, in another terminal:
  kubectl --kubeconfig %[1]s get schedpol
  kubectl --kubeconfig %[1]s label namespace research gpu-approved=true   # releases research/notebook
  echo '{"apiVersion":"scheduling.celsched.io/v1alpha1","kind":"TenantPlacement","metadata":{"name":"placement","namespace":"team-c"},"spec":{"zones":["zone-a"]}}' | kubectl --kubeconfig %[1]s create -f -   # releases team-c/web
  kubectl --kubeconfig %[1]s -n team-a patch tenantplacement placement --type merge -p '{"spec":{"zones":["zone-b"]}}'   # moves team-a's next pod
  kubectl --kubeconfig %[1]s apply -f config/samples/...                   # or your own policy
  kubectl --kubeconfig %[1]s describe pod -n sandbox scratch
  kubectl --kubeconfig %[1]s delete pod -n shop web-1                # terminates, and KWOK deletes it as a kubelet would
  kubectl --kubeconfig %[1]s label node node-b3 node-not-ready.stage.kwok.x-k8s.io=true   # KWOK makes node-b3 NotReady (remove the label: Ready again)
New placements are printed below. Ctrl-C stops everything.

`, kubeconfig)
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(schedv1alpha1.AddToScheme(s))
	return s
}

// node is a simulated node.
type node struct {
	name, zone string
	labels     map[string]string
	taints     []corev1.Taint
	gpus       string
}

var nodes = []node{
	{name: "node-a1", zone: "zone-a"},
	{name: "node-a2", zone: "zone-a", labels: map[string]string{"karpenter.sh/capacity-type": "spot"}},
	{name: "node-b1", zone: "zone-b", gpus: "4", labels: map[string]string{"nvidia.com/gpu.present": "true"},
		taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}},
	{name: "node-b2", zone: "zone-b", labels: map[string]string{"celsched.io/pool": "payments"}},
	{name: "node-b3", zone: "zone-b", labels: map[string]string{"celsched.io/pool": "general"}},
	{name: "node-c1", zone: "zone-c", labels: map[string]string{"celsched.io/maintenance": "true"}},
}

// gangTaint keeps the pods of the sample pod groups, which tolerate it,
// apart from the other sample pods.
const gangTaint = "celsched.io/gangs"

// gangNodes are the nodes of the sample pod groups (make run with the
// workload feature gates): GPU nodes in two rack blocks of zone-a, where
// team-a's TenantPlacement lets its pods run.
var gangNodes = func() []node {
	var out []node
	for _, b := range []string{"x", "y"} {
		for i := 1; i <= 2; i++ {
			out = append(out, node{name: fmt.Sprintf("node-%s%d", b, i), zone: "zone-a",
				labels: map[string]string{"nvidia.com/gpu.present": "true", "topology.example.com/block": b},
				taints: []corev1.Taint{{Key: gangTaint, Effect: corev1.TaintEffectNoSchedule}}})
		}
	}
	return out
}()

// preemptionTaint keeps the other sample pods off the nodes of the
// preemption demo (preemptionDemo).
const preemptionTaint = "celsched.io/preemption-demo"

// preemptionNodes are the nodes of the preemption demo, in team-a's zone.
var preemptionNodes = []node{
	{name: "node-p1", zone: "zone-a", taints: []corev1.Taint{{Key: preemptionTaint, Effect: corev1.TaintEffectNoSchedule}}},
	{name: "node-p2", zone: "zone-a", taints: []corev1.Taint{{Key: preemptionTaint, Effect: corev1.TaintEffectNoSchedule}}},
}

// namespaces of the sample workloads and their labels.
var namespaces = map[string]map[string]string{
	"ml":       {"team": "ml", "gpu-approved": "true", "cost-center": "research"},
	"research": {"team": "ml", "cost-center": "research"},
	"payments": {"team": "payments", "cost-center": "finance"},
	// no-spot-for-production is enforced in shop (a production
	// namespace) and audits batch (labelled spot-ok: its first override),
	// whose job prefers the spot node.
	"shop":    {"celsched.io/preferred-zone": "zone-b", "cost-center": "retail", "celsched.io/environment": "production"},
	"batch":   {"cost-center": "data", "celsched.io/environment": "batch", "celsched.io/spot-ok": "true"},
	"sandbox": {},
	// Tenants of tenant-zones-and-pools: team-a and team-b have their
	// TenantPlacement (config/samples/tenant-placement-params.yaml),
	// team-c has none yet.
	"team-a": {"celsched.io/tenant": "team-a", "cost-center": "team-a"},
	"team-b": {"celsched.io/tenant": "team-b", "cost-center": "team-b"},
	"team-c": {"celsched.io/tenant": "team-c", "cost-center": "team-c"},
}

// managerNamespace is the namespace of an install (config/default).
const managerNamespace = "celsched-system"

// createCluster creates the nodes (with gangs, the rack blocks' nodes
// too), KWOK's (its annotation; it makes them
// Ready and keeps their capacity), and the namespaces, and waits until
// KWOK has made the nodes Ready.
func createCluster(ctx context.Context, c client.Client, gangs bool) error {
	all := slices.Concat(nodes, preemptionNodes)
	if gangs {
		all = slices.Concat(all, gangNodes)
	}
	for _, n := range all {
		labels := map[string]string{corev1.LabelTopologyZone: n.zone}
		for k, v := range n.labels {
			labels[k] = v
		}
		obj := kwok.Node(n.name, labels)
		obj.Spec.Taints = n.taints
		if n.labels["celsched.io/maintenance"] != "" {
			obj.Annotations["celsched.io/maintenance-reason"] = "kernel upgrade"
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("8"),
			corev1.ResourceMemory:           resource.MustParse("32Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
			corev1.ResourcePods:             resource.MustParse("110"),
		}
		if n.gpus != "" {
			capacity["nvidia.com/gpu"] = resource.MustParse(n.gpus)
		}
		// The API server keeps a node's status on create.
		obj.Status.Capacity, obj.Status.Allocatable = capacity, capacity.DeepCopy()
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating node %s: %w", n.name, err)
		}
	}
	if err := waitNodesReady(ctx, c, all); err != nil {
		return err
	}
	for name, labels := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	fmt.Printf("Created %d KWOK nodes in zones a, b and c (one spot, one GPU, one payments pool, one in maintenance, and %d for the preemption demo, tainted %s), Ready, and %d namespaces.\n", len(nodes)+len(preemptionNodes), len(preemptionNodes), preemptionTaint, len(namespaces))
	if gangs {
		fmt.Printf("With the workload feature gates: %d GPU nodes in rack blocks x and y of zone-a, for pod groups only (tainted %s).\n", len(gangNodes), gangTaint)
	}
	return nil
}

// waitNodesReady waits until KWOK has made every node Ready.
func waitNodesReady(ctx context.Context, c client.Client, nodes []node) error {
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, n := range nodes {
			got := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: n.name}, got); err != nil {
				return false, err
			}
			if !kwok.Ready(got) {
				notReady = append(notReady, n.name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("KWOK did not make nodes %s Ready: %w", strings.Join(notReady, ", "), err)
	}
	return nil
}

// applyParams creates the TenantPlacements of
// config/samples/tenant-placement-params.yaml.
func applyParams(ctx context.Context, c client.Client, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "tenant-placement-params.yaml"))
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		placement := &schedv1alpha1.TenantPlacement{}
		if err := yaml.UnmarshalStrict([]byte(doc), placement); err != nil {
			return fmt.Errorf("tenant-placement-params.yaml: %w", err)
		}
		if err := c.Create(ctx, placement); err != nil {
			return fmt.Errorf("creating TenantPlacement %s/%s: %w", placement.Namespace, placement.Name, err)
		}
	}
	return nil
}

// applySamples creates every SchedulingPolicy of a directory.
func applySamples(ctx context.Context, c client.Client, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var typeMeta metav1.TypeMeta
		if err := yaml.Unmarshal(data, &typeMeta); err != nil || typeMeta.Kind != "SchedulingPolicy" {
			continue // e.g. kustomization.yaml
		}
		policy, err := applyFile(ctx, c, f)
		if err != nil {
			return nil, err
		}
		names = append(names, policy.Name)
	}
	fmt.Printf("Applied %d sample SchedulingPolicies from %s: %s\n", len(names), dir, strings.Join(names, ", "))
	return names, nil
}

// applyFile creates the SchedulingPolicy of a file as `kubectl apply`
// would: with the last-applied-configuration annotation (the file's
// object as JSON), so that applying the same file with kubectl later
// finds nothing to change.
func applyFile(ctx context.Context, c client.Client, file string) (*schedv1alpha1.SchedulingPolicy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := yaml.UnmarshalStrict(data, policy); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// kubectl's serialization: the object's JSON (keys sorted, an empty
	// metadata.annotations) and a newline.
	var object map[string]any
	if err := yaml.Unmarshal(data, &object); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// kubectl leaves the annotations it removed its own from, empty.
	if metadata, ok := object["metadata"].(map[string]any); ok {
		if _, ok := metadata["annotations"]; !ok {
			metadata["annotations"] = map[string]any{}
		}
	}
	applied, err := json.Marshal(object)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if policy.Annotations == nil {
		policy.Annotations = map[string]string{}
	}
	policy.Annotations[corev1.LastAppliedConfigAnnotation] = string(applied) + "\n"
	if err := c.Create(ctx, policy); err != nil {
		return nil, fmt.Errorf("applying %s: %w", file, err)
	}
	return policy, nil
}

// waitReady waits until the manager reports every policy compiled, and
// the params of the parameterized ones listed.
func waitReady(ctx context.Context, c client.Client, names []string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			p := &schedv1alpha1.SchedulingPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
				return false, err
			}
			if p.Status.ObservedGeneration != p.Generation || len(p.Status.Conditions) == 0 {
				return false, nil
			}
			if ready := meta.FindStatusCondition(p.Status.Conditions, schedv1alpha1.ConditionReady); ready != nil && ready.Reason == schedv1alpha1.ReasonParamsListing {
				return false, nil
			}
		}
		return true, nil
	})
}

// samplePod is a workload of the demo.
type samplePod struct {
	namespace, name string
	labels          map[string]string
	gpus, cpu       string
	tolerateGPU     bool
	note            string
	// group is the pod's pod group (sampleGroups), with gangs only.
	group string
	// node pins the pod to a node of the preemption demo (tolerating its
	// taint), priorityClass is its PriorityClass.
	node, priorityClass string
}

// sampleGroup is a pod group of the demo (make run with the workload
// feature gates): a gang of minCount members, whose candidate placements
// are the values of topologyKey.
type sampleGroup struct {
	namespace, name, topologyKey string
	minCount                     int32
}

// sampleGroups are team-a's gangs under tenant-gangs-one-block: one asks
// for a rack block and is placed in one; one asks for a zone, which spans
// both blocks, and is held with the policy's reason.
var sampleGroups = []sampleGroup{
	{namespace: "team-a", name: "train", topologyKey: "topology.example.com/block", minCount: 2},
	{namespace: "team-a", name: "wide", topologyKey: corev1.LabelTopologyZone, minCount: 2},
}

// gangPods are the members of sampleGroups.
var gangPods = []samplePod{
	{namespace: "team-a", name: "train-0", cpu: "6", group: "train", note: "tenant-gangs-one-block: one block"},
	{namespace: "team-a", name: "train-1", cpu: "6", group: "train", note: "tenant-gangs-one-block: one block"},
	{namespace: "team-a", name: "wide-0", cpu: "6", group: "wide", note: "tenant-gangs-one-block: a zone spans blocks"},
	{namespace: "team-a", name: "wide-1", cpu: "6", group: "wide", note: "tenant-gangs-one-block: a zone spans blocks"},
}

var samplePods = []samplePod{
	{namespace: "ml", name: "trainer", gpus: "1", tolerateGPU: true, note: "ml-on-gpu-nodes: GPU nodes only"},
	{namespace: "research", name: "notebook", gpus: "1", tolerateGPU: true, note: "ml-on-gpu-nodes: namespace not approved"},
	{namespace: "payments", name: "api", note: "payments-dedicated-pool"},
	{namespace: "shop", name: "web-1", labels: map[string]string{"app": "web"}, note: "zone-preference: zone-b, spread"},
	{namespace: "shop", name: "web-2", labels: map[string]string{"app": "web"}, note: "zone-preference: zone-b, spread"},
	{namespace: "batch", name: "job-1", labels: map[string]string{"workload-class": "batch"}, note: "batch-prefers-spot"},
	{namespace: "sandbox", name: "scratch", note: "require-cost-center"},
	{namespace: "batch", name: "huge", cpu: "64", note: "built-in NodeResourcesFit"},
	{namespace: "team-a", name: "web", note: "tenant-zones-and-pools: zone-a"},
	{namespace: "team-b", name: "web", note: "tenant-zones-and-pools: zone-b/c, pool general"},
	{namespace: "team-c", name: "web", note: "tenant-zones-and-pools: no params"},
}

func createPods(ctx context.Context, c client.Client, gangs bool) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	all := samplePods
	if gangs {
		all = slices.Concat(samplePods, gangPods)
		for _, g := range sampleGroups {
			pg := &schedulingv1beta1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: g.name},
				Spec: schedulingv1beta1.PodGroupSpec{
					SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: g.minCount}},
					SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: g.topologyKey}}},
				},
			}
			if err := c.Create(ctx, pg); err != nil {
				return nil, fmt.Errorf("creating PodGroup %s/%s: %w", g.namespace, g.name, err)
			}
		}
	}
	for _, s := range all {
		pod, err := createPod(ctx, c, s)
		if err != nil {
			return nil, err
		}
		out = append(out, pod)
	}
	fmt.Printf("Created %d pods with schedulerName celsched.\n\n", len(out))
	return out, nil
}

// createPod creates a sample pod.
func createPod(ctx context.Context, c client.Client, s samplePod) (*corev1.Pod, error) {
	container := corev1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}}
	if s.cpu != "" {
		container.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(s.cpu)
	}
	if s.gpus != "" {
		container.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(s.gpus)}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name, Labels: s.labels,
			Annotations: map[string]string{"celsched.io/demo": s.note}},
		Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{container}},
	}
	if s.tolerateGPU {
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	if s.group != "" {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &s.group}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: gangTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	if s.node != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: s.node}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: preemptionTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	pod.Spec.PriorityClassName = s.priorityClass
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", s.namespace, s.name, err)
	}
	return pod, nil
}

// waitSettled waits until every pod runs (KWOK starts it once bound) or
// has a PodScheduled condition.
func waitSettled(ctx context.Context, c client.Client, pods []*corev1.Pod) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				return false, err
			}
			if got.Spec.NodeName == "" && scheduled(got) == nil || got.Spec.NodeName != "" && got.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // print what there is
	}
	return err
}

func scheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func printTable(ctx context.Context, c client.Client, pods []*corev1.Pod) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tNODE\tPHASE\tPOLICY (sample)\tPENDING REASON")
	for _, p := range pods {
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, "-", "Deleted", p.Annotations["celsched.io/demo"], "preempted")
			continue
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\n", got.Namespace, got.Name, orNone(got.Spec.NodeName), got.Status.Phase, got.Annotations["celsched.io/demo"], reason(got))
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<pending>"
	}
	return s
}

func reason(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return ""
	}
	if c := scheduled(pod); c != nil {
		return c.Reason + ": " + c.Message
	}
	return ""
}

// watchPlacements prints pods of the celsched scheduler as they are bound,
// reported pending, run, terminate and are deleted, until ctx is done.
func watchPlacements(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	informer := factory.Core().V1().Pods().Informer()
	last := map[string]string{}
	report := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.SchedulerName != "celsched" {
			return
		}
		key := pod.Namespace + "/" + pod.Name
		line := "scheduled on " + pod.Spec.NodeName
		switch {
		case pod.DeletionTimestamp != nil:
			line = "terminating on " + orNone(pod.Spec.NodeName)
		case pod.Status.Phase == corev1.PodRunning:
			line = "running on " + pod.Spec.NodeName
		case pod.Spec.NodeName == "":
			if line = reason(pod); line == "" {
				return
			}
			line = "pending: " + line
		}
		if last[key] != line {
			last[key] = line
			fmt.Printf("%s  %s %s\n", time.Now().Format("15:04:05"), key, line)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { report(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.SchedulerName == "celsched" {
				key := pod.Namespace + "/" + pod.Name
				delete(last, key)
				fmt.Printf("%s  %s deleted\n", time.Now().Format("15:04:05"), key)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// The preemption demo's priority classes.
const (
	demoLowPriority  = "celsched-demo-low"
	demoHighPriority = "celsched-demo-high"
)

// preemptionVictims run on the preemption demo's nodes, at low priority;
// preemptionPods are team-a's pods of high priority, each needing its
// node's room.
var (
	preemptionVictims = []samplePod{
		{namespace: "team-a", name: "report", cpu: "5", node: "node-p1", priorityClass: demoLowPriority, note: "tenant-preemption: team-a's own pod"},
		{namespace: "shop", name: "report", cpu: "5", node: "node-p2", priorityClass: demoLowPriority, note: "tenant-preemption: another tenant's production pod"},
	}
	preemptionPods = []samplePod{
		{namespace: "team-a", name: "urgent-1", cpu: "5", node: "node-p1", priorityClass: demoHighPriority, note: "tenant-preemption: may preempt team-a/report"},
		{namespace: "team-a", name: "urgent-2", cpu: "5", node: "node-p2", priorityClass: demoHighPriority, note: "tenant-preemption: may not preempt shop/report"},
	}
)

// preemptionDemo applies config/samples/preemption's policy (a tenant
// preempts its own pods and batch pods, never another tenant's production
// pods), runs a low-priority pod on each of the demo's nodes, then
// creates a high-priority team-a pod for each node: the first preempts
// team-a's own pod and runs; the second stays pending, and its condition
// says which victim the policy protected and why. It prints the four
// pods.
func preemptionDemo(ctx context.Context, c client.Client, samplesDir string) error {
	policy, err := applyFile(ctx, c, filepath.Join(samplesDir, "preemption", "tenant-preemption.yaml"))
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, []string{policy.Name}); err != nil {
		return err
	}
	for name, value := range map[string]int32{demoLowPriority: 100, demoHighPriority: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if err := c.Create(ctx, pc); err != nil {
			return fmt.Errorf("creating PriorityClass %s: %w", name, err)
		}
	}
	var victims, preemptors []*corev1.Pod
	for _, s := range preemptionVictims {
		pod, err := createPod(ctx, c, s)
		if err != nil {
			return err
		}
		victims = append(victims, pod)
	}
	if err := waitSettled(ctx, c, victims); err != nil {
		return err
	}
	for _, s := range preemptionPods {
		pod, err := createPod(ctx, c, s)
		if err != nil {
			return err
		}
		preemptors = append(preemptors, pod)
	}
	// The first preemptor runs once its victim is deleted (KWOK deletes a
	// terminating pod as a kubelet would); the second stays pending with
	// the victims its rules protected.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		first, second := &corev1.Pod{}, &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(preemptors[0]), first); err != nil {
			return false, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(preemptors[1]), second); err != nil {
			return false, err
		}
		cond := scheduled(second)
		return first.Status.Phase == corev1.PodRunning && cond != nil && strings.Contains(cond.Message, "victims protected"), nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Printf("\nPreemption (SchedulingPolicy %s, config/samples/preemption): team-a's pods of high priority on full nodes.\n", policy.Name)
	return printTable(ctx, c, slices.Concat(victims, preemptors))
}
