// Package dryrun evaluates a pod against policies, nodes and the pods on
// them without a cluster, the way the scheduler would: the verdict is the
// one evaluator's (simulate/verdict: kube-scheduler's own framework
// in-process, the profile's built-in plugins and the CEL plugins,
// PreEnqueue to Score, no binding), and the engine adds the per-rule
// detail. `celsched eval`, `explain`, `test`, `impact` and `analyze` are
// built on it.
package dryrun

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
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
	// on no node of Nodes are ignored, as in the scheduler's cache, except
	// the pending members of Pod's pod group.
	Pods []*corev1.Pod
	// PodGroups are the PodGroups of the cluster, which policies read as
	// podGroup: when Pod belongs to one (spec.schedulingGroup) and
	// GenericWorkload is on, kube-scheduler also places the group, all or
	// nothing, and Report.Group says where.
	PodGroups []*schedulingv1beta1.PodGroup
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

// Run evaluates the pod.
func Run(ctx context.Context, in Input) (*Report, error) {
	pod := verdict.Default(in.Pod)
	cluster := NewCluster(WithNamespaces(in.Namespaces, pod), in.Nodes, in.Pods, in.Objects).WithPodGroups(in.PodGroups)
	s, err := cluster.Scheduler(ctx, in.Policies, in.Params, in.Config)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if _, err := s.SchedulerName(pod); err != nil {
		return nil, err
	}
	var why *engine.Why
	if in.Why {
		why = s.why
	}
	rec := &celplugins.Record{Rules: true, Why: why}
	r, err := s.report(ctx, pod, func(ctx context.Context, pod *corev1.Pod) (*verdict.Result, error) {
		return s.Record(ctx, pod, rec)
	})
	if err != nil {
		return nil, err
	}
	if r.PreEnqueue != nil {
		// Held: nothing else ran, as in the scheduler. The policies'
		// detail is of the pod once released.
		rec = &celplugins.Record{Rules: true, Why: why}
		if _, err := s.RecordReleased(ctx, pod, rec); err != nil {
			return nil, err
		}
	}
	if len(r.Feasible) == 0 && r.PreEnqueue == nil && r.PreFilter == nil {
		if _, r.Preemption, err = s.Preempt(ctx, pod); err != nil {
			return nil, err
		}
	}
	if r.Group, err = placeGroup(ctx, s, pod, in.PodGroups, in.Pods); err != nil {
		return nil, err
	}
	if err := r.explain(ctx, s.Runtime(), s.compiled, pod, rec, why); err != nil {
		return nil, err
	}
	return r, nil
}

// placeGroup places the pod's group, with its pending members among pods
// (SplitGroups), with kube-scheduler (verdict.Evaluator.PlaceGroups); nil
// when the pod is in no group of podGroups, or GenericWorkload is off.
func placeGroup(ctx context.Context, s *Scheduler, pod *corev1.Pod, podGroups []*schedulingv1beta1.PodGroup, pods []*corev1.Pod) (*verdict.GroupResult, error) {
	group := engine.GroupName(pod)
	if group == "" || !GroupsOn() {
		return nil, nil
	}
	i := slices.IndexFunc(podGroups, func(pg *schedulingv1beta1.PodGroup) bool {
		return pg.Namespace == pod.Namespace && pg.Name == group
	})
	if i < 0 {
		return nil, nil
	}
	others := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return p.Namespace == pod.Namespace && p.Name == pod.Name })
	pending, _ := SplitGroups(podGroups[i:i+1], append([]*corev1.Pod{pod}, others...))
	if len(pending.Groups) == 0 { // the pod is bound: no member is pending
		return nil, nil
	}
	results, err := s.PlaceGroups(ctx, pending.Groups)
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// Cluster is the cluster a dry run evaluates (verdict.Cluster), shared by
// the Schedulers of several policy sets.
type Cluster struct {
	*verdict.Cluster
	// EvaluationBudget, when longer than the profile's, is the CEL
	// plugins' time budget per pod (verdict.Options.Budget) in the
	// Schedulers built afterwards.
	EvaluationBudget time.Duration
	// env and converter are the CEL environment and the nodes' CEL values
	// of every Scheduler of the cluster, built by the first: the nodes
	// are converted once, and the results remembered on them (per
	// expression: the environment numbers them apart) serve every policy
	// set, as the scheduler's converter does.
	env       *engine.Environment
	converter *engine.Converter
}

// NewCluster defaults the objects as the API server would and builds the
// scheduler's snapshot of them. Pods on no node of nodes are ignored, as in
// the scheduler's cache.
func NewCluster(namespaces []*corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, objects []runtime.Object) *Cluster {
	return &Cluster{Cluster: verdict.NewCluster(namespaces, nodes, pods, objects)}
}

// WithPodGroups gives the cluster its PodGroups (verdict.Cluster's): call
// it before the first Scheduler.
func (c *Cluster) WithPodGroups(groups []*schedulingv1beta1.PodGroup) *Cluster {
	c.Cluster = c.Cluster.WithPodGroups(groups)
	return c
}

// WithNamespaces returns namespaces plus, for each pod whose namespace is
// not among them, one with only the kubernetes.io/metadata.name label.
func WithNamespaces(namespaces []*corev1.Namespace, pods ...*corev1.Pod) []*corev1.Namespace {
	return verdict.WithNamespaces(namespaces, pods...)
}

