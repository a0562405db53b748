// Package dryrun evaluates a pod against policies, nodes and the pods on
// them without a cluster, the way the scheduler would: it runs
// kube-scheduler's own framework in-process (the profile's built-in plugins
// and the CEL plugins, PreEnqueue to Score, no binding) for the verdict, and
// the engine for the per-rule detail. `celsched eval`, `explain` and `test`
// are built on it.
package dryrun

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	k8scorev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	"github.com/celsched/celsched/engine"
)

// Input is what a dry run evaluates.
type Input struct {
	// Policies are the SchedulingPolicies in force.
	Policies []*schedv1alpha1.SchedulingPolicy
	// Pod is the pod to place. An empty schedulerName means the first
	// profile of Config.
	Pod *corev1.Pod
	// Namespaces should hold the pod's namespace; when it is missing, one
	// with only the kubernetes.io/metadata.name label is assumed.
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	// Pods are the pods already on the nodes (spec.nodeName set). Pods
	// on no node of Nodes are ignored, as in the scheduler's cache.
	Pods []*corev1.Pod
	// Objects are other objects built-in plugins read: the pod's
	// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes.
	Objects []runtime.Object
	// Config is the scheduler configuration; it must be defaulted (as
	// loaded by the manager).
	Config *schedulerconfig.KubeSchedulerConfiguration
	// Why adds, to every preEnqueue rule and filter that is false or
	// fails, the values of its sub-expressions (RuleResult.Why).
	Why bool
	// Params are the params objects of parameterized policies (ConfigMaps,
	// custom resources). A kind none of whose objects has a namespace is
	// taken as cluster-scoped.
	Params []*unstructured.Unstructured
}

// notEvaluated are plugins of the profile that a dry run cannot run, and why.
var notEvaluated = map[string]string{
	names.DynamicResources: "needs the cluster's ResourceClaims and ResourceSlices",
}

// defaults applies the API server's defaults to core objects (a pod read
// from a file has no requests defaulted from its limits, for instance).
var defaults = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(k8scorev1.RegisterDefaults(s))
	return s
}()

// Run evaluates the pod.
func Run(ctx context.Context, in Input) (*Report, error) {
	pod := in.Pod.DeepCopy()
	defaults.Default(pod)
	if _, err := pickProfile(in.Config, pod); err != nil {
		return nil, err
	}
	cluster := NewCluster(WithNamespaces(in.Namespaces, pod), in.Nodes, in.Pods, in.Objects)
	s, err := cluster.Scheduler(ctx, in.Policies, in.Params, in.Config)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r, err := s.Schedule(ctx, pod)
	if err != nil {
		return nil, err
	}
	var why *engine.Why
	if in.Why {
		why = s.why
	}
	if err := r.explain(ctx, s.rt, s.compiled, pod, cluster.snapshot.NodeInfos().Get, why); err != nil {
		return nil, err
	}
	return r, nil
}

// Cluster is what the scheduler's cache and informers hold: the nodes, the
// namespaces, the pods on the nodes and the objects built-in plugins read.
// It is built once and shared by the Schedulers of several policy sets.
type Cluster struct {
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	namespaces []*corev1.Namespace
	objects    []runtime.Object
	snapshot   *internalcache.Snapshot
	// nodeInfos are the snapshot's nodes in name order, for a stable
	// report (the scheduler's order does not change feasibility or scores).
	nodeInfos []fwk.NodeInfo
	// EvaluationBudget, when longer than the profile's, is the CEL
	// plugins' time budget per pod (celplugins.Args) in the Schedulers
	// built afterwards. The budget bounds the wall time of a cycle; a dry
	// run filters every node one after the other (and several pods at
	// once), where the scheduler samples nodes and filters them in
	// parallel, so the scheduler's budget would cut off rules that the
	// scheduler runs in time.
	EvaluationBudget time.Duration
}

