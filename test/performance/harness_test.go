package performance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/filter"
	celplacement "github.com/celsched/celsched/celplugins/placement"
	celpreemption "github.com/celsched/celsched/celplugins/preemption"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/performance/perfdata"
)

// Files the harness reads, relative to this package (go test runs in it).
const (
	configFile = "performance-config.yaml"
	crdFile    = "../../config/crd/bases/scheduling.celsched.io_schedulingpolicies.yaml"
	policyDir  = "testdata"
)

// placementsFile, when set, is where each workload appends, as one JSON
// line, where its pods landed (placement), before its control plane stops:
// what TestPerfSmoke checks.
var placementsFile = flag.String("celsched-placements", "", "append a JSON line per workload with where its pods landed (for TestPerfSmoke)")

// perfOptions are the harness options of every run: a fresh celsched
// runtime per workload, and the CRD and the workload's policies installed
// and compiled before its first pod.
func perfOptions() []benchmark.SchedulerPerfOption {
	return []benchmark.SchedulerPerfOption{
		benchmark.WithPreRunFn(func(_ ktesting.TContext, w *benchmark.Workload) (func(), error) {
			pods, err := w.GetParam("measurePods")
			if err != nil {
				return nil, fmt.Errorf("workload %s: %w", w.Name, err)
			}
			current.Store(&workloadRuntime{measurePods: pods})
			return nil, nil
		}),
		benchmark.WithPrepareFn(prepare),
	}
}

// outOfTreeRegistry registers the five CEL plugins, and the Go plugin of
// NodeOnly10Plugin's native profile. scheduler_perf starts a new scheduler
// per workload with the same registry, so the CEL plugins find their
// runtime in current, which the pre-run hook replaces per workload.
func outOfTreeRegistry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		preenqueue.Name:      pluginFactory(preenqueue.New),
		filter.Name:          pluginFactory(filter.New),
		score.Name:           pluginFactory(score.New),
		celplacement.Name:    pluginFactory(celplacement.New),
		celpreemption.Name:   pluginFactory(celpreemption.New),
		nodeOnly10PluginName: newNodeOnly10Plugin,
	}
}

// current is the runtime of the workload being run; scheduler_perf runs
// workloads one after another.
var current atomic.Pointer[workloadRuntime]

func pluginFactory[T fwk.Plugin](newPlugin func(context.Context, runtime.Object, fwk.Handle, *celplugins.Runtime) (T, error)) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		w := current.Load()
		if w == nil {
			return nil, errors.New("no celsched runtime: the pre-run hook of perfOptions did not run")
		}
		rt, err := w.runtime(ctx, h)
		if err != nil {
			return nil, err
		}
		return newPlugin(ctx, obj, h, rt)
	}
}

// workloadRuntime is the celsched runtime of one workload's scheduler,
// built by the first CEL plugin that scheduler_perf constructs.
type workloadRuntime struct {
	// measurePods is the number of pods of each measured phase.
	measurePods int

	once     sync.Once
	rt       *celplugins.Runtime
	err      error
	registry atomic.Pointer[engine.Registry]
	// pods is the scheduler's pod informer, which the phase meter rides on.
	pods atomic.Pointer[cache.SharedIndexInformer]
}

func (w *workloadRuntime) runtime(ctx context.Context, h fwk.Handle) (*celplugins.Runtime, error) {
	w.once.Do(func() { w.rt, w.err = w.start(ctx, h) })
	return w.rt, w.err
}

