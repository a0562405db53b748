package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	schedulerconfigfile "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/builder"
)

// fixture is a scheduler's inputs over listers a test fills: the
// registry, the CEL plugins' inputs, and the listers of PendingPods.
type fixture struct {
	registry                   *engine.Registry
	inputs                     *celplugins.Inputs
	env                        *engine.Environment
	pods, nodes, namespaceList cache.Indexer
}

func newFixture(tb testing.TB, namespaces ...*corev1.Namespace) *fixture {
	tb.Helper()
	env, err := engine.NewEnvironment()
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{
		env:           env,
		registry:      engine.NewRegistry(engine.NewCompiler(env)),
		pods:          cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		nodes:         cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		namespaceList: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
	}
	f.inputs = celplugins.NewRuntime(f.registry, engine.NewConverter(env, 0)).Inputs
	f.inputs.UseNamespaces(corelisters.NewNamespaceLister(f.namespaceList))
	for _, ns := range namespaces {
		f.add(tb, f.namespaceList, ns)
	}
	return f
}

func (f *fixture) add(tb testing.TB, indexer cache.Indexer, objs ...any) {
	tb.Helper()
	for _, o := range objs {
		if err := indexer.Add(o); err != nil {
			tb.Fatal(err)
		}
	}
}

func (f *fixture) pending(tb testing.TB) *PendingPods {
	tb.Helper()
	cfg, err := schedulerconfigfile.Load("")
	if err != nil {
		tb.Fatal(err)
	}
	return &PendingPods{Live: Live{Inputs: f.inputs, Config: cfg,
		Pods: corelisters.NewPodLister(f.pods), Nodes: corelisters.NewNodeLister(f.nodes), Namespaces: corelisters.NewNamespaceLister(f.namespaceList)}}
}

