// Package verdict answers "which nodes may this pod have" the one way
// celsched answers it: kube-scheduler's own framework for the pod's
// profile (every plugin the profile enables, built-in and CEL, PreEnqueue
// to Score, no binding), in-process, over a snapshot of a cluster and a
// set of compiled policies. The dry-run CLI (eval, explain, test, impact,
// analyze) and the rollout gate ask it; the scheduling cycle is the same
// framework with the same plugins.
package verdict

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	k8scorev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/placement"
	"github.com/celsched/celsched/celplugins/preemption"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	"github.com/celsched/celsched/engine"
)

// notEvaluated says why an evaluation outside the scheduler cannot run a
// plugin of a profile, or "" when it can.
func notEvaluated(plugin string) string {
	switch plugin {
	case names.DynamicResources:
		return "needs the cluster's ResourceClaims and ResourceSlices"
	}
	return ""
}

// notEvaluatedPlugins are the plugins notEvaluated names, in order.
func notEvaluatedPlugins() []string { return []string{names.DynamicResources} }

// defaults applies the API server's defaults to core objects (a pod read
// from a file has no requests defaulted from its limits, for instance).
// Built at init, never written after.
var defaults = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(k8scorev1.RegisterDefaults(s))
	return s
}()

// Default applies the API server's defaults to a copy of a pod.
func Default(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	defaults.Default(pod)
	return pod
}

// Cluster is what the scheduler's cache and informers hold: the nodes, the
// namespaces, the pods on the nodes and the objects built-in plugins read.
// It is built once and shared by the Evaluators of several policy sets;
// nothing in it is written after NewCluster.
type Cluster struct {
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	namespaces []*corev1.Namespace
	objects    []runtime.Object
	snapshot   *internalcache.Snapshot
	// nodeInfos are the snapshot's nodes in name order, for a stable
	// report (the scheduler's order does not change feasibility or scores).
	nodeInfos []fwk.NodeInfo
	// podGroups are the PodGroups the pods name (WithPodGroups).
	podGroups []*schedulingv1beta1.PodGroup
}

// NewCluster defaults copies of the objects as the API server would, gives
// those read from files a version, and builds the scheduler's snapshot of
// them. Pods on no node of nodes are ignored, as in the scheduler's cache.
func NewCluster(namespaces []*corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, objects []runtime.Object) *Cluster {
	nodes = versioned(defaulted(nodes))
	return newCluster(versioned(defaulted(namespaces)), nodes, identified(defaulted(OnNodes(pods, nodes))), objects)
}

// NewLiveCluster is NewCluster over objects read from the API server (an
// informer's): they are defaulted and versioned already, and are not
// copied; they must not be written.
func NewLiveCluster(namespaces []*corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, objects []runtime.Object) *Cluster {
	return newCluster(namespaces, nodes, OnNodes(pods, nodes), objects)
}

func newCluster(namespaces []*corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, objects []runtime.Object) *Cluster {
	c := &Cluster{nodes: nodes, namespaces: namespaces, pods: pods, objects: objects}
	c.snapshot = internalcache.NewSnapshot(c.pods, c.nodes)
	infos, _ := c.snapshot.NodeInfos().List() // a snapshot's List does not fail
	c.nodeInfos = slices.Clone(infos)
	slices.SortFunc(c.nodeInfos, func(a, b fwk.NodeInfo) int { return strings.Compare(a.Node().Name, b.Node().Name) })
	return c
}

// WithPodGroups returns the cluster with its PodGroups, which the policies'
// podGroup reads (with where the cluster's pods of each group are); a
// cluster without them gives each group its name alone.
func (c *Cluster) WithPodGroups(groups []*schedulingv1beta1.PodGroup) *Cluster {
	out := *c
	out.podGroups = groups
	return &out
}

// NodeInfos are the scheduler's view of each node, in name order. They
// must not be written.
func (c *Cluster) NodeInfos() []fwk.NodeInfo { return c.nodeInfos }

// NodeInfo returns the scheduler's view of the named node.
func (c *Cluster) NodeInfo(name string) (fwk.NodeInfo, error) {
	return c.snapshot.NodeInfos().Get(name)
}

// WithNamespaces returns namespaces plus, for each pod whose namespace is
// not among them, one with only the kubernetes.io/metadata.name label.
func WithNamespaces(namespaces []*corev1.Namespace, pods ...*corev1.Pod) []*corev1.Namespace {
	out := namespaces
	for _, pod := range pods {
		if !slices.ContainsFunc(out, func(ns *corev1.Namespace) bool { return ns.Name == pod.Namespace }) {
			if len(out) == len(namespaces) {
				out = slices.Clone(namespaces)
			}
			out = append(out, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: pod.Namespace, Labels: map[string]string{corev1.LabelMetadataName: pod.Namespace},
			}})
		}
	}
	return out
}

// Policies are what an Evaluator's CEL plugins read: a fixed snapshot of
// compiled policies, the params objects of the parameterized ones, and the
// converter (which caches the nodes' CEL values and the results remembered
// on them: share the scheduler's to share its work).
type Policies struct {
	Snapshot  *engine.Snapshot
	Params    engine.ParamsResolver
	Converter *engine.Converter
}

