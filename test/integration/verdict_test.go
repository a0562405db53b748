package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	schedulerconfigfile "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/simulate/analyze"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/impact"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/builder"
)

// The generated cluster of TestVerdictIsOne: small in `make test`,
// larger with `make test-verdict` (-args -verdict.nodes=60 -verdict.pods=200),
// another cluster with -verdict.seed.
var (
	verdictSeed  = flag.Uint64("verdict.seed", 1, "TestVerdictIsOne: the seed of the generated cluster")
	verdictNodes = flag.Int("verdict.nodes", 12, "TestVerdictIsOne: how many nodes to generate")
	verdictPods  = flag.Int("verdict.pods", 30, "TestVerdictIsOne: how many pods to generate")
)

// verdictRunLabel marks the namespaces of one run of TestVerdictIsOne;
// its policies select only them.
const verdictRunLabel = "celsched.io/verdict-run"

// verdictRuns numbers the runs in one process (-count), so that each has
// namespaces of its own (envtest never finishes deleting a namespace).
var verdictRuns atomic.Int32

// TestVerdictIsOne is the differential test of "which nodes may this pod
// have": over a generated cluster (builder.Generate: nodes with zones,
// pools, taints, cordons and capacities; pods with node selectors,
// required node affinity, tolerations and requests, some too big for any
// node; policies with filters, scores, a preEnqueue hold, an
// enforcementOverride, a two-wave rollout and params), every consumer of
// the one evaluator must agree with the live scheduler:
//
//  1. each pod, created one at a time, is bound to a node the evaluator
//     (the dry run's, over the objects read back from the API server just
//     before) lists as feasible and ranks highest, held when it says held,
//     and unschedulable exactly when it finds no node; in each of three
//     phases: the policies as created, wave one of the rollout enforced,
//     and a change of the policies applied;
//  2. the rollout gate (controllers.PendingPods.WouldStrand for wave one,
//     with a verdict.Simulator over the API server's informers, over
//     listers holding the pods pending) counts exactly the pods that bind
//     with the wave audited and stay pending once it is enforced;
//  3. analyze reports a class of pods with no feasible node, naming a
//     policy, exactly when its pods stay unschedulable and the evaluator
//     without any policy finds them a node, and no-node-fits, naming no
//     policy, exactly when it finds none (held classes are left out);
//  4. impact, on the same pods with the policies in force and the change,
//     lists exactly the pods whose outcome (bound, unschedulable, held)
//     the live scheduler changes once the change is applied.
//
// The generated requests are such that whether a pod has a node does not
// depend on where the pods before it went (builder.Generate), so that the
// evaluations of pods all pending (2, 4) agree with pods created in turn.
func TestVerdictIsOne(t *testing.T) {
	ctx := t.Context()
	started := time.Now()
	cfg, err := schedulerconfigfile.Load(filepath.Join("testdata", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("vd%d-%d", *verdictSeed, verdictRuns.Add(1))
	g := builder.Generate(builder.GenerateOptions{Seed: *verdictSeed, Nodes: *verdictNodes, Pods: *verdictPods,
		Prefix: prefix, RunLabel: verdictRunLabel, SchedulerName: schedulerName})
	t.Logf("seed %d: %s", *verdictSeed, g.Describe())

	grantConfigMapParams(t)
	for _, n := range g.Nodes {
		createNode(t, n.DeepCopy())
	}
	for _, ns := range g.Namespaces {
		if err := k8sClient.Create(ctx, ns.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	for _, cm := range g.ConfigMaps {
		cm := cm.DeepCopy()
		if err := k8sClient.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, cm) })
	}
	for _, p := range g.Policies {
		applyPolicy(t, p.DeepCopy())
	}
	waitRollout(t, g.RolloutPolicy, "wave one soaking", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveSoaking
	})
	time.Sleep(propagation)

	v := &verdictRun{t: t, cfg: cfg, g: g}

	// Phase 1: the policies as created, wave one audited.
	audited := v.schedule("audited")
	v.checkAnalyze("audited", audited)

	// The rollout gate, before wave one is promoted: the pods, pending.
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: g.RolloutPolicy}, policy); err != nil {
		t.Fatal(err)
	}
	stranded := v.wouldStrand(policy, 0)

	// Phase 2: wave one enforced.
	v.deletePods()
	request := requested(t, runCLI(t, "rollout", "promote", "--kubeconfig", kubeconfig, g.RolloutPolicy))
	waitRollout(t, g.RolloutPolicy, "wave one enforced", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveEnforced && st.LastAction != nil && st.LastAction.ID == request
	})
	time.Sleep(propagation)
	enforced := v.schedule("wave-one-enforced")
	v.checkAnalyze("wave-one-enforced", enforced)

	// The gate counts the pods the live scheduler bound with the wave
	// audited and left pending once it was enforced; and, of the pods it
	// left unschedulable both times, those that wait for room on nodes the
	// wave refuses (capacity aside, they have a node audited and none
	// enforced): never a pod it bound under enforcement, or one it held.
	var want, waiting []string
	for _, p := range g.Pods {
		k := podKey(p)
		switch {
		case audited[k].state == stateBound && enforced[k].state != stateBound:
			want = append(want, k)
		case audited[k].state == stateUnschedulable && enforced[k].state == stateUnschedulable:
			waiting = append(waiting, k)
		}
	}
	sort.Strings(want)
	counted := func(k string) bool { return slices.Contains(want, k) || slices.Contains(waiting, k) }
	if int(stranded.Count) < len(want) || int(stranded.Count) > len(want)+len(waiting) ||
		slices.ContainsFunc(stranded.Pods, func(k string) bool { return !counted(k) }) {
		t.Errorf("rollout gate: WouldStrand(%s, wave one) = %d %v; the live scheduler left %d pod(s) pending once the wave was enforced that it had bound before (%v), and %d unschedulable both times (%v)",
			g.RolloutPolicy, stranded.Count, stranded.Pods, len(want), want, len(waiting), waiting)
	}
	for _, k := range want {
		// The names are the first counted: a stranded pod that sorts
		// before the last of them is among them.
		if len(stranded.Pods) > 0 && k < stranded.Pods[len(stranded.Pods)-1] && !slices.Contains(stranded.Pods, k) {
			t.Errorf("rollout gate: %s, which the wave strands, is not among the counted pods %v", k, stranded.Pods)
		}
	}
	t.Logf("rollout gate: %d pod(s) stranded by wave one", len(want))
	// The generated cluster exercises what is compared (its palette makes
	// sure of it): otherwise agreement would prove nothing.
	if len(want) == 0 || !slices.ContainsFunc(g.Pods, func(p *corev1.Pod) bool { return audited[podKey(p)].state == stateHeld }) {
		t.Errorf("seed %d: the generated cluster has no pod that wave one strands (%d), or none held", *verdictSeed, len(want))
	}

	// Phase 3: the change, by impact and then live.
	report := v.impact()
	for _, d := range g.Drafts {
		current := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: d.Name}, current); err != nil {
			t.Fatal(err)
		}
		current.Spec = d.Spec
		if err := k8sClient.Update(ctx, current); err != nil {
			t.Fatalf("applying the draft of %s: %v", d.Name, err)
		}
		waitPolicyReady(t, d.Name, metav1.ConditionTrue)
	}
	for _, name := range g.Deletions {
		deleteObject(t, &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	time.Sleep(propagation)
	// Drift joins the proof: the pods of phase 2 still run, and each
	// policy's status.drift names exactly those the evaluator's run now
	// refuses on their node under the enforced policies.
	v.checkDrift()
	v.deletePods()
	changed := v.schedule("changed")
	v.checkAnalyze("changed", changed)
	v.checkImpact(report, enforced, changed)
	t.Logf("seed %d, %d nodes, %d pods: %v", *verdictSeed, len(g.Nodes), len(g.Pods), time.Since(started).Round(time.Millisecond))
}

// verdictRun is one run of TestVerdictIsOne.
type verdictRun struct {
	t   *testing.T
	cfg *schedulerconfig.KubeSchedulerConfiguration
	g   *builder.Generated
}

// podState is a pod's outcome in the live scheduler.
type podState string

const (
	stateBound         podState = "bound"
	stateUnschedulable podState = "unschedulable"
	stateHeld          podState = "held"
)

// outcome is what the live scheduler did with a pod, and what the
// evaluator without any policy says of it.
type outcome struct {
	state podState
	node  string
	// fitsWithout: the evaluator with no policy finds the pod a node.
	fitsWithout bool
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// liveCluster is what the API server holds, read back so that the
// evaluators see what the scheduler saw.
type liveCluster struct {
	nodes      []*corev1.Node
	namespaces []*corev1.Namespace
	pods       []*corev1.Pod
	policies   []*schedv1alpha1.SchedulingPolicy
	params     []*unstructured.Unstructured
}

func readCluster(t *testing.T) *liveCluster {
	t.Helper()
	ctx := t.Context()
	lc := &liveCluster{}
	var nodes corev1.NodeList
	var namespaces corev1.NamespaceList
	var pods corev1.PodList
	var policies schedv1alpha1.SchedulingPolicyList
	var configMaps corev1.ConfigMapList
	for _, l := range []client.ObjectList{&nodes, &namespaces, &pods, &policies, &configMaps} {
		if err := k8sClient.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes.Items {
		lc.nodes = append(lc.nodes, &nodes.Items[i])
	}
	for i := range namespaces.Items {
		lc.namespaces = append(lc.namespaces, &namespaces.Items[i])
	}
	for i := range pods.Items {
		lc.pods = append(lc.pods, &pods.Items[i])
	}
	for i := range policies.Items {
		lc.policies = append(lc.policies, &policies.Items[i])
	}
	for i := range configMaps.Items {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&configMaps.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		lc.params = append(lc.params, u)
	}
	return lc
}

// bound are the pods on nodes.
func (lc *liveCluster) bound() []*corev1.Pod {
	return slices.DeleteFunc(slices.Clone(lc.pods), func(p *corev1.Pod) bool { return p.Spec.NodeName == "" })
}

// evaluate asks the one evaluator, as the dry run builds it from objects,
// what it makes of the pod in the cluster: with the policies, and with
// none.
func (v *verdictRun) evaluate(lc *liveCluster, pod *corev1.Pod) (with *dryrun.Report, fitsWithout bool) {
	t, ctx := v.t, v.t.Context()
	t.Helper()
	cluster := dryrun.NewCluster(lc.namespaces, lc.nodes, lc.bound(), nil)
	s, err := cluster.Scheduler(ctx, lc.policies, lc.params, v.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if with, err = s.Schedule(ctx, pod); err != nil {
		t.Fatal(err)
	}
	none, err := cluster.Scheduler(ctx, nil, nil, v.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	without, err := none.AnyFeasible(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	return with, len(without.Feasible) > 0
}

// schedule creates the generated pods one at a time, each evaluated
// against the cluster as it was just before, waits for the live
// scheduler's outcome and checks that the evaluator predicted it; then
// checks that no outcome changed once all are created.
func (v *verdictRun) schedule(phase string) map[string]outcome {
	t, ctx := v.t, v.t.Context()
	t.Helper()
	started := time.Now()
	out := map[string]outcome{}
	counts := map[podState]int{}
	for _, p := range v.g.Pods {
		lc := readCluster(t)
		pod := p.DeepCopy()
		if err := k8sClient.Create(ctx, pod); err != nil {
			t.Fatalf("creating pod %s: %v", podKey(p), err)
		}
		t.Cleanup(func() { deleteObject(t, pod) })
		want, fitsWithout := v.evaluate(lc, pod)
		got := waitOutcome(t, pod)
		got.fitsWithout = fitsWithout
		out[podKey(p)] = got
		counts[got.state]++
		switch {
		case want.PreEnqueue != nil:
			if got.state != stateHeld {
				t.Errorf("%s: pod %s: the evaluator holds it (%s: %s), the live scheduler: %s %s",
					phase, podKey(p), want.PreEnqueue.Plugin, want.PreEnqueue.Message, got.state, got.node)
			}
		case len(want.Feasible) == 0:
			if got.state != stateUnschedulable {
				t.Errorf("%s: pod %s: the evaluator finds no node (%s), the live scheduler: %s %s",
					phase, podKey(p), rejections(want), got.state, got.node)
			}
		case got.state != stateBound:
			t.Errorf("%s: pod %s: the evaluator finds nodes %v, the live scheduler: %s", phase, podKey(p), want.Feasible, got.state)
		case !slices.Contains(want.Feasible, got.node):
			t.Errorf("%s: pod %s: bound to %s, which the evaluator does not list as feasible (%v): %s",
				phase, podKey(p), got.node, want.Feasible, rejection(want, got.node))
		case !slices.Contains(topNodes(want), got.node):
			t.Errorf("%s: pod %s: bound to %s, the evaluator ranks highest %v (ranking %v)", phase, podKey(p), got.node, topNodes(want), want.Ranking)
		}
	}
	// Nothing moved afterwards: a pending pod stays pending, a bound pod
	// where it is.
	for _, p := range readCluster(t).pods {
		if o, ok := out[podKey(p)]; ok && p.Spec.NodeName != o.node {
			t.Errorf("%s: pod %s went from %q to node %q after the others were created", phase, podKey(p), o.node, p.Spec.NodeName)
		}
	}
	t.Logf("%s: %d pods in %v: %d bound, %d unschedulable, %d held", phase, len(out), time.Since(started).Round(time.Millisecond),
		counts[stateBound], counts[stateUnschedulable], counts[stateHeld])
	return out
}

// waitOutcome waits until the pod is bound, or its PodScheduled
// condition is False: SchedulingGated (held at PreEnqueue) or
// Unschedulable.
func waitOutcome(t *testing.T, pod *corev1.Pod) outcome {
	t.Helper()
	var got corev1.Pod
	var o outcome
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false, err
		}
		if got.Spec.NodeName != "" {
			o = outcome{state: stateBound, node: got.Spec.NodeName}
			return true, nil
		}
		c := podCondition(&got)
		if c == nil || c.Status != corev1.ConditionFalse {
			return false, nil
		}
		switch c.Reason {
		case corev1.PodReasonSchedulingGated:
			o = outcome{state: stateHeld}
			return true, nil
		case corev1.PodReasonUnschedulable:
			o = outcome{state: stateUnschedulable}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: neither bound nor pending: %v; PodScheduled: %s", podKey(pod), err, scheduledCondition(&got))
	}
	return o
}

// rejections folds the evaluator's rejections of every node, as the
// scheduler's condition does.
func rejections(r *dryrun.Report) string {
	if r.PreFilter != nil {
		return r.PreFilter.Plugin + ": " + r.PreFilter.Message
	}
	counts := map[string]int{}
	for _, n := range r.Nodes {
		counts[rejection(r, n.Name)]++
	}
	var out []string
	for msg, n := range counts {
		out = append(out, fmt.Sprintf("%d %s", n, msg))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// deletePods deletes the generated pods and waits until they are gone,
// and for the scheduler to forget them.
func (v *verdictRun) deletePods() {
	t, ctx := v.t, v.t.Context()
	t.Helper()
	for _, p := range v.g.Pods {
		deleteObject(t, p.DeepCopy())
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range v.g.Pods {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("deleting the pods: %v", err)
	}
	time.Sleep(propagation)
}

// checkDrift waits until every policy's status.drift names exactly the
// running pods (bound, not being deleted) that the evaluator, built from
// the objects as the dry run builds it, refuses on their node
// (Refusals: the enforced policies' filters): the count, and the first
// pods by namespace and name with their node.
func (v *verdictRun) checkDrift() {
	t, ctx := v.t, v.t.Context()
	t.Helper()
	var says string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		lc := readCluster(t)
		cluster := dryrun.NewCluster(lc.namespaces, lc.nodes, lc.bound(), nil)
		s, err := cluster.Scheduler(ctx, lc.policies, lc.params, v.cfg)
		if err != nil {
			return false, err
		}
		defer s.Close()
		want := map[string][]schedv1alpha1.DriftedPod{}
		for _, pod := range lc.bound() {
			if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			refusals, err := s.Refusals(ctx, pod)
			if err != nil {
				return false, err
			}
			for _, r := range refusals {
				want[r.Policy] = append(want[r.Policy], schedv1alpha1.DriftedPod{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName})
			}
		}
		var diffs []string
		for _, p := range lc.policies {
			w := want[p.Name]
			slices.SortFunc(w, func(a, b schedv1alpha1.DriftedPod) int {
				return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
			})
			var got []schedv1alpha1.DriftedPod
			count := int32(0)
			if d := p.Status.Drift; d != nil {
				count = d.Count
				for _, dp := range d.Pods {
					got = append(got, schedv1alpha1.DriftedPod{Namespace: dp.Namespace, Name: dp.Name, Node: dp.Node})
				}
			}
			first := w[:min(len(w), schedv1alpha1.MaxDriftedPods)]
			if int(count) != len(w) || !slices.Equal(got, first) {
				diffs = append(diffs, fmt.Sprintf("%s: status.drift count %d %v, the evaluator %d %v", p.Name, count, got, len(w), first))
			}
		}
		says = strings.Join(diffs, "; ")
		return len(diffs) == 0, nil
	})
	if err != nil {
		t.Errorf("drift does not agree with the evaluator (%v): %s", err, says)
	}
}

// generated says whether a pod is one of the generated ones.
func (v *verdictRun) generated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(v.g.Pods, func(p *corev1.Pod) bool { return podKey(p) == podKey(pod) })
}

// pendingPods are the generated pods as the API server would hold them
// created and not yet scheduled.
func (v *verdictRun) pendingPods() []*corev1.Pod {
	out := make([]*corev1.Pod, len(v.g.Pods))
	for i, p := range v.g.Pods {
		out[i] = verdict.Default(p)
		out[i].UID = ktypes.UID("pending-" + p.Namespace + "-" + p.Name)
		out[i].ResourceVersion = "1"
	}
	return out
}

// wouldStrand asks the rollout gate, as the manager wires it (the CEL
// plugins' inputs over a registry fed the policies as stored, listers of
// nodes, namespaces and pods), about the generated pods, all pending.
func (v *verdictRun) wouldStrand(policy *schedv1alpha1.SchedulingPolicy, wave int) audit.Stranded {
	t := v.t
	t.Helper()
	lc := readCluster(t)
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	for _, p := range lc.policies {
		registry.Upsert(p)
	}
	inputs := celplugins.NewRuntime(registry, engine.NewConverter(env, 0)).Inputs
	if inputs.Params, err = engine.NewStaticParams(env, lc.params); err != nil {
		t.Fatal(err)
	}
	indexer := func(objs ...any) cache.Indexer {
		i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := i.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	var nodes, namespaces, pods []any
	for _, n := range lc.nodes {
		nodes = append(nodes, n)
	}
	for _, ns := range lc.namespaces {
		namespaces = append(namespaces, ns)
	}
	for _, p := range lc.bound() {
		if !v.generated(p) {
			pods = append(pods, p)
		}
	}
	for _, p := range v.pendingPods() {
		pods = append(pods, p)
	}
	nsLister := corelisters.NewNamespaceLister(indexer(namespaces...))
	inputs.UseNamespaces(nsLister)
	// The gate's Evaluators come from a Simulator over informers of the
	// API server, as the manager's over the scheduler's: its built-in
	// plugins read them (namespaces, volumes), once they hold the
	// namespaces as read above.
	factory := informers.NewSharedInformerFactory(clientset, 0)
	nsInformer := factory.Core().V1().Namespaces()
	nsInformer.Informer()
	factory.Start(t.Context().Done())
	factory.WaitForCacheSync(t.Context().Done())
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, ns := range lc.namespaces {
			got, err := nsInformer.Lister().Get(ns.Name)
			if err != nil || got.ResourceVersion != ns.ResourceVersion {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the informers did not reach the namespaces read: %v", err)
	}
	pp := &controllers.PendingPods{Live: controllers.Live{Inputs: inputs, Config: v.cfg, Pods: corelisters.NewPodLister(indexer(pods...)),
		Nodes: corelisters.NewNodeLister(indexer(nodes...)), Namespaces: nsLister, Simulator: verdict.NewSimulator(factory)}}
	stranded, err := pp.WouldStrand(t.Context(), policy.Name, policy.Generation, wave)
	if err != nil {
		t.Fatal(err)
	}
	return stranded
}

// classSubject finds the class of pods a finding is about: "pods of
// namespace NS like POD" in its subject, or in its evidence ("for pods of
// namespace NS like POD, ...") when the subject is a params object.
var classSubject = regexp.MustCompile(`^(?:for )?pods of namespace (\S+) like ([^,\s]+)`)

// checkAnalyze runs analyze on the cluster as it is and checks its
// findings about classes of pods against the live outcomes: a
// no-feasible-node (or params-mismatch) finding naming a policy for
// exactly the classes whose pods are unschedulable and that the evaluator
// without policies finds a node; a no-node-fits finding, naming no policy,
// for exactly the unschedulable classes that it finds none; no policy
// named in any finding about those. Held classes are left out: analyze
// asks which nodes they would have once released, the live scheduler
// does not say.
func (v *verdictRun) checkAnalyze(phase string, outcomes map[string]outcome) {
	t := v.t
	t.Helper()
	lc := readCluster(t)
	mine := map[string]bool{}
	for _, ns := range v.g.Namespaces {
		mine[ns.Name] = true
	}
	pods := slices.DeleteFunc(slices.Clone(lc.pods), func(p *corev1.Pod) bool { return !mine[p.Namespace] })
	report, err := analyze.Run(t.Context(), analyze.Input{Input: source.Input{Nodes: lc.nodes, Namespaces: lc.namespaces, Pods: pods,
		Policies: lc.policies, Params: lc.params, Config: v.cfg}})
	if err != nil {
		t.Fatal(err)
	}

	// The classes: the replicas of a workload, which differ only in name.
	class := map[string]string{} // pod -> its workload's first pod
	size := map[string]int{}
	for _, p := range v.g.Pods {
		first := p
		for _, q := range v.g.Pods {
			if q.Namespace == p.Namespace && q.Labels["app"] == p.Labels["app"] {
				first = q
				break
			}
		}
		class[podKey(p)] = podKey(first)
		size[podKey(first)]++
		if o, f := outcomes[podKey(p)], outcomes[podKey(first)]; o.state != f.state || o.fitsWithout != f.fitsWithout {
			t.Errorf("%s: replicas %s (%s) and %s (%s) differ", phase, podKey(p), o.state, podKey(first), f.state)
		}
	}
	want := map[string]bool{}
	noNode := map[string]bool{}
	held := map[string]bool{}
	for pod, first := range class {
		switch o := outcomes[pod]; {
		case o.state == stateHeld:
			held[first] = true
		case o.state == stateUnschedulable && o.fitsWithout:
			want[first] = true
		case o.state == stateUnschedulable:
			noNode[first] = true
		}
	}
	// The findings about classes of generated pods: those that name a
	// policy for want, no-node-fits (naming none) for noNode.
	got := map[string]analyze.Finding{}
	gotNoNode := map[string]analyze.Finding{}
	for _, f := range report.Findings {
		if f.Kind != analyze.NoFeasibleNode && f.Kind != analyze.ParamsMismatch && f.Kind != analyze.Capacity && f.Kind != analyze.NoNodeFits {
			continue
		}
		m := classSubject.FindStringSubmatch(f.Subject)
		if m == nil {
			m = classSubject.FindStringSubmatch(f.Evidence)
		}
		if m == nil {
			continue // a namespace's plain pod, or a params object without a class
		}
		first, ok := class[m[1]+"/"+m[2]]
		switch {
		case !ok:
			t.Errorf("%s: analyze reports %s about pod %s/%s, which is not a generated pod", phase, f.Kind, m[1], m[2])
		case held[first]:
			// analyze asks which nodes held pods would have once released.
		case noNode[first] && len(f.Policies) > 0:
			t.Errorf("%s: analyze names %v in a %s finding for %s, which no node fits without any policy (%s): %s; the pod: %s",
				phase, f.Policies, f.Kind, first, outcomes[first].state, f.Evidence, v.describe(first))
		case f.Kind == analyze.NoNodeFits:
			gotNoNode[first] = f
		case f.Kind != analyze.Capacity && len(f.Policies) > 0:
			got[first] = f
		}
	}
	compare := func(what string, want map[string]bool, got map[string]analyze.Finding) {
		for first := range want {
			if _, ok := got[first]; !ok {
				t.Errorf("%s: pods like %s (%d) are unschedulable, %s, but analyze does not say so; the pod: %s",
					phase, first, size[first], what, v.describe(first))
			}
		}
		for first, f := range got {
			if !want[first] {
				t.Errorf("%s: analyze reports %s (%v) for pods like %s, which the live scheduler left %s (a node without the policies: %v): %s; the pod: %s",
					phase, f.Kind, f.Policies, first, outcomes[first].state, outcomes[first].fitsWithout, f.Evidence, v.describe(first))
			} else if f.Pods != size[first] {
				t.Errorf("%s: analyze counts %d pod(s) like %s, there are %d", phase, f.Pods, first, size[first])
			}
		}
	}
	compare("and have a node without the policies", want, got)
	compare("and have no node without the policies either", noNode, gotNoNode)
	t.Logf("%s: analyze: %d class(es) without a node for the policies, %d without a node at all, %d held; findings %v",
		phase, len(want), len(noNode), len(held), report.Summary.ByKind)
}

// describe sums up a generated pod for a failure: its labels and what
// the built-in filters read.
func (v *verdictRun) describe(key string) string {
	i := slices.IndexFunc(v.g.Pods, func(p *corev1.Pod) bool { return podKey(p) == key })
	if i < 0 {
		return "?"
	}
	p := v.g.Pods[i]
	var aff any
	if p.Spec.Affinity != nil {
		aff = p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	}
	data, _ := json.Marshal(map[string]any{"labels": p.Labels, "nodeSelector": p.Spec.NodeSelector, "affinity": aff,
		"tolerations": p.Spec.Tolerations, "requests": p.Spec.Containers[0].Resources.Requests})
	return string(data)
}

// impact runs impact on the generated pods, all pending, with the policies
// in force and the generated change.
func (v *verdictRun) impact() *impact.Report {
	t := v.t
	t.Helper()
	lc := readCluster(t)
	report, err := impact.Run(t.Context(), impact.Input{Input: source.Input{Policies: lc.policies, Drafts: v.g.Drafts,
		Params: lc.params, Nodes: lc.nodes, Namespaces: lc.namespaces, Pods: v.pendingPods(), Config: v.cfg}, Deletions: v.g.Deletions})
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// checkImpact compares impact's changes with what the live scheduler did
// before and after the change: a pod bound before and after may have
// moved (the nodes it would go to are not compared: pods created one at
// a time see the pods before them, impact evaluates them all pending);
// any other change of state is impact's placed, stranded, held or
// released, and no change of state is unchanged.
func (v *verdictRun) checkImpact(report *impact.Report, before, after map[string]outcome) {
	t := v.t
	t.Helper()
	got := map[string]impact.PodImpact{}
	for _, p := range report.Pods {
		got[p.Pod] = p
	}
	n := 0
	for _, p := range v.g.Pods {
		k := podKey(p)
		b, a := before[k].state, after[k].state
		var want []impact.Change
		switch {
		case b == a && b == stateBound:
			want = []impact.Change{impact.Unchanged, impact.Moved}
		case b == a:
			want = []impact.Change{impact.Unchanged}
		case a == stateBound:
			want = []impact.Change{impact.Placed}
		case a == stateHeld:
			want = []impact.Change{impact.Held}
		case b == stateBound:
			want = []impact.Change{impact.Stranded}
		default: // held, then unschedulable
			want = []impact.Change{impact.Released}
		}
		change := impact.Unchanged
		if pi, ok := got[k]; ok {
			change = pi.Change
		}
		if !slices.Contains(want, change) {
			data, _ := yaml.Marshal(got[k])
			t.Errorf("impact: pod %s: %s, but the live scheduler went from %s to %s (want %v)\n%s", k, change, b, a, want, data)
		}
		if b != a {
			n++
		}
	}
	if n == 0 {
		t.Errorf("impact: the change changes no pod's state: the generated cluster proves nothing")
	}
	t.Logf("impact: %d pod(s) changed state, summary %v", n, report.Summary.ByChange)
}
