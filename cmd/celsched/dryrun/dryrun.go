// Package dryrun evaluates a pod against policies, nodes and the pods on
// them without a cluster, the way the scheduler would: it runs
// kube-scheduler's own framework in-process (the profile's built-in plugins
// and the CEL plugins, PreEnqueue to Score, no binding) for the verdict, and
// the engine for the per-rule detail. `celsched eval`, `explain` and `test`
// are built on it.
package dryrun

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
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
	in.Nodes = defaulted(in.Nodes)
	in.Pods = defaulted(onNodes(in.Pods, in.Nodes))
	in.Namespaces = defaulted(in.Namespaces)
	prof, err := pickProfile(in.Config, pod)
	if err != nil {
		return nil, err
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, err
	}
	compiler := engine.NewCompiler(env)
	compiled := make([]*engine.CompiledPolicy, 0, len(in.Policies))
	for i, p := range in.Policies {
		p = p.DeepCopy()
		if p.UID == "" {
			p.UID = ktypes.UID(fmt.Sprintf("dry-run-%d", i))
		}
		compiled = append(compiled, compiler.Compile(p, engine.CompileOptions{Stored: true}))
	}
	policies := engine.NewSnapshot(compiled...)
	compiled = policies.Policies() // later policies of a name replace earlier ones
	rt := celplugins.NewRuntime(fixed{policies}, engine.NewConverter(env, 0))
	params, err := engine.NewStaticParams(env, in.Params)
	if err != nil {
		return nil, fmt.Errorf("reading the params objects: %w", err)
	}
	rt.Params = params

	namespaces := in.Namespaces
	if !slices.ContainsFunc(namespaces, func(ns *corev1.Namespace) bool { return ns.Name == pod.Namespace }) {
		namespaces = append(slices.Clone(namespaces), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: pod.Namespace, Labels: map[string]string{corev1.LabelMetadataName: pod.Namespace},
		}})
	}
	objects := make([]runtime.Object, 0, len(namespaces)+len(in.Nodes)+len(in.Pods)+len(in.Objects))
	objects = append(objects, in.Objects...)
	for _, ns := range namespaces {
		objects = append(objects, ns)
	}
	for _, n := range in.Nodes {
		objects = append(objects, n)
	}
	for _, p := range in.Pods {
		objects = append(objects, p)
	}
	client := fake.NewClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	snapshot := internalcache.NewSnapshot(in.Pods, in.Nodes)

	pluginRegistry := frameworkplugins.NewInTreeRegistry()
	if err := pluginRegistry.Merge(frameworkruntime.Registry{
		preenqueue.Name: celplugins.Factory(rt, preenqueue.New),
		filter.Name:     celplugins.Factory(rt, filter.New),
		score.Name:      celplugins.Factory(rt, score.New),
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metrics.Register() // the framework records into kube-scheduler's metrics; idempotent
	fw, err := frameworkruntime.NewFramework(ctx, pluginRegistry, prof,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithParallelism(1),
	)
	if err != nil {
		return nil, fmt.Errorf("building the scheduling framework: %w", err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	r := &Report{
		Pod:           pod.Namespace + "/" + pod.Name,
		SchedulerName: pod.Spec.SchedulerName,
		Plugins:       pluginsOf(fw),
	}
	if err := r.schedule(ctx, fw, pod, snapshot); err != nil {
		return nil, err
	}
	if err := r.explain(ctx, rt, compiled, pod, snapshot); err != nil {
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

func defaulted[T runtime.Object](objs []T) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopyObject().(T)
		defaults.Default(out[i])
	}
	return out
}

// pickProfile returns the profile of the pod's scheduler, without the
// plugins a dry run cannot run.
func pickProfile(cfg *schedulerconfig.KubeSchedulerConfiguration, pod *corev1.Pod) (*schedulerconfig.KubeSchedulerProfile, error) {
	if len(cfg.Profiles) == 0 {
		return nil, fmt.Errorf("the scheduler configuration has no profile")
	}
	if pod.Spec.SchedulerName == "" {
		pod.Spec.SchedulerName = cfg.Profiles[0].SchedulerName
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName != pod.Spec.SchedulerName {
			continue
		}
		prof := cfg.Profiles[i].DeepCopy()
		pl := prof.Plugins
		for _, set := range []*schedulerconfig.PluginSet{
			&pl.MultiPoint, &pl.PreEnqueue, &pl.QueueSort, &pl.PreFilter, &pl.Filter, &pl.PostFilter, &pl.PreScore,
			&pl.Score, &pl.Reserve, &pl.Permit, &pl.PreBind, &pl.Bind, &pl.PostBind,
		} {
			set.Enabled = slices.DeleteFunc(set.Enabled, func(p schedulerconfig.Plugin) bool { return notEvaluated[p.Name] != "" })
		}
		return prof, nil
	}
	return nil, fmt.Errorf("the pod's schedulerName %q is not a profile of the scheduler configuration", pod.Spec.SchedulerName)
}

// schedule runs the framework's extension points as a scheduling cycle does.
func (r *Report) schedule(ctx context.Context, fw framework.Framework, pod *corev1.Pod, snapshot *internalcache.Snapshot) error {
	nodeInfos, err := snapshot.NodeInfos().List()
	if err != nil {
		return err
	}
	// In name order, for a stable report (the scheduler's order does not
	// change feasibility or scores).
	nodeInfos = slices.Clone(nodeInfos)
	slices.SortFunc(nodeInfos, func(a, b fwk.NodeInfo) int { return strings.Compare(a.Node().Name, b.Node().Name) })
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
	var feasible []fwk.NodeInfo
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
	for _, s := range scores {
		n := r.Node(s.Name)
		n.Score = s.TotalScore
		n.PluginScores = map[string]int64{}
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