// Options configure an Evaluator.
type Options struct {
	// Config is the scheduler configuration; it must be defaulted (as
	// loaded by the manager). Each profile gets a framework.
	Config *schedulerconfig.KubeSchedulerConfiguration
	// Budget, when longer than a profile's, is the CEL plugins' time
	// budget per pod (celplugins.Args). The budget bounds the wall time of
	// a cycle; an evaluation here filters every node one after the other
	// (and several pods at once), where the scheduler samples nodes and
	// filters them in parallel, so the scheduler's budget would cut off
	// rules that the scheduler runs in time.
	Budget time.Duration
}

// Evaluator is kube-scheduler's framework, one per profile of a
// configuration, over a Cluster with a set of policies. It evaluates pods
// concurrently (each evaluation has its own cycle state, as the
// scheduler's parallel filters do); Close releases it. Its frameworks are
// built once: a Simulator points them at another cluster and policies
// (retarget) between evaluations, as the scheduler's frameworks read a
// snapshot it updates.
type Evaluator struct {
	cluster *Cluster
	// groups are the cluster's PodGroups and their placed members, which
	// the policies read as podGroup.
	groups *engine.StaticPodGroups
	rt     *celplugins.Runtime
	// policies are what the CEL plugins read, for the scheduler of
	// PlaceGroups.
	policies Policies
	// source and nodes are what the frameworks read the policies and the
	// cluster's nodes and pods through: set by retarget.
	source *policySource
	nodes  *snapshotLister
	cfg    *schedulerconfig.KubeSchedulerConfiguration
	// frameworks are each profile's, by schedulerName.
	frameworks map[string]framework.Framework
	// plugins are each profile's plugin instances by name, as the
	// framework built them (see ClassVerdict): written in build only.
	plugins map[string]map[string]fwk.Plugin
	cancel  context.CancelFunc
	// budget is Options.Budget: the time budget of Refusals.
	budget time.Duration
	// sweeps counts the evaluations that ran Filter over every node (a
	// whole cycle), for tests: a class of pods should cost one.
	sweeps atomic.Int64
}

// DryRuntime is the CEL plugins' runtime of an evaluation outside the
// scheduler: policies' snapshot, converter and params, and groups (nil:
// a pod's group has its name alone) for podGroup. An evaluation is not
// the scheduler's: it counts in no metric and leaves no error or audited
// rejection for status; and each node gets its own reason (no node is
// left out in PreFilter).
func DryRuntime(policies Policies, groups engine.PodGroupResolver) *celplugins.Runtime {
	return dryRuntimeOver(fixed{policies.Snapshot}, policies, groups)
}

func dryRuntimeOver(source celplugins.Policies, policies Policies, groups engine.PodGroupResolver) *celplugins.Runtime {
	rt := celplugins.NewRuntime(source, policies.Converter)
	rt.Inputs.Params = policies.Params
	rt.Inputs.PodGroups = groups
	rt.Report.Dry = true
	rt.EveryNode = true
	return rt
}

// fixed is an evaluation's policies: they do not change.
type fixed struct{ s *engine.Snapshot }

func (f fixed) Snapshot() *engine.Snapshot { return f.s }

// policySource is an Evaluator's policies: those of its last retarget.
type policySource struct {
	s atomic.Pointer[engine.Snapshot]
}

func (p *policySource) Snapshot() *engine.Snapshot { return p.s.Load() }

// DryRunProfileSuffix ends the profile names of an Evaluator's frameworks
// (the profile "celsched" is "celsched/dry-run" in them), which label the
// metrics kube-scheduler's framework records of every run
// (scheduler_framework_extension_point_duration_seconds,
// scheduler_plugin_evaluation_total). A framework's ProfileName is
// therefore not a schedulerName: the pods evaluated keep their profile's
// (SchedulerName), which the policies' schedulerNames select.
const DryRunProfileSuffix = "/dry-run"

// New builds the frameworks of every profile of opts.Config over the
// cluster, with the CEL plugins reading policies. The built-in plugins'
// informers (namespaces, volumes, services) are a fake clientset's over
// the cluster's namespaces and objects; nodes and pods come from the
// cluster's snapshot, as the scheduler's do from its cache.
func New(ctx context.Context, c *Cluster, policies Policies, opts Options) (*Evaluator, error) {
	objects := make([]runtime.Object, 0, len(c.namespaces)+len(c.objects))
	objects = append(objects, c.objects...)
	for _, ns := range c.namespaces {
		objects = append(objects, ns)
	}
	// NewClientset builds a server-side-apply type converter from the
	// OpenAPI schemas on every call (about a second); no plugin applies
	// anything here.
	client := fake.NewSimpleClientset(objects...) //nolint:staticcheck // see above
	e, err := build(ctx, client, informers.NewSharedInformerFactory(client, 0), policies, opts)
	if err != nil {
		return nil, err
	}
	e.retarget(c, policies)
	return e, nil
}