// Scheduler is the one evaluator (verdict.Evaluator) over a Cluster with
// a set of policies compiled from files, with the engine's detail on top.
// It evaluates pods concurrently; Close releases it.
type Scheduler struct {
	*verdict.Evaluator
	cluster  *Cluster
	compiled []*engine.CompiledPolicy
	why      *engine.Why
}

// Scheduler compiles the policies and builds the evaluator of every
// profile of cfg with them and the params objects of the parameterized
// ones (ConfigMaps, custom resources: a kind none of whose objects has a
// namespace is taken as cluster-scoped); cfg must be defaulted (as loaded
// by the manager).
func (c *Cluster) Scheduler(ctx context.Context, policies []*schedv1alpha1.SchedulingPolicy, params []*unstructured.Unstructured, cfg *schedulerconfig.KubeSchedulerConfiguration) (*Scheduler, error) {
	env, converter, err := c.environment()
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
	static, err := engine.NewStaticParams(env, params)
	if err != nil {
		return nil, fmt.Errorf("reading the params objects: %w", err)
	}
	e, err := verdict.New(ctx, c.Cluster, verdict.Policies{Snapshot: snap, Params: static, Converter: converter},
		verdict.Options{Config: cfg, Budget: c.EvaluationBudget})
	if err != nil {
		return nil, err
	}
	return &Scheduler{
		Evaluator: e,
		cluster:   c,
		compiled:  snap.Policies(), // later policies of a name replace earlier ones
		why:       &engine.Why{},
	}, nil
}

// environment returns the cluster's CEL environment and converter, built
// and every node converted on the first call.
func (c *Cluster) environment() (*engine.Environment, *engine.Converter, error) {
	if c.env != nil {
		return c.env, c.converter, nil
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, nil, err
	}
	converter := engine.NewConverter(env, 0).SmallMemo()
	// Every node converted now, outside any pod's time budget: a dry run
	// evaluates a pod on every node one after the other, where the
	// scheduler converts the nodes it samples, in parallel, and keeps them.
	// Without this, the first pod of a large cluster would spend its 100
	// ms budget converting nodes, and rules the scheduler runs in time
	// would be reported cut off.
	for _, ni := range c.NodeInfos() {
		if _, err := converter.NodeValue(ni.Node()); err != nil {
			return nil, nil, fmt.Errorf("converting node %s: %w", ni.Node().Name, err)
		}
	}
	c.env, c.converter = env, converter
	return env, converter, nil
}

// Policies are the scheduler's compiled policies, in name order.
func (s *Scheduler) Policies() []*engine.CompiledPolicy { return s.compiled }

// Applies names the policies that apply to the pod, in name order: those
// the CEL plugins' match keeps for it (engine's Match: they match, or
// apply with an error), and those skipped under failurePolicy Ignore.
func (s *Scheduler) Applies(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	m, err := s.Runtime().Inputs.Match(ctx, verdict.Default(pod))
	if err != nil {
		return nil, err
	}
	return m.Applies(), nil
}

// ParamsRead names the params objects that the policy of that name, if
// parameterized, reads for the pod (its paramRef resolved in paramRef's
// namespace or the pod's).
func (s *Scheduler) ParamsRead(pod *corev1.Pod, policy string) ([]ParamsKey, error) {
	i := slices.IndexFunc(s.compiled, func(p *engine.CompiledPolicy) bool { return p.Name == policy })
	if i < 0 || s.compiled[i].ParamSpec() == nil {
		return nil, nil
	}
	found, err := s.Runtime().Inputs.Params.Resolve(s.compiled[i].ParamSpec(), pod)
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
	return s.report(ctx, pod, s.Evaluator.Schedule)
}

// Reschedule evaluates a pod bound to a node of the cluster as if it were
// evicted and created again (verdict.Evaluator.Reschedule).
func (s *Scheduler) Reschedule(ctx context.Context, pod *corev1.Pod) (*Report, error) {
	return s.report(ctx, pod, s.Evaluator.Reschedule)
}

func (s *Scheduler) report(ctx context.Context, pod *corev1.Pod, evaluate func(context.Context, *corev1.Pod) (*verdict.Result, error)) (*Report, error) {
	plugins, err := s.PluginsFor(pod)
	if err != nil {
		return nil, err
	}
	name, err := s.SchedulerName(pod)
	if err != nil {
		return nil, err
	}
	res, err := evaluate(ctx, pod)
	if err != nil {
		return nil, err
	}
	return &Report{Pod: pod.Namespace + "/" + pod.Name, SchedulerName: name, Plugins: plugins, Result: *res}, nil
}

// Why explains what holds a pod, or refuses it a node: of the policies
// that apply to it, the preEnqueue rules and (with a node) the filters on
// that node that are false or fail, with the values of their
// sub-expressions (engine.Why). A pod bound to the node is explained as
// Reschedule evaluates it: off its node. Policies with nothing false are
// left out.
func (s *Scheduler) Why(ctx context.Context, pod *corev1.Pod, node string) ([]*PolicyResult, error) {
	pod = verdict.Default(pod)
	rec := &celplugins.Record{Rules: true, Why: s.why}
	res, err := s.RecordOn(ctx, pod, node, rec)
	if err != nil {
		return nil, err
	}
	r := &Report{Result: *res}
	pod.Spec.NodeName = ""
	if err := r.explain(ctx, s.Runtime(), s.compiled, pod, rec, s.why); err != nil {
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