// start builds the runtime and its policy feed, as the manager does
// (cmd/manager/app), except for one thing: scheduler_perf creates the
// scheduler without a dynamic informer factory (util.StartScheduler passes
// nil), so kube-scheduler watches no SchedulingPolicy and there is no
// informer of its own for the feed to ride on. The feed gets an informer
// of its own here instead, started and synced before this returns. Plugins
// are constructed inside scheduler.New, before the scheduling loop starts,
// so no pod is scheduled before the policies stored at that point are
// compiled. The CRD must exist for the informer to sync, and plugin
// construction comes before the harness's prepare hook, so this installs it.
func (w *workloadRuntime) start(ctx context.Context, h fwk.Handle) (*celplugins.Runtime, error) {
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	rt := celplugins.NewRuntime(registry, engine.NewConverter(env, engine.DefaultMaxCachedNodes))

	cfg := h.KubeConfig()
	if err := installCRD(ctx, cfg); err != nil {
		return nil, err
	}
	dynClient, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the policy informer's client: %w", err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dynClient, 0)
	feed := &celplugins.PolicyFeed{Registry: registry, Logger: klog.FromContext(ctx).WithName("policy-feed")}
	reg, err := factory.ForResource(celplugins.PolicyGVR).Informer().AddEventHandler(feed.Handler())
	if err != nil {
		return nil, fmt.Errorf("watching SchedulingPolicies: %w", err)
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown() // waits for the informer's goroutines: scheduler_perf checks for leaks
	}()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return nil, fmt.Errorf("waiting for the SchedulingPolicy informer to sync: %w", context.Cause(ctx))
	}
	w.registry.Store(registry)
	pods := h.SharedInformerFactory().Core().V1().Pods().Informer()
	w.pods.Store(&pods)
	return rt, nil
}

// installCRD creates the SchedulingPolicy CRD of config/crd/bases, unless it
// exists, and waits until SchedulingPolicies can be listed.
func installCRD(ctx context.Context, cfg *rest.Config) error {
	data, err := os.ReadFile(crdFile)
	if err != nil {
		return fmt.Errorf("reading the CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return fmt.Errorf("decoding %s: %w", crdFile, err)
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the CRD client: %w", err)
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the SchedulingPolicy CRD: %w", err)
	}
	dynClient, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = dynClient.Resource(celplugins.PolicyGVR).List(ctx, metav1.ListOptions{Limit: 1})
		return lastErr == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for the SchedulingPolicy CRD to be served: %w (last error: %v)", err, lastErr)
	}
	return nil
}

// prepare runs after the workload's control plane and scheduler started and
// before its first op: it installs the CRD and creates the SchedulingPolicies
// of testdata/<test case>.yaml, and waits until the celsched registry holds
// every one of them, compiled without error; so the first pod meets them all.
func prepare(tCtx ktesting.TContext) error {
	testCase, workload, err := names(tCtx.Name())
	if err != nil {
		return err
	}
	policies, err := readPolicies(testCase)
	if err != nil {
		return err
	}
	if err := installCRD(tCtx, tCtx.RESTConfig()); err != nil {
		return err
	}
	created, err := createPolicies(tCtx, policies)
	if err != nil {
		return err
	}
	if *placementsFile != "" {
		// Cleanups run last-in first-out: this one after the workload and
		// before the control plane stops.
		tCtx.Cleanup(func() { recordPlacement(tCtx, testCase, workload, len(created)) })
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		// Pod groups exist only with the gate (scheduler_perf sets the
		// workload's gates before this hook).
		tCtx.Cleanup(func() { checkPodGroups(tCtx) })
	}
	w := current.Load()
	if err := meterPhases(tCtx, w, testCase, workload); err != nil {
		return err
	}
	if w == nil || w.registry.Load() == nil {
		tCtx.Logf("No profile runs the CEL plugins: %d SchedulingPolicies stored, none in force", len(created))
		return nil
	}
	if err := waitCompiled(tCtx, w.registry.Load(), created); err != nil {
		return fmt.Errorf("%s: %w", testCase, err)
	}
	tCtx.Logf("%d SchedulingPolicies of %s compiled", len(created), testCase)
	return nil
}