// NewCluster defaults the objects as the API server would and builds the
// scheduler's snapshot of them. Pods on no node of nodes are ignored, as in
// the scheduler's cache.
func NewCluster(namespaces []*corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, objects []runtime.Object) *Cluster {
	c := &Cluster{nodes: versioned(defaulted(nodes)), namespaces: versioned(defaulted(namespaces)), objects: objects}
	c.pods = defaulted(onNodes(pods, c.nodes))
	c.snapshot = internalcache.NewSnapshot(c.pods, c.nodes)
	infos, _ := c.snapshot.NodeInfos().List() // a snapshot's List does not fail
	c.nodeInfos = slices.Clone(infos)
	slices.SortFunc(c.nodeInfos, func(a, b fwk.NodeInfo) int { return strings.Compare(a.Node().Name, b.Node().Name) })
	return c
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

// Scheduler is kube-scheduler's framework, one per profile of a
// configuration, over a Cluster with a set of policies. It evaluates pods
// concurrently (each evaluation has its own cycle state, as the
// scheduler's parallel filters do); Close releases it.
type Scheduler struct {
	cluster    *Cluster
	rt         *celplugins.Runtime
	compiled   []*engine.CompiledPolicy
	cfg        *schedulerconfig.KubeSchedulerConfiguration
	frameworks map[string]framework.Framework
	cancel     context.CancelFunc
	why        *engine.Why
}

// Scheduler builds the frameworks of every profile of cfg with the
// policies and the params objects of the parameterized ones (ConfigMaps,
// custom resources: a kind none of whose objects has a namespace is taken
// as cluster-scoped); cfg must be defaulted (as loaded by the manager).
func (c *Cluster) Scheduler(ctx context.Context, policies []*schedv1alpha1.SchedulingPolicy, params []*unstructured.Unstructured, cfg *schedulerconfig.KubeSchedulerConfiguration) (*Scheduler, error) {
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, err
	}
	compiler := engine.NewCompiler(env)
	compiled := make([]*engine.CompiledPolicy, 0, len(policies))
	for i, p := range policies {
		p = p.DeepCopy()
		if p.UID == "" {
			p.UID = ktypes.UID(fmt.Sprintf("dry-run-%d", i))
		}
		compiled = append(compiled, compiler.Compile(p, engine.CompileOptions{Stored: true, Explain: true}))
	}
	snap := engine.NewSnapshot(compiled...)
	s := &Scheduler{
		cluster:    c,
		rt:         celplugins.NewRuntime(fixed{snap}, engine.NewConverter(env, 0)),
		compiled:   snap.Policies(), // later policies of a name replace earlier ones
		cfg:        cfg,
		frameworks: map[string]framework.Framework{},
		why:        &engine.Why{},
	}
	static, err := engine.NewStaticParams(env, params)
	if err != nil {
		return nil, fmt.Errorf("reading the params objects: %w", err)
	}
	s.rt.Inputs.Params = static
	// Every node converted now, outside any pod's time budget: a dry run
	// evaluates a pod on every node one after the other, where the
	// scheduler converts the nodes it samples, in parallel, and keeps them.
	// Without this, the first pod of a large cluster would spend its 100
	// ms budget converting nodes, and rules the scheduler runs in time
	// would be reported cut off.
	for _, n := range c.nodes {
		if _, err := s.rt.Inputs.Converter.NodeValue(n); err != nil {
			return nil, fmt.Errorf("converting node %s: %w", n.Name, err)
		}
	}
	objects := make([]runtime.Object, 0, len(c.namespaces)+len(c.nodes)+len(c.pods)+len(c.objects))
	objects = append(objects, c.objects...)
	for _, ns := range c.namespaces {
		objects = append(objects, ns)
	}
	for _, n := range c.nodes {
		objects = append(objects, n)
	}
	for _, p := range c.pods {
		objects = append(objects, p)
	}
	client := fake.NewClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)

	pluginRegistry := frameworkplugins.NewInTreeRegistry()
	if err := pluginRegistry.Merge(frameworkruntime.Registry{
		preenqueue.Name: celplugins.Factory(s.rt, preenqueue.New),
		filter.Name:     celplugins.Factory(s.rt, filter.New),
		score.Name:      celplugins.Factory(s.rt, score.New),
	}); err != nil {
		return nil, err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	metrics.Register() // the framework records into kube-scheduler's metrics; idempotent
	for i := range cfg.Profiles {
		prof := profile(&cfg.Profiles[i])
		if err := withBudget(prof, c.EvaluationBudget); err != nil {
			s.cancel()
			return nil, err
		}
		fw, err := frameworkruntime.NewFramework(ctx, pluginRegistry, prof,
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(factory),
			frameworkruntime.WithSnapshotSharedLister(c.snapshot),
			frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
			frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
			frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
			frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
			frameworkruntime.WithParallelism(1),
		)
		if err != nil {
			s.cancel()
			return nil, fmt.Errorf("building the scheduling framework of profile %s: %w", prof.SchedulerName, err)
		}
		s.frameworks[prof.SchedulerName] = fw
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return s, nil
}

// Close stops the frameworks' informers.
func (s *Scheduler) Close() { s.cancel() }

// Policies are the scheduler's compiled policies, in name order.
func (s *Scheduler) Policies() []*engine.CompiledPolicy { return s.compiled }

// Applies names the policies that apply to the pod (engine's Match: they
// match, or apply with an error), in name order.
func (s *Scheduler) Applies(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	in, err := s.rt.Inputs.PodInput(pod)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range s.compiled {
		if m := p.Match(ctx, in); m.Matches || m.Decision.Verdict != engine.Pass || len(m.Decision.Ignored) > 0 {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

// ParamsRead names the params objects that the policy of that name, if
// parameterized, reads for the pod (its paramRef resolved in paramRef's
// namespace or the pod's).
func (s *Scheduler) ParamsRead(pod *corev1.Pod, policy string) ([]ParamsKey, error) {
	i := slices.IndexFunc(s.compiled, func(p *engine.CompiledPolicy) bool { return p.Name == policy })
	if i < 0 || s.compiled[i].ParamSpec() == nil {
		return nil, nil
	}
	found, err := s.rt.Inputs.Params.Resolve(s.compiled[i].ParamSpec(), pod)
	if err != nil {
		return nil, fmt.Errorf("params of SchedulingPolicy %s: %w", policy, err)
	}
	out := make([]ParamsKey, 0, len(found))
	for _, f := range found {
		out = append(out, ParamsKey{Group: f.Kind.Group, Kind: f.Kind.Kind, Namespace: f.Namespace, Name: f.Name})
	}
	return out, nil
}

// Schedule evaluates a pod as a scheduling cycle would: the verdict of
// the framework (PreEnqueue to Score, no binding), without the engine's
// per-rule detail. An empty schedulerName means the first profile.
func (s *Scheduler) Schedule(ctx context.Context, pod *corev1.Pod) (*Report, error) {
	return s.run(ctx, pod, nil)
}

// Reschedule evaluates a pod bound to a node of the cluster as if it were
// evicted and created again: the same pod, unbound, with itself removed
// from its node (as preemption removes a victim: the node's resources and
// the PreFilter state of the plugins that count pods).
func (s *Scheduler) Reschedule(ctx context.Context, pod *corev1.Pod) (*Report, error) {
	again := pod.DeepCopy()
	again.Spec.NodeName = ""
	return s.run(ctx, again, pod)
}

// Why explains what holds a pod, or refuses it a node: of the policies
// that apply to it, the preEnqueue rules and (with a node) the filters on
// that node that are false or fail, with the values of their
// sub-expressions (engine.Why). A pod bound to the node is explained as
// Reschedule evaluates it: off its node. Policies with nothing false are
// left out.
func (s *Scheduler) Why(ctx context.Context, pod *corev1.Pod, node string) ([]*PolicyResult, error) {
	pod = pod.DeepCopy()
	defaults.Default(pod)
	r := &Report{}
	var ni fwk.NodeInfo
	if node != "" {
		i := slices.IndexFunc(s.cluster.nodeInfos, func(ni fwk.NodeInfo) bool { return ni.Node().Name == node })
		if i < 0 {
			return nil, fmt.Errorf("no node %s", node)
		}
		ni = s.cluster.nodeInfos[i]
		if pod.Spec.NodeName == node {
			ni = ni.Snapshot()
			if err := ni.RemovePod(klog.FromContext(ctx), pod); err != nil {
				return nil, fmt.Errorf("removing pod %s/%s from its node: %w", pod.Namespace, pod.Name, err)
			}
		}
		r.Nodes = []*NodeResult{{Name: node}}
	}
	pod.Spec.NodeName = ""
	if err := r.explain(ctx, s.rt, s.compiled, pod, func(string) (fwk.NodeInfo, error) { return ni, nil }, s.why); err != nil {
		return nil, err
	}
	var out []*PolicyResult
	for _, p := range r.Policies {
		p.PreEnqueue = falseRules(p.PreEnqueue)
		if rules := falseRules(p.Filters[node]); len(rules) > 0 {
			p.Filters = map[string][]RuleResult{node: rules}
		} else {
			p.Filters = nil
		}
		p.Scores = nil
		if len(p.PreEnqueue) > 0 || len(p.Filters) > 0 || p.CompileError != "" || p.MatchError != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

func falseRules(rules []RuleResult) []RuleResult {
	return slices.DeleteFunc(rules, func(r RuleResult) bool { return r.Passed })
}

func (s *Scheduler) run(ctx context.Context, pod, evicted *corev1.Pod) (*Report, error) {
	pod = pod.DeepCopy()
	defaults.Default(pod)
	p, err := pickProfile(s.cfg, pod)
	if err != nil {
		return nil, err
	}
	fw := s.frameworks[p.SchedulerName]
	r := &Report{
		Pod:           pod.Namespace + "/" + pod.Name,
		SchedulerName: pod.Spec.SchedulerName,
		Plugins:       pluginsOf(fw),
	}
	if err := r.schedule(ctx, fw, pod, s.cluster.nodeInfos, evicted); err != nil {
		return nil, err
	}
	return r, nil
}

// fixed is a dry run's policies: they do not change.
type fixed struct{ s *engine.Snapshot }

func (f fixed) Snapshot() *engine.Snapshot { return f.s }

// onNodes returns the pods bound to one of the nodes.
func onNodes(pods []*corev1.Pod, nodes []*corev1.Node) []*corev1.Pod {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return !known[p.Spec.NodeName] })
}

// versioned gives the objects (copies) without a resourceVersion, read from
// files, a version and a UID: they do not change during a dry run, and the
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

func defaulted[T runtime.Object](objs []T) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopyObject().(T)
		defaults.Default(out[i])
	}
	return out
}

// pickProfile returns the profile of the pod's scheduler; an empty
// schedulerName is set to the first profile's.
func pickProfile(cfg *schedulerconfig.KubeSchedulerConfiguration, pod *corev1.Pod) (*schedulerconfig.KubeSchedulerProfile, error) {
	if len(cfg.Profiles) == 0 {
		return nil, fmt.Errorf("the scheduler configuration has no profile")
	}
	if pod.Spec.SchedulerName == "" {
		pod.Spec.SchedulerName = cfg.Profiles[0].SchedulerName
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == pod.Spec.SchedulerName {
			return &cfg.Profiles[i], nil
		}
	}
	return nil, fmt.Errorf("the pod's schedulerName %q is not a profile of the scheduler configuration", pod.Spec.SchedulerName)
}

// profile returns a copy of a profile without the plugins a dry run cannot
// run.
func profile(p *schedulerconfig.KubeSchedulerProfile) *schedulerconfig.KubeSchedulerProfile {
	prof := p.DeepCopy()
	pl := prof.Plugins
	for _, set := range []*schedulerconfig.PluginSet{
		&pl.MultiPoint, &pl.PreEnqueue, &pl.QueueSort, &pl.PreFilter, &pl.Filter, &pl.PostFilter, &pl.PreScore,
		&pl.Score, &pl.Reserve, &pl.Permit, &pl.PreBind, &pl.Bind, &pl.PostBind,
	} {
		set.Enabled = slices.DeleteFunc(set.Enabled, func(p schedulerconfig.Plugin) bool { return notEvaluated[p.Name] != "" })
	}
	return prof
}

// schedule runs the framework's extension points as a scheduling cycle
// does, on the nodes in the order given. evicted, when set, is the pod as
// bound: it is removed from its node first.
func (r *Report) schedule(ctx context.Context, fw framework.Framework, pod *corev1.Pod, nodeInfos []fwk.NodeInfo, evicted *corev1.Pod) error {
	for _, pl := range fw.PreEnqueuePlugins() {
		if st := pl.PreEnqueue(ctx, pod); !st.IsSuccess() {
			// Held: nothing else runs, as in the scheduler.
			r.PreEnqueue = &Rejection{Plugin: pl.Name(), Message: st.Message()}
			for _, ni := range nodeInfos {
				r.Nodes = append(r.Nodes, &NodeResult{Name: ni.Node().Name})
			}
			return nil
		}
	}
	state := framework.NewCycleState()
	result, st, _ := fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() && !st.IsSkip() {
		r.PreFilter = &Rejection{Plugin: st.Plugin(), Message: st.Message()}
		for _, ni := range nodeInfos {
			r.Nodes = append(r.Nodes, &NodeResult{Name: ni.Node().Name})
		}
		return nil
	}
	if evicted != nil {
		var err error
		if nodeInfos, err = evict(ctx, fw, state, pod, evicted, nodeInfos); err != nil {
			return err
		}
	}
	var feasible []fwk.NodeInfo
	var feasibleResults []*NodeResult // in the order of feasible
	for _, ni := range nodeInfos {
		n := &NodeResult{Name: ni.Node().Name}
		r.Nodes = append(r.Nodes, n)
		if !result.AllNodes() && !result.NodeNames.Has(n.Name) {
			n.RejectedBy = &Rejection{Plugin: "PreFilter", Message: "not among the nodes PreFilter selected"}
			continue
		}
		if st := fw.RunFilterPlugins(ctx, state, pod, ni); !st.IsSuccess() {
			n.RejectedBy = &Rejection{Plugin: st.Plugin(), Message: st.Message()}
			continue
		}
		n.Feasible = true
		feasible = append(feasible, ni)
		feasibleResults = append(feasibleResults, n)
		r.Feasible = append(r.Feasible, n.Name)
	}
	if len(feasible) == 0 {
		return nil
	}
	if st := fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() && !st.IsSkip() {
		return fmt.Errorf("running the prescore plugins: %w", st.AsError())
	}
	scores, st := fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return fmt.Errorf("running the score plugins: %w", st.AsError())
	}
	for i, s := range scores { // in the order of feasible
		n := feasibleResults[i]
		n.Score = s.TotalScore
		n.PluginScores = make(map[string]int64, len(s.Scores))
		for _, ps := range s.Scores {
			n.PluginScores[ps.Name] = ps.Score
		}
		r.Ranking = append(r.Ranking, RankedNode{Node: s.Name, Score: s.TotalScore})
	}
	sort.SliceStable(r.Ranking, func(i, j int) bool {
		if r.Ranking[i].Score != r.Ranking[j].Score {
			return r.Ranking[i].Score > r.Ranking[j].Score
		}
		return r.Ranking[i].Node < r.Ranking[j].Node
	})
	return nil
}

// pluginsOf lists the plugins a dry run evaluates, per extension point,
// and those it cannot.
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
	for name, why := range notEvaluated {
		p.NotEvaluated = append(p.NotEvaluated, name+" ("+why+")")
	}
	sort.Strings(p.NotEvaluated)
	return p
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
	ni := nodeInfos[i].Snapshot()
	var victim fwk.PodInfo
	for _, p := range ni.GetPods() {
		if p.GetPod().UID == evicted.UID {
			victim = p
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("pod %s/%s is not on node %s of the scheduler's snapshot", evicted.Namespace, evicted.Name, evicted.Spec.NodeName)
	}
	if err := ni.RemovePod(klog.FromContext(ctx), victim.GetPod()); err != nil {
		return nil, fmt.Errorf("removing pod %s/%s from its node: %w", evicted.Namespace, evicted.Name, err)
	}
	if st := fw.RunPreFilterExtensionRemovePod(ctx, state, pod, victim, ni); !st.IsSuccess() {
		return nil, fmt.Errorf("removing pod %s/%s from the PreFilter state: %w", evicted.Namespace, evicted.Name, st.AsError())
	}
	out := slices.Clone(nodeInfos)
	out[i] = ni
	return out, nil
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