// build builds the frameworks of every profile of opts.Config, whose
// built-in plugins read factory's informers (started and synced here) and
// write nothing that matters to client; the CEL plugins read policies'
// params and converter. Its cluster and snapshot of policies are set by
// retarget, before any evaluation.
func build(ctx context.Context, client clientset.Interface, factory informers.SharedInformerFactory, policies Policies, opts Options) (*Evaluator, error) {
	if opts.Config == nil || len(opts.Config.Profiles) == 0 {
		return nil, fmt.Errorf("the scheduler configuration has no profile")
	}
	e := &Evaluator{
		source:     &policySource{},
		nodes:      &snapshotLister{},
		policies:   policies,
		cfg:        opts.Config,
		frameworks: map[string]framework.Framework{},
		plugins:    map[string]map[string]fwk.Plugin{},
		budget:     opts.Budget,
	}
	// podGroup reads the cluster's groups (retarget), as the scheduler
	// reads its pod group state.
	e.groups = engine.NewStaticPodGroups(nil, nil)
	e.rt = dryRuntimeOver(e.source, policies, e.groups)

	pluginRegistry := frameworkplugins.NewInTreeRegistry()
	if err := pluginRegistry.Merge(frameworkruntime.Registry{
		preenqueue.Name: celplugins.Factory(e.rt, preenqueue.New),
		filter.Name:     celplugins.Factory(e.rt, filter.New),
		score.Name:      celplugins.Factory(e.rt, score.New),
		placement.Name:  celplugins.Factory(e.rt, placement.New),
		preemption.Name: celplugins.Factory(e.rt, preemption.New),
	}); err != nil {
		return nil, err
	}
	// Each plugin the framework builds is kept (not wrapped: the framework
	// gets it as built), so that a class's evaluation can ask a plugin
	// what the framework would (ClassVerdict.Reschedule).
	var built map[string]fwk.Plugin
	for name, factory := range pluginRegistry {
		pluginRegistry[name] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			pl, err := factory(ctx, args, h)
			if err == nil {
				built[name] = pl
			}
			return pl, err
		}
	}
	ctx, e.cancel = context.WithCancel(ctx)
	metrics.Register() // the framework records into kube-scheduler's metrics; idempotent
	for i := range opts.Config.Profiles {
		prof := profile(&opts.Config.Profiles[i])
		name := prof.SchedulerName
		// kube-scheduler's framework records some of its metrics whatever
		// the caller (the extension points' durations, by profile): in a
		// manager, the rollout gate's evaluations are told apart from the
		// scheduler's by their profile label.
		prof.SchedulerName = name + DryRunProfileSuffix
		if err := withBudget(prof, opts.Budget); err != nil {
			e.cancel()
			return nil, err
		}
		built = map[string]fwk.Plugin{}
		e.plugins[name] = built
		fw, err := frameworkruntime.NewFramework(ctx, pluginRegistry, prof,
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(factory),
			frameworkruntime.WithSnapshotSharedLister(e.nodes),
			// Read by DefaultPreemption and the pod-group plugins when
			// GenericWorkload is on (nil there panicked at New). The pod
			// group manager is an empty scheduler cache: the dry runs do
			// not evaluate pod groups yet.
			frameworkruntime.WithMutableSnapshotLister(e.nodes),
			frameworkruntime.WithPodGroupManager(internalcache.New(ctx, nil,
				utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload),
				utilfeature.DefaultFeatureGate.Enabled(features.CompositePodGroup))),
			frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
			frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
			frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
			frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
			frameworkruntime.WithParallelism(1),
			// A snapshot has no pod nominated to a node (preemption's dry
			// run asks, Evaluator.Preempt).
			frameworkruntime.WithPodNominator(noNominations{}),
		)
		if err != nil {
			e.cancel()
			return nil, fmt.Errorf("building the scheduling framework of profile %s: %w", name, err)
		}
		e.frameworks[name] = fw
	}
	// Starts the informers the plugins asked for that are not running
	// (all of them on a new factory; none on the scheduler's, whose
	// frameworks asked for the same).
	factory.Start(ctx.Done())
	if err := waitForSync(ctx, factory, syncTimeout); err != nil {
		e.cancel()
		return nil, err
	}
	return e, nil
}

// retarget points the Evaluator at a cluster and policies: the
// frameworks' snapshot lister, the CEL plugins' snapshot of policies,
// params and converter, and the pod groups policies read. No evaluation
// may be running (a Simulator's Session holds it).
func (e *Evaluator) retarget(c *Cluster, policies Policies) {
	e.cluster = c
	e.nodes.set(c.snapshot)
	e.source.s.Store(policies.Snapshot)
	e.policies = policies
	e.rt.Inputs.Params, e.rt.Inputs.Converter = policies.Params, policies.Converter
	// podGroup reads the cluster's groups, and its pods as the members
	// placed, as the scheduler reads its pod group state.
	e.groups = engine.NewStaticPodGroups(c.podGroups, c.pods)
	e.rt.Inputs.PodGroups = e.groups
}

// noNominations is the pod nominator of an evaluation: the cluster's
// snapshot nominates no pod to a node, and a dry run nominates none.
type noNominations struct{}

func (noNominations) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominations) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (noNominations) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (noNominations) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }

// syncTimeout bounds waitForSync: the informers list objects held in
// memory, so one that has not synced by then never will, and the dry run
// fails naming it rather than waiting forever.
const syncTimeout = time.Minute

// waitForSync waits for the fake clientset's informers to sync: they list
// objects held in memory, in well under a millisecond, where the
// factory's own wait polls every 100 ms for each informer in turn.
func waitForSync(ctx context.Context, factory informers.SharedInformerFactory, timeout time.Duration) error {
	now := make(chan struct{})
	close(now) // WaitForCacheSync with a closed channel checks once
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		var unsynced []string
		for typ, ok := range factory.WaitForCacheSync(now) {
			if !ok {
				unsynced = append(unsynced, typ.String())
			}
		}
		if len(unsynced) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the built-in plugins' informers: %w", context.Cause(ctx))
		case <-deadline.C:
			slices.Sort(unsynced)
			return fmt.Errorf("waiting for the built-in plugins' informers: not synced within %s: %s", timeout, strings.Join(unsynced, ", "))
		case <-time.After(time.Millisecond):
		}
	}
}