// createPolicies creates policies, and returns the UID of each by name.
func createPolicies(tCtx ktesting.TContext, policies []*unstructured.Unstructured) (map[string]types.UID, error) {
	created := map[string]types.UID{}
	for _, p := range policies {
		obj, err := tCtx.Dynamic().Resource(celplugins.PolicyGVR).Create(tCtx, p, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			return nil, fmt.Errorf("creating SchedulingPolicy %s: %w", p.GetName(), err)
		}
		created[obj.GetName()] = obj.GetUID()
	}
	return created, nil
}

// waitCompiled waits until registry holds the created version of every
// policy, and fails if one of them did not compile.
func waitCompiled(tCtx ktesting.TContext, registry *engine.Registry, created map[string]types.UID) error {
	if err := wait.PollUntilContextTimeout(tCtx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return holdsAll(registry.Snapshot(), created), nil
	}); err != nil {
		return fmt.Errorf("waiting for the registry to compile the %d SchedulingPolicies: %w", len(created), err)
	}
	var errs []error
	for name := range created {
		if p := registry.Snapshot().Get(name); len(p.Errors) > 0 {
			errs = append(errs, fmt.Errorf("SchedulingPolicy %s: %w", name, p.Errors.ToAggregate()))
		}
	}
	return errors.Join(errs...)
}

// meterPhases measures the cost of the workload's measured phases
// (phaseMeter) on the scheduler's pod informer, and appends them to
// phasesFile when the workload is done, before its control plane stops. A
// phase that started and did not end fails the workload.
func meterPhases(tCtx ktesting.TContext, w *workloadRuntime, testCase, workload string) error {
	if *phasesFile == "" {
		if *profilesDir != "" {
			return errors.New("-celsched-cpuprofiles needs -celsched-phases: the phases' meter takes the profiles")
		}
		return nil
	}
	if w == nil || w.pods.Load() == nil {
		return errors.New("measuring the phases: no profile runs the CEL plugins, so the harness has no pod informer of the scheduler's")
	}
	return startMeter(tCtx, *w.pods.Load(), newPhaseMeter(testCase, workload, w.measurePods, *profilesDir))
}

// startMeter measures meter's phases on informer, and appends them to
// phasesFile when the workload is done.
func startMeter(tCtx ktesting.TContext, informer cache.SharedIndexInformer, meter *phaseMeter) error {
	if *profilesDir != "" {
		if err := os.MkdirAll(*profilesDir, 0o755); err != nil {
			return fmt.Errorf("measuring the phases: %w", err)
		}
	}
	reg, err := informer.AddEventHandler(meter.handler())
	if err != nil {
		return fmt.Errorf("measuring the phases: %w", err)
	}
	// Cleanups run last-in first-out: this one after the workload and
	// before the control plane stops.
	tCtx.Cleanup(func() {
		if err := informer.RemoveEventHandler(reg); err != nil {
			tCtx.Errorf("measuring the phases: %v", err)
		}
		phases, err := meter.finish()
		if err != nil {
			tCtx.Errorf("measuring the phases: %v", err)
		}
		for _, p := range phases {
			if err := perfdata.AppendPhase(*phasesFile, p); err != nil {
				tCtx.Errorf("recording the phases: %v", err)
				return
			}
		}
	})
	return nil
}

// holdsAll says whether s holds the created version of every policy.
func holdsAll(s *engine.Snapshot, created map[string]types.UID) bool {
	for name, uid := range created {
		if p := s.Get(name); p == nil || p.UID != uid {
			return false
		}
	}
	return true
}

// names splits a workload's test name, BenchmarkPerfScheduling/<test
// case>/<workload>, into the test case and the workload.
func names(testName string) (testCase, workload string, err error) {
	parts := strings.Split(testName, "/")
	if len(parts) < 3 {
		return "", "", fmt.Errorf("test name %q is not BenchmarkPerfScheduling/<test case>/<workload>", testName)
	}
	return parts[len(parts)-2], parts[len(parts)-1], nil
}

// readPolicies reads the SchedulingPolicies of a test case,
// testdata/<test case>.yaml.
func readPolicies(testCase string) ([]*unstructured.Unstructured, error) {
	return readPolicyFile(filepath.Join(policyDir, testCase+".yaml"))
}