// simulated is pending with a Simulator over informers of a fake
// clientset holding the fixture's namespaces, as the manager's reads the
// scheduler's: its Evaluators are built once, whatever the counts.
func (f *fixture) simulated(tb testing.TB) (*PendingPods, *verdict.Simulator) {
	tb.Helper()
	var objs []runtime.Object
	for _, ns := range f.namespaceList.List() {
		objs = append(objs, ns.(*corev1.Namespace))
	}
	client := fake.NewSimpleClientset(objs...) //nolint:staticcheck // nothing applies
	factory := informers.NewSharedInformerFactory(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	factory.Start(ctx.Done())
	pp := f.pending(tb)
	pp.Simulator = verdict.NewSimulator(factory)
	return pp, pp.Simulator
}

// TestPendingPodsWouldStrand: a wave's pending pods count when the
// framework of their profile finds them a node with the wave audited and
// none with it enforced: held by the wave's preEnqueue rule, or left only
// nodes its filter refuses once their own node selector, tolerations, the
// cordons and the nodes' free resources are applied (the profile's
// built-in filters, not copies of them). Not counted: pods a node accepts,
// pods no node fits either way, bound, deleting, another scheduler's or
// another wave's pods. nodeInfo is read from the bound pods; pods that
// differ only in name share an answer, pods whose node selectors differ do
// not; the names are capped; a generation the scheduler has not compiled,
// and informers that have not synced, are errors.
func TestPendingPodsWouldStrand(t *testing.T) {
	t.Parallel()
	f := newFixture(t, namespace("w1", map[string]string{"wave": "1"}), namespace("w2", map[string]string{"wave": "2"}))
	waves := func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
		return b.Audit().Wave("first", map[string]string{"wave": "1"}, time.Minute).Wave("second", map[string]string{"wave": "2"}, time.Minute)
	}
	f.registry.Upsert(waves(builder.MakePolicy("no-spot").UID("policy-no-spot").Generation(3, "1").
		PreEnqueue("approved", "!('hold' in pod.metadata.labels)", "held").
		Filter("no-spot", "node.metadata.labels['pool'] != 'spot'")).Obj())
	f.registry.Upsert(waves(builder.MakePolicy("empty-nodes").UID("policy-empty-nodes").Generation(1, "1").
		Filter("empty", "nodeInfo.podCount == 0")).Obj())

	nodeOf := func(name, pool, zone string) *corev1.Node {
		return node(name, map[string]string{"pool": pool, "zone": zone})
	}
	tainted := nodeOf("od-1", "on-demand", "a")
	tainted.Spec.Taints = []corev1.Taint{{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
	cordoned := nodeOf("od-3", "on-demand", "c")
	cordoned.Spec.Unschedulable = true
	full := nodeOf("od-4", "on-demand", "e")
	full.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
	smallSpot := nodeOf("spot-6", "spot", "f")
	smallSpot.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
	f.add(t, f.nodes, nodeOf("spot-1", "spot", "a"), nodeOf("spot-2", "spot", "b"), nodeOf("spot-3", "spot", "c"),
		tainted, nodeOf("od-2", "on-demand", "b"), cordoned, full, nodeOf("spot-5", "spot", "e"), smallSpot)

	pending := func(ns, name string, changes ...func(*corev1.Pod)) *corev1.Pod {
		p := pod(ns, name, map[string]string{"app": name})
		for _, change := range changes {
			change(p)
		}
		return p
	}
	hold := func(p *corev1.Pod) { p.Labels["hold"] = "yes" }
	zone := func(z string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": z} }
	}
	pods := []any{
		pending("w1", "fits"),
		pending("w1", "held", hold),
		pending("w1", "zone-a", zone("a")), // spot-1 only: od-1's taint is not tolerated
		pending("w1", "zone-a-tolerating", zone("a"), func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
		}),
		pending("w1", "zone-c", zone("c")), // spot-3 only: od-3 is cordoned
		pending("w1", "zone-d", zone("d")), // no node at all
		// zone e: od-4 has 1 CPU: the small pod may use it, the big one
		// only spot-5, which the wave refuses.
		pending("w1", "zone-e-small", zone("e"), requesting("500m")),
		pending("w1", "zone-e-big", zone("e"), requesting("2")),
		// No node has 64 CPUs: not the wave's doing.
		pending("w1", "huge", requesting("64")),
		// Zone f has only spot-6, too small for it now: it waits for
		// room on a node the wave refuses, and could never run there
		// once the wave is enforced.
		pending("w1", "zone-f-waits", zone("f"), requesting("2")),
		pending("w1", "bound", zone("a"), func(p *corev1.Pod) { p.Spec.NodeName = "spot-1" }),
		pending("w1", "other-scheduler", hold, func(p *corev1.Pod) { p.Spec.SchedulerName = corev1.DefaultSchedulerName }),
		pending("w1", "deleting", hold, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }),
	}
	// Pods that differ only in name share an answer (one class); pods that
	// differ in their node selector do not.
	for _, twin := range []struct{ name, zone string }{{"twin-a", "a"}, {"twin-b", "b"}, {"twin-a2", "a"}} {
		pods = append(pods, pending("w1", twin.name, zone(twin.zone), func(p *corev1.Pod) { p.Labels = map[string]string{"app": "twin"} }))
	}
	for i := range 7 {
		pods = append(pods, pending("w2", fmt.Sprintf("held-%d", i), hold))
	}
	f.add(t, f.pods, pods...)
	pp := f.pending(t)
	simulated, sim := f.simulated(t)
	ctx := context.Background()

	type count struct {
		policy     string
		generation int64
		wave       int
		want       audit.Stranded
	}
	counts := []count{
		{"no-spot", 3, 0, audit.Stranded{Count: 7, Pods: []string{"w1/held", "w1/twin-a", "w1/twin-a2", "w1/zone-a", "w1/zone-c"}}},
		{"no-spot", 3, 1, audit.Stranded{Count: 7, Pods: []string{"w2/held-0", "w2/held-1", "w2/held-2", "w2/held-3", "w2/held-4"}}},
		// spot-1 has the bound pod: the only node zone-a may use is refused;
		// zone-a-tolerating may use od-1, which is empty.
		{"empty-nodes", 1, 0, audit.Stranded{Count: 3, Pods: []string{"w1/twin-a", "w1/twin-a2", "w1/zone-a"}}},
	}
	// Each count is made by Evaluators built for it (a Live without a
	// Simulator) and by the Simulator's, built once.
	check := func(t *testing.T, counts []count) {
		for _, tc := range counts {
			for name, pp := range map[string]*PendingPods{"built": pp, "simulator": simulated} {
				t.Run(fmt.Sprintf("%s/%d/%s", tc.policy, tc.wave, name), func(t *testing.T) {
					got, err := pp.WouldStrand(ctx, tc.policy, tc.generation, tc.wave)
					if err != nil {
						t.Fatal(err)
					}
					if got.Count != tc.want.Count || !slices.Equal(got.Pods, tc.want.Pods) {
						t.Errorf("got %+v, want %+v", got, tc.want)
					}
				})
			}
		}
	}
	check(t, counts)
	// The Simulator's Evaluators see the cluster of each count: a spot
	// node in zone d gives zone-d a node, which the wave refuses.
	f.add(t, f.nodes, nodeOf("spot-7", "spot", "d"))
	check(t, []count{{"no-spot", 3, 0, audit.Stranded{Count: 8, Pods: counts[0].want.Pods}}})
	// now and with the wave enforced, each with and without capacity:
	// four Evaluators for every count.
	if got := sim.Builds(); got != 4 {
		t.Errorf("the Simulator built %d Evaluators over %d counts, want 4", got, len(counts)+1)
	}
	if _, err := pp.WouldStrand(ctx, "no-spot", 4, 0); err == nil {
		t.Error("counted for a generation the scheduler has not compiled")
	}
	if _, err := pp.WouldStrand(ctx, "missing", 1, 0); err == nil {
		t.Error("counted for a policy the scheduler does not know")
	}
	pp.Synced = func() bool { return false }
	if _, err := pp.WouldStrand(ctx, "no-spot", 3, 0); err == nil {
		t.Error("counted before the informers synced")
	}
}