// Close stops the frameworks' informers.
func (e *Evaluator) Close() { e.cancel() }

// Runtime is the CEL plugins' runtime: its Inputs match and convert pods
// as the plugins do, for the engine's per-rule detail.
func (e *Evaluator) Runtime() *celplugins.Runtime { return e.rt }

// Rejection is a plugin's non-success status.
type Rejection struct {
	Plugin  string `json:"plugin"`
	Message string `json:"message"`
	// Resolvable says the status was Unschedulable, not
	// UnschedulableAndUnresolvable: removing pods may change it, and
	// preemption looks at the node (Evaluator.Preempt).
	Resolvable bool `json:"-"`
}

// NodeResult is the framework's verdict on one node.
type NodeResult struct {
	Name       string     `json:"name"`
	Feasible   bool       `json:"feasible"`
	RejectedBy *Rejection `json:"rejectedBy,omitempty"`
	// Score is the node's total (weighted) score, PluginScores each score
	// plugin's weighted share; set for feasible nodes when scored.
	Score        int64            `json:"score,omitempty"`
	PluginScores map[string]int64 `json:"pluginScores,omitempty"`
}

// RankedNode is a feasible node and its total score.
type RankedNode struct {
	Node  string `json:"node"`
	Score int64  `json:"score"`
}

// Result is the framework's verdict on a pod.
type Result struct {
	// PreEnqueue is set when a PreEnqueue plugin holds the pod; nothing
	// else is evaluated then, as in the scheduler.
	PreEnqueue *Rejection `json:"preEnqueue,omitempty"`
	// PreFilter is set when a PreFilter plugin rejects the pod outright.
	PreFilter *Rejection `json:"preFilter,omitempty"`
	// Nodes are every node's verdict, in name order.
	Nodes    []*NodeResult `json:"nodes"`
	Feasible []string      `json:"feasible"`
	// Ranking is the feasible nodes by total score, highest first (ties by
	// name; the scheduler picks among tied nodes at random); empty when
	// not scored.
	Ranking []RankedNode `json:"ranking"`
}

