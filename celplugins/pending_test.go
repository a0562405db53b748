package celplugins

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ktypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/test/builder"
)

// TestPendingPodsWouldStrand: a wave's pending pods count when the policy,
// enforced, would hold them or refuse every node their own node selector,
// tolerations and the cordons admit; not when a node they may use is
// accepted, when no node admits them at all, when they are bound, being
// deleted, another scheduler's or another wave's; nodeInfo is read from
// the bound pods; pods that differ only in name share an answer, pods
// whose node selectors differ do not; the names are capped; a generation
// the scheduler has not
// compiled, and informers that have not synced, are errors.
func TestPendingPodsWouldStrand(t *testing.T) {
	w1 := namespace("w1", "1", map[string]string{"wave": "1"})
	w2 := namespace("w2", "1", map[string]string{"wave": "2"})
	rt, registry := newTestRuntime(t, w1, w2)
	waves := func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
		return b.Audit().Wave("first", map[string]string{"wave": "1"}, time.Minute).Wave("second", map[string]string{"wave": "2"}, time.Minute)
	}
	registry.Upsert(waves(builder.MakePolicy("no-spot").UID("policy-no-spot").Generation(3, "1").
		PreEnqueue("approved", "!('hold' in pod.metadata.labels)", "held").
		Filter("no-spot", "node.metadata.labels['pool'] != 'spot'")).Obj())
	registry.Upsert(waves(builder.MakePolicy("empty-nodes").UID("policy-empty-nodes").Generation(1, "1").
		Filter("empty", "nodeInfo.podCount == 0")).Obj())

	nodeOf := func(name, pool, zone string) *corev1.Node {
		return node(name, "1", map[string]string{"pool": pool, "zone": zone})
	}
	tainted := nodeOf("od-1", "on-demand", "a")
	tainted.Spec.Taints = []corev1.Taint{{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
	cordoned := nodeOf("od-3", "on-demand", "c")
	cordoned.Spec.Unschedulable = true
	nodes := []*corev1.Node{nodeOf("spot-1", "spot", "a"), nodeOf("spot-2", "spot", "b"), nodeOf("spot-3", "spot", "c"),
		tainted, nodeOf("od-2", "on-demand", "b"), cordoned}

	pending := func(ns, name string, change func(*corev1.Pod)) *corev1.Pod {
		p := pod(ns, name, map[string]string{"app": name})
		p.ResourceVersion = "1"
		if change != nil {
			change(p)
		}
		return p
	}
	hold := func(p *corev1.Pod) { p.Labels["hold"] = "yes" }
	zone := func(z string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": z} }
	}
	pods := []*corev1.Pod{
		pending("w1", "fits", nil),
		pending("w1", "held", hold),
		pending("w1", "zone-a", zone("a")), // spot-1 only: od-1's taint is not tolerated
		pending("w1", "zone-a-tolerating", func(p *corev1.Pod) {
			zone("a")(p)
			p.Spec.Tolerations = []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
		}),
		pending("w1", "zone-c", zone("c")), // spot-3 only: od-3 is cordoned
		pending("w1", "zone-d", zone("d")), // no node at all
		pending("w1", "bound", func(p *corev1.Pod) { zone("a")(p); p.Spec.NodeName = "spot-1" }),
		pending("w1", "other-scheduler", func(p *corev1.Pod) { hold(p); p.Spec.SchedulerName = corev1.DefaultSchedulerName }),
		pending("w1", "deleting", func(p *corev1.Pod) { hold(p); p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }),
	}
	// Pods that differ only in name share an answer (one class); pods that
	// differ in their node selector do not.
	for _, twin := range []struct{ name, zone string }{{"twin-a", "a"}, {"twin-b", "b"}, {"twin-a2", "a"}} {
		pods = append(pods, pending("w1", twin.name, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "twin"}; zone(twin.zone)(p) }))
	}
	for i := range 7 {
		pods = append(pods, pending("w2", fmt.Sprintf("held-%d", i), hold))
	}
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		if err := podIndex.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := nodeIndex.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	pp := &PendingPods{Inputs: rt.Inputs, Pods: corelisters.NewPodLister(podIndex), Nodes: corelisters.NewNodeLister(nodeIndex), SchedulerNames: []string{"celsched"}}
	ctx := context.Background()

	for _, tc := range []struct {
		policy     string
		generation int64
		wave       int
		want       audit.Stranded
	}{
		{"no-spot", 3, 0, audit.Stranded{Count: 5, Pods: []string{"w1/held", "w1/twin-a", "w1/twin-a2", "w1/zone-a", "w1/zone-c"}}},
		{"no-spot", 3, 1, audit.Stranded{Count: 7, Pods: []string{"w2/held-0", "w2/held-1", "w2/held-2", "w2/held-3", "w2/held-4"}}},
		// spot-1 has the bound pod: the only node zone-a may use is refused;
		// zone-a-tolerating may use od-1, which is empty.
		{"empty-nodes", 1, 0, audit.Stranded{Count: 3, Pods: []string{"w1/twin-a", "w1/twin-a2", "w1/zone-a"}}},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.policy, tc.wave), func(t *testing.T) {
			got, err := pp.WouldStrand(ctx, tc.policy, tc.generation, tc.wave)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tc.want.Count || !slices.Equal(got.Pods, tc.want.Pods) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
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
	w1 := namespace("w1", "1", map[string]string{"wave": "1"})
	rt, registry := newTestRuntime(t, w1)
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	ab, ac := paramsConfigMap("w1", "p1", "a,b"), paramsConfigMap("w1", "p2", "a,c")
	for _, u := range []*unstructured.Unstructured{ab, ac} {
		u.SetLabels(map[string]string{"placement": "yes"})
	}
	params, err := engine.NewStaticParams(env, []*unstructured.Unstructured{ab, ac})
	if err != nil {
		t.Fatal(err)
	}
	rt.Inputs.Params = params
	registry.Upsert(builder.MakePolicy("zones").UID("policy-zones").Generation(1, "1").Audit().
		ParamKind("v1", "ConfigMap").ParamSelector(map[string]string{"placement": "yes"}, "", schedv1alpha1.DenyAction).
		Filter("zone", "node.metadata.labels['zone'] in params.data['zones'].split(',')").
		Wave("first", map[string]string{"wave": "1"}, time.Minute).Obj())
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, z := range []string{"a", "b", "c"} {
		if err := nodeIndex.Add(node("n-"+z, "1", map[string]string{"zone": z})); err != nil {
			t.Fatal(err)
		}
	}
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, z := range []string{"", "b"} {
		p := pod("w1", "zone-"+z, map[string]string{"app": "x"})
		p.ResourceVersion = "1"
		if z != "" {
			p.Spec.NodeSelector = map[string]string{"zone": z}
		}
		if err := podIndex.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pp := &PendingPods{Inputs: rt.Inputs, Pods: corelisters.NewPodLister(podIndex), Nodes: corelisters.NewNodeLister(nodeIndex), SchedulerNames: []string{"celsched"}}
	got, err := pp.WouldStrand(context.Background(), "zones", 1, 0)
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
// a rule that accepts most nodes (a class stops at its first accepted
// node); "refuses-all" is the worst case, a rule that refuses every node,
// so each class is evaluated on all of them.
func BenchmarkWouldStrand(b *testing.B) {
	w1 := namespace("w1", "1", map[string]string{"wave": "1"})
	for _, bc := range []struct{ name, filter string }{
		{"accepts", "node.metadata.labels['pool'] != 'spot'"},
		{"refuses-all", "node.metadata.labels['pool'] == 'none'"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt, registry := newTestRuntime(b, w1)
			registry.Upsert(builder.MakePolicy("p").UID("policy-p").Generation(1, "1").Audit().
				Filter("f", bc.filter).Wave("first", map[string]string{"wave": "1"}, time.Minute).Obj())
			nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for i := range 5000 {
				pool := "general"
				if i%10 == 0 {
					pool = "spot"
				}
				if err := nodeIndex.Add(node(fmt.Sprintf("node-%04d", i), "1", map[string]string{"pool": pool})); err != nil {
					b.Fatal(err)
				}
			}
			podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for i := range 1000 {
				p := pod("w1", fmt.Sprintf("web-%d-%d", i%10, i), map[string]string{"app": fmt.Sprintf("app-%d", i%10)})
				p.UID = ktypes.UID(fmt.Sprintf("pod-%d", i))
				p.ResourceVersion = "1"
				if err := podIndex.Add(p); err != nil {
					b.Fatal(err)
				}
			}
			pp := &PendingPods{Inputs: rt.Inputs, Pods: corelisters.NewPodLister(podIndex), Nodes: corelisters.NewNodeLister(nodeIndex), SchedulerNames: []string{"celsched"}}
			ctx := context.Background()
			want := int64(0)
			if bc.name == "refuses-all" {
				want = 1000
			}
			b.ReportAllocs()
			for b.Loop() {
				got, err := pp.WouldStrand(ctx, "p", 1, 0)
				if err != nil || got.Count != want {
					b.Fatalf("got %+v, %v; want %d", got, err, want)
				}
			}
		})
	}
}