// readPolicyFile reads the objects of a multi-document YAML file.
func readPolicyFile(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the workload's policies: %w", err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if obj == nil {
			continue // an empty document
		}
		u := &unstructured.Unstructured{Object: obj}
		if gvk := u.GroupVersionKind(); gvk.GroupVersion() != celplugins.PolicyGVR.GroupVersion() || gvk.Kind != "SchedulingPolicy" {
			return nil, fmt.Errorf("%s: %s %s is not a SchedulingPolicy", path, gvk, u.GetName())
		}
		objs = append(objs, u)
	}
}

// placement is where a workload's pods landed, per namespace, read from the
// API server when the workload is done.
type placement struct {
	TestCase string `json:"testCase"`
	Workload string `json:"workload"`
	// Policies is the number of SchedulingPolicies stored.
	Policies   int                       `json:"policies"`
	Namespaces map[string]namespacePlace `json:"namespaces"`
}

type namespacePlace struct {
	Pods      int `json:"pods"`
	Scheduled int `json:"scheduled"`
	// OnBlockedNodes counts the scheduled pods whose node has a label
	// with the value "blocked" (templates/node.yaml), which the policies
	// of NodeOnly10 and Mixed100 keep the celsched profile's pods off.
	OnBlockedNodes int `json:"onBlockedNodes"`
	// Tiers counts the scheduled pods per value of their node's tier
	// label (templates/node-racks.yaml), for the workloads whose nodes
	// have one: Gangs keeps its native and celsched pods on gpu nodes.
	Tiers map[string]int `json:"tiers,omitempty"`
	groupPlace
}

// groupPlace is where the pod groups of a namespace's pods landed: how
// many groups, how many were placed in part (some members bound, some
// not: what all-or-nothing forbids) and how many across more than one
// domain of their topology constraint (what the constraint forbids).
type groupPlace struct {
	PodGroups int `json:"podGroups,omitempty"`
	Partial   int `json:"podGroupsPartial,omitempty"`
	Split     int `json:"podGroupsSplit,omitempty"`
}

// tierLabel is the tier label of templates/node-racks.yaml.
const tierLabel = "perf.celsched.io/tier"

// recordPlacement appends the workload's placement to placementsFile. A
// failure fails the workload.
func recordPlacement(tCtx ktesting.TContext, testCase, workload string, policies int) {
	if err := appendPlacement(tCtx, testCase, workload, policies); err != nil {
		tCtx.Errorf("recording where the pods landed: %v", err)
	}
}

func appendPlacement(tCtx ktesting.TContext, testCase, workload string, policies int) error {
	nodes, pods, err := listNodesAndPods(tCtx)
	if err != nil {
		return err
	}
	nodeLabels := labelsByNode(nodes)
	blocked := map[string]bool{}
	for name, labels := range nodeLabels {
		for _, v := range labels {
			if v == "blocked" {
				blocked[name] = true
			}
		}
	}
	groups := map[string]groupPlace{}
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		if groups, err = podGroupPlaces(tCtx, nodeLabels, pods); err != nil {
			return err
		}
	}
	p := placement{TestCase: testCase, Workload: workload, Policies: policies, Namespaces: map[string]namespacePlace{}}
	for i := range pods.Items {
		pod := &pods.Items[i]
		ns := p.Namespaces[pod.Namespace]
		ns.Pods++
		if pod.Spec.NodeName != "" {
			ns.Scheduled++
			if blocked[pod.Spec.NodeName] {
				ns.OnBlockedNodes++
			}
			if tier, ok := nodeLabels[pod.Spec.NodeName][tierLabel]; ok {
				if ns.Tiers == nil {
					ns.Tiers = map[string]int{}
				}
				ns.Tiers[tier]++
			}
		}
		ns.groupPlace = groups[pod.Namespace]
		p.Namespaces[pod.Namespace] = ns
	}
	line, err := json.Marshal(p)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*placementsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// listNodesAndPods lists every node and pod of the workload's cluster.