// Node returns the result of the named node, or nil.
func (r *Result) Node(name string) *NodeResult {
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// How much of a cycle an evaluation runs.
type stage int

const (
	// anyNode runs PreEnqueue, PreFilter and Filter until a node is
	// feasible: whether the pod has a node.
	anyNode stage = iota
	// filterOnly runs PreEnqueue, PreFilter and Filter on every node:
	// feasibility.
	filterOnly
	// released runs PreFilter and Filter on every node even when a
	// PreEnqueue plugin holds the pod: the nodes it may have once released.
	released
	// scored runs PreScore and Score on the feasible nodes too.
	scored
	// scoredTotals is scored without each node's PluginScores.
	scoredTotals
	// releasedScored is released, then scored: what the pod would be
	// given once released.
	releasedScored
)

// scores says whether a cycle runs PreScore and Score.
func (s stage) scores() bool { return s == scored || s == scoredTotals || s == releasedScored }

// stopsWhenHeld says whether a cycle stops where a PreEnqueue plugin holds the pod.
func (s stage) stopsWhenHeld() bool { return s != released && s != releasedScored }

// Schedule evaluates a pod as a scheduling cycle would: PreEnqueue to
// Score, no binding. An empty schedulerName means the first profile.
func (e *Evaluator) Schedule(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	return e.run(ctx, pod, nil, scored)
}

// Feasible is Schedule without scoring: which nodes the pod may have.
func (e *Evaluator) Feasible(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	return e.run(ctx, pod, nil, filterOnly)
}

// FeasibleOnceReleased is Feasible for a pod that its PreEnqueue plugins
// release: PreEnqueue is evaluated (Result.PreEnqueue says whether it
// holds the pod), and PreFilter and Filter run whatever it says.
func (e *Evaluator) FeasibleOnceReleased(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	return e.run(ctx, pod, nil, released)
}

// AnyFeasible is Feasible that stops at the first feasible node: whether
// the pod has a node (Result.Feasible holds it), and if not, why not
// (every node's rejection).
func (e *Evaluator) AnyFeasible(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	return e.run(ctx, pod, nil, anyNode)
}

// Reschedule evaluates a pod bound to a node of the cluster as if it were
// evicted and created again: the same pod, unbound, with itself removed
// from its node (as preemption removes a victim: the node's resources and
// the PreFilter state of the plugins that count pods).
func (e *Evaluator) Reschedule(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	again := pod.DeepCopy()
	again.Spec.NodeName = ""
	return e.run(ctx, again, pod, scored)
}

// PreemptionResult is what kube-scheduler's preemption would do for a pod
// that no node fits: DefaultPreemption's own dry run, with the profile's
// victim rules (CELPreemption), acting on nothing.
type PreemptionResult struct {
	// Node is the node the pod would be nominated to, its Victims the
	// pods evicted there (namespace/name); empty when preemption cannot
	// place the pod, and Reason says why.
	Node    string   `json:"node,omitempty"`
	Victims []string `json:"victims,omitempty"`
	// Protected are the candidate victims that a victim rule protected,
	// with the policy and rule.
	Protected []string `json:"protected,omitempty"`
	Reason    string   `json:"reason,omitempty"`
}

// Preempt is Feasible and, when no node fits the pod after PreFilter
// admitted it, what preemption would do (nil otherwise: a node fits, or
// the pod is held or rejected before Filter).
func (e *Evaluator) Preempt(ctx context.Context, pod *corev1.Pod) (*Result, *PreemptionResult, error) {
	pod = Default(pod)
	identified([]*corev1.Pod{pod})
	name, err := e.SchedulerName(pod)
	if err != nil {
		return nil, nil, err
	}
	pod.Spec.SchedulerName = name
	r := &Result{}
	state, err := r.schedule(ctx, e.frameworks[name], pod, e.cluster.nodeInfos, nil, filterOnly, e.groups.Known(pod), nil)
	if err != nil || state == nil || len(r.Feasible) > 0 {
		return r, nil, err
	}
	plugin := e.plugins[name][preemption.Name]
	if plugin == nil {
		plugin = e.plugins[name][names.DefaultPreemption]
	}
	if plugin == nil {
		return r, &PreemptionResult{Reason: "the profile runs no preemption plugin"}, nil
	}
	var potential []fwk.NodeInfo
	for i, n := range r.Nodes {
		if n.RejectedBy != nil && n.RejectedBy.Resolvable {
			potential = append(potential, e.cluster.nodeInfos[i])
		}
	}
	best, protected, why, err := preemption.DryRun(ctx, plugin, state, pod, potential)
	if err != nil {
		return nil, nil, fmt.Errorf("preemption's dry run: %w", err)
	}
	out := &PreemptionResult{Protected: protected, Reason: why}
	if best != nil {
		out.Node = best.Name()
		for _, v := range best.Victims().Pods {
			out.Victims = append(out.Victims, v.Namespace+"/"+v.Name)
		}
		slices.Sort(out.Victims)
	}
	return r, out, nil
}

// SchedulerName returns the profile a pod is evaluated with: its
// schedulerName, or the first profile's when it has none.
func (e *Evaluator) SchedulerName(pod *corev1.Pod) (string, error) {
	p, err := pickProfile(e.cfg, pod.Spec.SchedulerName)
	if err != nil {
		return "", err
	}
	return p.SchedulerName, nil
}

// Framework returns the framework of a pod's profile.
func (e *Evaluator) Framework(pod *corev1.Pod) (framework.Framework, error) {
	name, err := e.SchedulerName(pod)
	if err != nil {
		return nil, err
	}
	return e.frameworks[name], nil
}

// Record is Schedule that records what the CEL plugins decide (rec, a
// celplugins.Record: every filter policy's decision on every node, each
// score policy's raw values on the feasible nodes) in the same run that
// decides. A node that a built-in filter refused before CELFilter saw it
// is given to CELFilter too, so that rec has every policy's decision on
// every node; the node's verdict stays the framework's.
func (e *Evaluator) Record(ctx context.Context, pod *corev1.Pod, rec *celplugins.Record) (*Result, error) {
	return e.recorded(ctx, pod, nil, scored, rec)
}

// RecordReleased is Record for a pod that its PreEnqueue plugins release:
// PreEnqueue is evaluated (Result.PreEnqueue says whether it holds the
// pod), and the rest of the cycle runs whatever it says.
func (e *Evaluator) RecordReleased(ctx context.Context, pod *corev1.Pod, rec *celplugins.Record) (*Result, error) {
	return e.recorded(ctx, pod, nil, releasedScored, rec)
}

// RecordOn is RecordReleased on one node (no node: none, the pod's
// PreEnqueue and match alone); a pod bound to that node is evaluated off
// it, as Reschedule evaluates it.
func (e *Evaluator) RecordOn(ctx context.Context, pod *corev1.Pod, node string, rec *celplugins.Record) (*Result, error) {
	var nodes []fwk.NodeInfo
	var evicted *corev1.Pod
	if node != "" {
		info, err := e.cluster.snapshot.NodeInfos().Get(node)
		if err != nil {
			return nil, fmt.Errorf("no node %s", node)
		}
		nodes = []fwk.NodeInfo{info}
		if pod.Spec.NodeName == node {
			evicted = pod
		}
	}
	again := pod.DeepCopy()
	again.Spec.NodeName = ""
	return e.runOn(ctx, again, evicted, nodes, released, rec)
}

func (e *Evaluator) run(ctx context.Context, pod, evicted *corev1.Pod, until stage) (*Result, error) {
	return e.recorded(ctx, pod, evicted, until, nil)
}

func (e *Evaluator) recorded(ctx context.Context, pod, evicted *corev1.Pod, until stage, rec *celplugins.Record) (*Result, error) {
	return e.runOn(ctx, pod, evicted, e.cluster.nodeInfos, until, rec)
}

func (e *Evaluator) runOn(ctx context.Context, pod, evicted *corev1.Pod, nodeInfos []fwk.NodeInfo, until stage, rec *celplugins.Record) (*Result, error) {
	pod = Default(pod)
	name, err := e.SchedulerName(pod)
	if err != nil {
		return nil, err
	}
	fw := e.frameworks[name]
	pod.Spec.SchedulerName = name
	r := &Result{}
	e.sweeps.Add(1)
	var rc *recording
	if rec != nil {
		rc = &recording{rec: rec}
		rc.filter, _ = e.plugins[name][filter.Name].(fwk.FilterPlugin)
	}
	if _, err := r.schedule(ctx, fw, pod, nodeInfos, evicted, until, e.groups.Known(pod), rc); err != nil {
		return nil, err
	}
	return r, nil
}

// recording is a run that records what the CEL plugins decide: the
// Record, and the profile's CELFilter (nil: it has none), which is given
// the nodes another filter refused first.
type recording struct {
	rec    *celplugins.Record
	filter fwk.FilterPlugin
}

// schedule runs the framework's extension points as a scheduling cycle
// does, on the nodes in the order given. evicted, when set, is the pod as
// bound: it is removed from its node first. It returns the cycle's state
// once PreFilter admitted the pod (nil when held or rejected before).
// groupKnown says the pod's PodGroup is in the cluster (StaticPodGroups.Known).
// rc, when set, records what the CEL plugins decide (Evaluator.Record).
func (r *Result) schedule(ctx context.Context, fw framework.Framework, pod *corev1.Pod, nodeInfos []fwk.NodeInfo, evicted *corev1.Pod, until stage, groupKnown bool, rc *recording) (fwk.CycleState, error) {
	for _, pl := range fw.PreEnqueuePlugins() {
		if leftOutAlone(pl.Name(), groupKnown) {
			continue
		}
		if st := pl.PreEnqueue(ctx, pod); !st.IsSuccess() {
			// Held: nothing else runs, as in the scheduler.
			r.PreEnqueue = &Rejection{Plugin: pl.Name(), Message: st.Message()}
			if until.stopsWhenHeld() {
				r.unevaluated(nodeInfos, nil)
				return nil, nil
			}
			break
		}
	}
	state := framework.NewCycleState()
	if rc != nil {
		state.Write(celplugins.RecordKey, rc.rec)
	}
	result, st, _ := fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() && !st.IsSkip() {
		r.PreFilter = &Rejection{Plugin: st.Plugin(), Message: st.Message()}
		// Every node is refused by the PreFilter plugin, as the scheduler's
		// diagnosis records it (the status of the nodes not evaluated).
		r.unevaluated(nodeInfos, r.PreFilter)
		rc.completeAll(ctx, state, pod, nodeInfos)
		return nil, nil
	}
	if evicted != nil {
		var err error
		if nodeInfos, err = evict(ctx, fw, state, pod, evicted, nodeInfos); err != nil {
			return nil, err
		}
	}
	var feasible []fwk.NodeInfo
	var feasibleResults []*NodeResult // in the order of feasible
	// The nodes' results, in one allocation when every node is
	// evaluated; else (anyNode stops at the first feasible one) in slabs
	// that double, each a node's at a time.
	var results []NodeResult
	if until != anyNode {
		results = make([]NodeResult, len(nodeInfos))
		r.Nodes = make([]*NodeResult, 0, len(nodeInfos))
	}
	// The nodes refused for the same reason share one Rejection: a
	// cycle's thousands of refused nodes have a handful of reasons.
	rejections := rejections{}
	for i, ni := range nodeInfos {
		if len(results) == 0 {
			results = make([]NodeResult, min(max(8, 2*len(r.Nodes)), len(nodeInfos)-i))
		}
		n := &results[0]
		results = results[1:]
		filterNode(ctx, fw, state, pod, result, ni, n, rejections)
		rc.complete(ctx, state, pod, ni)
		r.Nodes = append(r.Nodes, n)
		if !n.Feasible {
			continue
		}
		feasible = append(feasible, ni)
		feasibleResults = append(feasibleResults, n)
		r.Feasible = append(r.Feasible, n.Name)
		if until == anyNode {
			return state, nil
		}
	}
	if len(feasible) == 0 || !until.scores() {
		return state, nil
	}
	if st := fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() && !st.IsSkip() {
		return nil, fmt.Errorf("running the prescore plugins: %w", st.AsError())
	}
	scores, st := fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return nil, fmt.Errorf("running the score plugins: %w", st.AsError())
	}
	for i, s := range scores { // in the order of feasible
		n := feasibleResults[i]
		n.Score = s.TotalScore
		if until == scored {
			n.PluginScores = make(map[string]int64, len(s.Scores))
			for _, ps := range s.Scores {
				n.PluginScores[ps.Name] = ps.Score
			}
		}
		r.Ranking = append(r.Ranking, RankedNode{Node: s.Name, Score: s.TotalScore})
	}
	// Node names are distinct: the order is total, stable or not.
	slices.SortFunc(r.Ranking, func(a, b RankedNode) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), strings.Compare(a.Node, b.Node))
	})
	return state, nil
}