// TestPendingPodsParamsBindings: a parameterized policy applies once per
// params object; a node is the pod's only when every binding accepts it.
func TestPendingPodsParamsBindings(t *testing.T) {
	t.Parallel()
	f := newFixture(t, namespace("w1", map[string]string{"wave": "1"}))
	var objs []*unstructured.Unstructured
	for name, zones := range map[string]string{"p1": "a,b", "p2": "a,c"} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
		u.SetNamespace("w1")
		u.SetName(name)
		u.SetUID(ktypes.UID("uid-" + name))
		u.SetLabels(map[string]string{"placement": "yes"})
		u.Object["data"] = map[string]any{"zones": zones}
		objs = append(objs, u)
	}
	params, err := engine.NewStaticParams(f.env, objs)
	if err != nil {
		t.Fatal(err)
	}
	f.inputs.Params = params
	f.registry.Upsert(builder.MakePolicy("zones").UID("policy-zones").Generation(1, "1").Audit().
		ParamKind("v1", "ConfigMap").ParamSelector(map[string]string{"placement": "yes"}, "", schedv1alpha1.DenyAction).
		Filter("zone", "node.metadata.labels['zone'] in params.data['zones'].split(',')").
		Wave("first", map[string]string{"wave": "1"}, time.Minute).Obj())
	for _, z := range []string{"a", "b", "c"} {
		f.add(t, f.nodes, node("n-"+z, map[string]string{"zone": z}))
	}
	for _, z := range []string{"", "b"} {
		p := pod("w1", "zone-"+z, map[string]string{"app": "x"})
		if z != "" {
			p.Spec.NodeSelector = map[string]string{"zone": z}
		}
		f.add(t, f.pods, p)
	}
	got, err := f.pending(t).WouldStrand(context.Background(), "zones", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// zone-b may use n-b only, which p2 (zones a,c) refuses; the other pod
	// may use n-a, which both accept.
	if want := (audit.Stranded{Count: 1, Pods: []string{"w1/zone-b"}}); got.Count != want.Count || !slices.Equal(got.Pods, want.Pods) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// BenchmarkWouldStrand is one count of a wave's pending pods on a large
// cluster: 5000 nodes and 1000 pending pods of 10 deployments (pods of a
// deployment are one class: one evaluation answers them all). "accepts" is
// a rule that accepts most nodes; "refuses-all" is the worst case, a rule
// that refuses every node, so each class is evaluated twice on all of
// them (enforced, then audited).
func BenchmarkWouldStrand(b *testing.B) {
	for _, bc := range []struct{ name, filter string }{
		{"accepts", "node.metadata.labels['pool'] != 'spot'"},
		{"refuses-all", "node.metadata.labels['pool'] == 'none'"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, namespace("w1", map[string]string{"wave": "1"}))
			f.registry.Upsert(builder.MakePolicy("p").UID("policy-p").Generation(1, "1").Audit().
				Filter("f", bc.filter).Wave("first", map[string]string{"wave": "1"}, time.Minute).Obj())
			for i := range 5000 {
				pool := "general"
				if i%10 == 0 {
					pool = "spot"
				}
				f.add(b, f.nodes, node(fmt.Sprintf("node-%04d", i), map[string]string{"pool": pool}))
			}
			for i := range 1000 {
				p := pod("w1", fmt.Sprintf("web-%d-%d", i%10, i), map[string]string{"app": fmt.Sprintf("app-%d", i%10)})
				f.add(b, f.pods, p)
			}
			ctx := context.Background()
			want := int64(0)
			if bc.name == "refuses-all" {
				want = 1000
			}
			built := f.pending(b)
			simulated, _ := f.simulated(b)
			// "built": Evaluators built for each count (a Live without a
			// Simulator); "simulator": the manager's, built once.
			for name, pp := range map[string]*PendingPods{"built": built, "simulator": simulated} {
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						got, err := pp.WouldStrand(ctx, "p", 1, 0)
						if err != nil || got.Count != want {
							b.Fatalf("got %+v, %v; want %d", got, err, want)
						}
					}
				})
			}
		})
	}
}