func listNodesAndPods(tCtx ktesting.TContext) (*corev1.NodeList, *corev1.PodList, error) {
	nodes, err := tCtx.Client().CoreV1().Nodes().List(tCtx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := tCtx.Client().CoreV1().Pods(corev1.NamespaceAll).List(tCtx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return nodes, pods, nil
}

// labelsByNode maps the name of each node to its labels.
func labelsByNode(nodes *corev1.NodeList) map[string]map[string]string {
	labels := make(map[string]map[string]string, len(nodes.Items))
	for i := range nodes.Items {
		labels[nodes.Items[i].Name] = nodes.Items[i].Labels
	}
	return labels
}

// checkPodGroups fails the workload if a pod group's bound members are in
// more than one domain of its topology constraint, or only some of its
// members are bound, when the workload is done: scheduler_perf itself
// only waits for every pod to be bound, wherever.
func checkPodGroups(tCtx ktesting.TContext) {
	nodes, pods, err := listNodesAndPods(tCtx)
	if err != nil {
		tCtx.Errorf("checking the pod groups: %v", err)
		return
	}
	places, err := podGroupPlaces(tCtx, labelsByNode(nodes), pods)
	if err != nil {
		tCtx.Errorf("checking the pod groups: %v", err)
		return
	}
	for ns, g := range places {
		if g.Partial > 0 || g.Split > 0 {
			tCtx.Errorf("namespace %s: of %d pod groups, %d placed in part and %d across more than one domain of their topology constraint", ns, g.PodGroups, g.Partial, g.Split)
		}
	}
}

// podGroupPlaces returns, per namespace, where the groups of its pods
// (spec.schedulingGroup.podGroupName) landed: a group is partial when
// some of its pods are bound and some not, split when its bound pods are
// on nodes of more than one value of its PodGroup's topology constraint
// key (a node without the key counts as the value "").
func podGroupPlaces(tCtx ktesting.TContext, nodeLabels map[string]map[string]string, pods *corev1.PodList) (map[string]groupPlace, error) {
	podGroups, err := tCtx.Client().SchedulingV1beta1().PodGroups(corev1.NamespaceAll).List(tCtx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pod groups: %w", err)
	}
	return groupPlaces(podGroups, nodeLabels, pods), nil
}

// groupPlaces is podGroupPlaces on listed objects.
func groupPlaces(podGroups *schedulingv1beta1.PodGroupList, nodeLabels map[string]map[string]string, pods *corev1.PodList) map[string]groupPlace {
	topologyKey := map[types.NamespacedName]string{}
	for _, pg := range podGroups.Items {
		if c := pg.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
			topologyKey[types.NamespacedName{Namespace: pg.Namespace, Name: pg.Name}] = c.Topology[0].Key
		}
	}
	type members struct {
		bound, unbound int
		domains        map[string]bool
	}
	groups := map[types.NamespacedName]*members{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		sg := pod.Spec.SchedulingGroup
		if sg == nil || sg.PodGroupName == nil {
			continue
		}
		key := types.NamespacedName{Namespace: pod.Namespace, Name: *sg.PodGroupName}
		m := groups[key]
		if m == nil {
			m = &members{domains: map[string]bool{}}
			groups[key] = m
		}
		if pod.Spec.NodeName == "" {
			m.unbound++
			continue
		}
		m.bound++
		if k, ok := topologyKey[key]; ok {
			m.domains[nodeLabels[pod.Spec.NodeName][k]] = true
		}
	}
	places := map[string]groupPlace{}
	for key, m := range groups {
		g := places[key.Namespace]
		g.PodGroups++
		if m.bound > 0 && m.unbound > 0 {
			g.Partial++
		}
		if len(m.domains) > 1 {
			g.Split++
		}
		places[key.Namespace] = g
	}
	return places
}