// filterNode is the framework's verdict on one node: PreFilter's choice
// of nodes, then the Filter plugins.
// It fills n; its Rejection is one of seen's (nil: a new one).
func filterNode(ctx context.Context, fw framework.Framework, state fwk.CycleState, pod *corev1.Pod, result *fwk.PreFilterResult, ni fwk.NodeInfo, n *NodeResult, seen rejections) {
	n.Name = ni.Node().Name
	if !result.AllNodes() && !result.NodeNames.Has(n.Name) {
		n.RejectedBy = seen.get(Rejection{Plugin: "PreFilter", Message: "not among the nodes PreFilter selected"})
		return
	}
	if st := fw.RunFilterPlugins(ctx, state, pod, ni); !st.IsSuccess() {
		n.RejectedBy = seen.get(Rejection{Plugin: st.Plugin(), Message: st.Message(), Resolvable: st.Code() == fwk.Unschedulable})
		return
	}
	n.Feasible = true
}

// complete gives CELFilter a node the run did not have it evaluate (a
// built-in filter refused it first, or PreFilter left it out), so that
// the Record holds every policy's decision on every node. Its status is
// not the node's: the framework's verdict stands.
func (rc *recording) complete(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) {
	if rc == nil || rc.filter == nil || rc.rec.Filters(ni.Node().Name) != nil {
		return
	}
	if c := celplugins.ReadCycle(state); c == nil || len(c.Filters) == 0 {
		return
	}
	rc.filter.Filter(ctx, state, pod, ni)
}