// gangFixture is a wave's policy that keeps the members of big gangs
// (minCount above 2) off spot nodes, two spot nodes, and pending members
// of a gang of 4 (big) and one of 2 (small), with their PodGroups.
func gangFixture(t *testing.T) (*fixture, []*schedulingv1beta1.PodGroup) {
	f := newFixture(t, namespace("ml", map[string]string{"wave": "1"}))
	f.registry.Upsert(builder.MakePolicy("small-gangs-on-spot").UID("policy-gangs").Generation(1, "1").
		Audit().Wave("first", map[string]string{"wave": "1"}, time.Minute).
		Filter("big-gangs-off-spot", "podGroup.minCount <= 2 || node.metadata.labels['pool'] != 'spot'").Obj())
	f.add(t, f.nodes, node("spot-1", map[string]string{"pool": "spot"}), node("spot-2", map[string]string{"pool": "spot"}))
	member := func(name, group string) *corev1.Pod {
		p := pod("ml", name, map[string]string{"app": "trainer"})
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		return p
	}
	f.add(t, f.pods, member("big-0", "big"), member("big-1", "big"), member("small-0", "small"))
	return f, []*schedulingv1beta1.PodGroup{podGroup("ml", "big", 4, ""), podGroup("ml", "small", 2, "")}
}