// completeAll gives CELFilter every node of a cycle that PreFilter
// rejected (CELFilter's own PreFilter, which records the rejection, or
// another's first, before CELFilter's ran: it is run then), so that the
// Record still holds every policy's decision on every node.
func (rc *recording) completeAll(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfos []fwk.NodeInfo) {
	if rc == nil || rc.filter == nil {
		return
	}
	if !rc.rec.Matched() {
		pre, ok := rc.filter.(fwk.PreFilterPlugin)
		if !ok {
			return
		}
		pre.PreFilter(ctx, state, pod, nodeInfos)
	}
	for _, ni := range nodeInfos {
		rc.complete(ctx, state, pod, ni)
	}
}

// rejections are the distinct Rejections of one cycle's nodes, shared by
// the nodes refused for the same reason. Written by the cycle's one
// goroutine; they must not be written once given out.
type rejections map[Rejection]*Rejection

// get returns the Rejection equal to r, added if new (a new one each
// time when seen is nil).
func (seen rejections) get(r Rejection) *Rejection {
	if p, ok := seen[r]; ok {
		return p
	}
	p := &r
	if seen != nil {
		seen[r] = p
	}
	return p
}

// unevaluated lists the nodes, none evaluated: the pod was held (rejected
// nil: no node refused it) or rejected before Filter (rejected: every
// node is refused by it).
func (r *Result) unevaluated(nodeInfos []fwk.NodeInfo, rejected *Rejection) {
	results := make([]NodeResult, len(nodeInfos))
	r.Nodes = make([]*NodeResult, len(nodeInfos))
	for i, ni := range nodeInfos {
		results[i].Name, results[i].RejectedBy = ni.Node().Name, rejected
		r.Nodes[i] = &results[i]
	}
}

// evict removes a bound pod from a copy of its node, as preemption removes
// a victim: from the node's NodeInfo, then from the PreFilter state of the
// plugins that count pods (inter-pod affinity, topology spread). It returns
// the nodes with the copy in place of the node. The PreScore plugins still
// see the pod where it is (they read the snapshot), as they do during
// preemption.
func evict(ctx context.Context, fw framework.Framework, state fwk.CycleState, pod, evicted *corev1.Pod, nodeInfos []fwk.NodeInfo) ([]fwk.NodeInfo, error) {
	i := slices.IndexFunc(nodeInfos, func(ni fwk.NodeInfo) bool { return ni.Node().Name == evicted.Spec.NodeName })
	if i < 0 {
		return nil, fmt.Errorf("pod %s/%s is bound to %s, which is not a node of the cluster", evicted.Namespace, evicted.Name, evicted.Spec.NodeName)
	}
	ni, victim, err := withoutPod(ctx, nodeInfos[i], evicted)
	if err != nil {
		return nil, err
	}
	if st := fw.RunPreFilterExtensionRemovePod(ctx, state, pod, victim, ni); !st.IsSuccess() {
		return nil, fmt.Errorf("removing pod %s/%s from the PreFilter state: %w", evicted.Namespace, evicted.Name, st.AsError())
	}
	out := slices.Clone(nodeInfos)
	out[i] = ni
	return out, nil
}

// Plugins are the plugins evaluated, per extension point.
type Plugins struct {
	PreEnqueue   []string `json:"preEnqueue"`
	PreFilter    []string `json:"preFilter"`
	Filter       []string `json:"filter"`
	PreScore     []string `json:"preScore"`
	Score        []string `json:"score"`
	NotEvaluated []string `json:"notEvaluated,omitempty"`
}

// leftOutAlone says whether a PreEnqueue plugin is left out when a pod
// is evaluated alone: GangScheduling, for a pod whose PodGroup is in the
// cluster (groupKnown, StaticPodGroups.Known). Its hold waits for the
// rest of the pod's group to reach the queue: a pod evaluated alone
// always meets it, so it says nothing of this pod. Where the group goes,
// all or nothing, is Evaluator.PlaceGroups' answer. (A pod whose
// PodGroup does not exist is held until it does, as in the scheduler.)
func leftOutAlone(plugin string, groupKnown bool) bool {
	return plugin == names.GangScheduling && groupKnown
}

// leftOutAloneReason is why leftOutAlone left a plugin out, for Plugins.
const leftOutAloneReason = "PreEnqueue: a member of a known PodGroup evaluated alone; its group is placed as a group"

// PluginsFor lists the plugins the evaluation of a pod runs, per
// extension point, and those it does not run: pluginsOf the pod's
// profile, less the PreEnqueue plugins a pod evaluated alone is not held
// by (leftOutAlone).
func (e *Evaluator) PluginsFor(pod *corev1.Pod) (Plugins, error) {
	fw, err := e.Framework(pod)
	if err != nil {
		return Plugins{}, err
	}
	p := pluginsOf(fw)
	known := e.groups.Known(pod)
	p.PreEnqueue = slices.DeleteFunc(p.PreEnqueue, func(name string) bool {
		if leftOutAlone(name, known) {
			p.NotEvaluated = append(p.NotEvaluated, name+" ("+leftOutAloneReason+")")
			return true
		}
		return false
	})
	return p, nil
}

// pluginsOf lists the plugins a framework evaluates, per extension point,
// and those an evaluation cannot run.
func pluginsOf(fw framework.Framework) Plugins {
	list := fw.ListPlugins()
	enabled := func(set schedulerconfig.PluginSet) []string {
		out := make([]string, len(set.Enabled))
		for i, pl := range set.Enabled {
			out[i] = pl.Name
		}
		return out
	}
	p := Plugins{
		PreEnqueue: enabled(list.PreEnqueue),
		PreFilter:  enabled(list.PreFilter),
		Filter:     enabled(list.Filter),
		PreScore:   enabled(list.PreScore),
		Score:      enabled(list.Score),
	}
	for _, name := range notEvaluatedPlugins() {
		p.NotEvaluated = append(p.NotEvaluated, name+" ("+notEvaluated(name)+")")
	}
	return p
}

// onNodes returns the pods bound to one of the nodes.
func OnNodes(pods []*corev1.Pod, nodes []*corev1.Node) []*corev1.Pod {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return !known[p.Spec.NodeName] })
}

// versioned gives the objects without a resourceVersion, read from files,
// a version and a UID: they do not change during an evaluation, and the
// engine caches the CEL values of nodes and namespaces per version only.
func versioned[T metav1.Object](objs []T) []T {
	for _, o := range objs {
		if o.GetResourceVersion() == "" {
			o.SetResourceVersion("1")
		}
		if o.GetUID() == "" {
			o.SetUID(ktypes.UID("dry-run-" + o.GetName()))
		}
	}
	return objs
}

// identified gives the pods read from files without a UID one, unique
// by namespace and name: kube-scheduler's preemption keys pods by UID.
func identified(pods []*corev1.Pod) []*corev1.Pod {
	for _, p := range pods {
		if p.UID == "" {
			p.UID = ktypes.UID("dry-run-" + p.Namespace + "-" + p.Name)
		}
	}
	return pods
}

func defaulted[T runtime.Object](objs []T) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopyObject().(T)
		defaults.Default(out[i])
	}
	return out
}

// pickProfile returns the profile named (the first when name is empty).
func pickProfile(cfg *schedulerconfig.KubeSchedulerConfiguration, name string) (*schedulerconfig.KubeSchedulerProfile, error) {
	if len(cfg.Profiles) == 0 {
		return nil, fmt.Errorf("the scheduler configuration has no profile")
	}
	if name == "" {
		return &cfg.Profiles[0], nil
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name {
			return &cfg.Profiles[i], nil
		}
	}
	return nil, fmt.Errorf("the pod's schedulerName %q is not a profile of the scheduler configuration", name)
}

// profile returns a copy of a profile without the plugins an evaluation
// cannot run.
func profile(p *schedulerconfig.KubeSchedulerProfile) *schedulerconfig.KubeSchedulerProfile {
	prof := p.DeepCopy()
	pl := prof.Plugins
	for _, set := range []*schedulerconfig.PluginSet{
		&pl.MultiPoint, &pl.PreEnqueue, &pl.QueueSort, &pl.PreFilter, &pl.Filter, &pl.PostFilter, &pl.PreScore,
		&pl.Score, &pl.Reserve, &pl.Permit, &pl.PreBind, &pl.Bind, &pl.PostBind,
	} {
		set.Enabled = slices.DeleteFunc(set.Enabled, func(p schedulerconfig.Plugin) bool { return notEvaluated(p.Name) != "" })
	}
	return prof
}

// withBudget sets the CEL plugins' time budget in a profile, when longer
// than the profile's own.
func withBudget(prof *schedulerconfig.KubeSchedulerProfile, budget time.Duration) error {
	if budget <= 0 {
		return nil
	}
	i := slices.IndexFunc(prof.PluginConfig, func(pc schedulerconfig.PluginConfig) bool { return pc.Name == filter.Name })
	if i < 0 {
		prof.PluginConfig = append(prof.PluginConfig, schedulerconfig.PluginConfig{Name: filter.Name})
		i = len(prof.PluginConfig) - 1
	}
	args := celplugins.Args{}
	if prof.PluginConfig[i].Args != nil {
		var err error
		if args, err = celplugins.DecodeArgs(prof.PluginConfig[i].Args); err != nil {
			return fmt.Errorf("profile %s: %w", prof.SchedulerName, err)
		}
	}
	args.EvaluationBudget.Duration = max(args.EvaluationBudget.Duration, budget)
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	prof.PluginConfig[i].Args = &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
	return nil
}