// TestPendingPodsPodGroups: the gate's evaluations read a pod's group
// from Live.PodGroups, as the scheduler does: a filter on podGroup.minCount
// strands the pods of a big gang and not those of a small one; without
// the PodGroups (GenericWorkload off) a group has its name alone (minCount
// 0), and no pod is stranded. A list that fails fails the count: a gate
// is not passed on a count of 0 that was never made.
func TestPendingPodsPodGroups(t *testing.T) {
	t.Parallel()
	f, groups := gangFixture(t)
	for _, tc := range []struct {
		name      string
		podGroups func() ([]*schedulingv1beta1.PodGroup, error)
		want      audit.Stranded
	}{
		{"podgroups", func() ([]*schedulingv1beta1.PodGroup, error) { return groups, nil }, audit.Stranded{Count: 2, Pods: []string{"ml/big-0", "ml/big-1"}}},
		{"no-podgroups", nil, audit.Stranded{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pp := f.pending(t)
			pp.PodGroups = tc.podGroups
			got, err := pp.WouldStrand(context.Background(), "small-gangs-on-spot", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tc.want.Count || !slices.Equal(got.Pods, tc.want.Pods) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	pp := f.pending(t)
	pp.PodGroups = func() ([]*schedulingv1beta1.PodGroup, error) { return nil, fmt.Errorf("the informer is gone") }
	if _, err := pp.WouldStrand(context.Background(), "small-gangs-on-spot", 1, 0); err == nil || !strings.Contains(err.Error(), "listing PodGroups: the informer is gone") {
		t.Errorf("WouldStrand with a failing PodGroup list: %v, want the listing error", err)
	}
}

// TestPendingPodsGangMembersGatesOn: with the workload gates on, the
// profile runs GangScheduling, whose PreEnqueue holds a member until its
// group's other members are in the queue, which a pod evaluated alone
// never meets. The gate's count is still the policy's: the big gang's
// members are stranded, not left uncounted as held either way.
func TestPendingPodsGangMembersGatesOn(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true,
	})
	f, groups := gangFixture(t)
	pp := f.pending(t)
	pp.PodGroups = func() ([]*schedulingv1beta1.PodGroup, error) { return groups, nil }
	got, err := pp.WouldStrand(context.Background(), "small-gangs-on-spot", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (audit.Stranded{Count: 2, Pods: []string{"ml/big-0", "ml/big-1"}}); got.Count != want.Count || !slices.Equal(got.Pods, want.Pods) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestWouldStrandWaitsForRoom: a pending pod whose own node selector
// leaves it only a spot node without room for it now is counted: once
// the wave that refuses spot nodes is enforced, it could never run there,
// even when the room frees. A pod that waits for room on a node the wave
// admits, and one no node would fit even with room, are not.
func TestWouldStrandWaitsForRoom(t *testing.T) {
	t.Parallel()
	f := newFixture(t, namespace("w1", map[string]string{"wave": "1"}))
	f.registry.Upsert(builder.MakePolicy("no-spot").UID("policy-no-spot").Generation(1, "1").Audit().
		Wave("first", map[string]string{"wave": "1"}, time.Minute).
		Filter("no-spot", "node.metadata.labels['pool'] != 'spot'").Obj())
	small := func(name, pool, zone string) *corev1.Node {
		n := node(name, map[string]string{"pool": pool, "zone": zone})
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
		return n
	}
	f.add(t, f.nodes, small("spot-f", "spot", "f"), small("od-g", "on-demand", "g"))
	waiting := func(name, zone, cpu string) *corev1.Pod {
		p := pod("w1", name, map[string]string{"app": name})
		if zone != "" {
			p.Spec.NodeSelector = map[string]string{"zone": zone}
		}
		requesting(cpu)(p)
		return p
	}
	f.add(t, f.pods, waiting("zone-f", "f", "2"), waiting("zone-g", "g", "2"), waiting("huge", "", "64"))
	got, err := f.pending(t).WouldStrand(context.Background(), "no-spot", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (audit.Stranded{Count: 1, Pods: []string{"w1/zone-f"}}); !slices.Equal(got.Pods, want.Pods) || got.Count != want.Count {
		t.Errorf("WouldStrand = %+v, want %+v", got, want)
	}
}

// The objects of the tests' clusters.
var (
	namespace  = builder.Namespace
	node       = builder.Node
	pod        = builder.Pod
	requesting = builder.Requesting
	podGroup   = builder.PodGroup
)
