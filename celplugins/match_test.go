package celplugins

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestMatchShared: a cycle's Match is kept and shared by the pod's next
// cycle and by its queueing hints while the pod, its namespace and the
// policies are the versions it was made from; a change of any of them
// gives a new Match, which agrees with one made fresh; a pod without a
// resourceVersion is never kept; bound and deleted pods leave. (The params
// objects: TestMatchParams.)
func TestMatchShared(t *testing.T) {
	t.Parallel()
	ns := namespace("ns", "1", map[string]string{"team": "a"})
	rt, registry := newTestRuntime(t, ns)
	registry.Upsert(testPolicy("team-a", "1", "a", "node.metadata.labels['rack'] == 'r1'", 1))
	p := pod("ns", "p", map[string]string{"app": "web"})
	p.ResourceVersion = "10"
	ctx := context.Background()

	prepare := func(pod *corev1.Pod) *Match {
		t.Helper()
		c, err := rt.Prepare(ctx, pod, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c.Match
	}
	first := prepare(p)
	if len(first.Filters) != 1 {
		t.Fatalf("the policy of team a does not apply: %d filters", len(first.Filters))
	}
	if again := prepare(p); again != first {
		t.Error("the pod's next cycle matched again although nothing changed")
	}
	hinted, err := rt.Inputs.Match(ctx, p)
	if err != nil || hinted != first {
		t.Errorf("a hint did not read the kept Match (%p, %v; kept %p)", hinted, err, first)
	}
	if _, err := rt.Requeue.NodeHint(klog.Background(), p, nil, node("n", "1", map[string]string{"rack": "r1"})); err != nil {
		t.Fatal(err)
	}

	// Each change is a new Match, which agrees with a fresh one.
	changes := []struct {
		name   string
		change func() *corev1.Pod
		// filters is how many policies with filters apply after it.
		filters int
	}{
		{"the pod's version", func() *corev1.Pod {
			q := p.DeepCopy()
			q.ResourceVersion = "11"
			return q
		}, 1},
		{"the namespace's labels", func() *corev1.Pod {
			rt.Inputs.ObserveNamespace(namespace("ns", "2", map[string]string{"team": "b"}))
			return p
		}, 0},
		{"the policies", func() *corev1.Pod {
			registry.Upsert(testPolicy("team-b", "1", "b", "true", 1))
			return p
		}, 1},
	}
	last := first
	for _, ch := range changes {
		q := ch.change()
		m := prepare(q)
		if m == last {
			t.Errorf("after a change of %s, the kept Match was reused", ch.name)
		}
		if len(m.Filters) != ch.filters {
			t.Errorf("after a change of %s: %d policies with filters apply, want %d", ch.name, len(m.Filters), ch.filters)
		}
		fresh := newMatch(ctx, registry.Snapshot(), m.Pod)
		if len(fresh.Filters) != len(m.Filters) || len(fresh.Scores) != len(m.Scores) || (fresh.Rejection == nil) != (m.Rejection == nil) {
			t.Errorf("after a change of %s, the Match differs from a fresh one", ch.name)
		}
		if again := prepare(q); again != m {
			t.Errorf("after a change of %s, the new Match was not kept", ch.name)
		}
		last = m
	}

	unversioned := pod("ns", "dry-run", nil)
	a, b := prepare(unversioned), prepare(unversioned)
	if a == b {
		t.Error("the Match of a pod without a resourceVersion was kept")
	}

	rt.Inputs.forgetPod(p.UID)
	if _, kept := rt.Inputs.matches.byPod.Load(p.UID); kept {
		t.Error("a forgotten pod's Match is still kept")
	}
}

// TestMatchNotKeptPastBudget: a match whose evaluations ran out of the
// cycle's time is not kept (a later cycle with time must evaluate it).
func TestMatchNotKeptPastBudget(t *testing.T) {
	t.Parallel()
	rt, registry := newTestRuntime(t, namespace("ns", "1", nil))
	registry.Upsert(builder.MakePolicy("any").Filter("f", "true").Obj())
	p := pod("ns", "p", nil)
	p.ResourceVersion = "1"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rt.Prepare(ctx, p, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, kept := rt.Inputs.matches.byPod.Load(p.UID); kept {
		t.Error("a Match made after the cycle's context ended was kept")
	}
}

// paramsRuntime is a runtime over the fixture's registry and params store,
// whose namespace lister holds the namespaces.
func paramsRuntime(t *testing.T, f *paramsFixture, namespaceList ...*corev1.Namespace) *Runtime {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaceList {
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	rt := NewRuntime(f.registry, engine.NewConverter(f.env, 0))
	rt.Inputs.UseNamespaces(corelisters.NewNamespaceLister(indexer))
	rt.Inputs.Params = f.store
	return rt
}

// waitListed waits until the store has said that the kinds' objects are
// listed (after it moved their versions).
func (f *paramsFixture) waitListed(t *testing.T, kinds ...string) {
	t.Helper()
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range kinds {
			if !slices.Contains(f.listed, k) {
				return false
			}
		}
		return true
	})
}

// write creates, updates (a new resourceVersion) or, with obj's data nil,
// deletes a params object, and waits until the store has seen it.
func (f *paramsFixture) write(t *testing.T, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, rv string) {
	t.Helper()
	ctx := context.Background()
	client := f.client.Resource(gvr).Namespace(obj.GetNamespace())
	kind, what := obj.GetKind(), "add"
	var err error
	switch _, getErr := client.Get(ctx, obj.GetName(), metav1.GetOptions{}); {
	case obj.Object["data"] == nil:
		what = "delete"
		err = client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
	case getErr == nil:
		what = "update"
		obj.SetResourceVersion(rv)
		_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
	default:
		obj.SetResourceVersion(rv)
		_, err = client.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := what + " " + kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	waitFor(t, func() bool { return slices.Contains(f.changes(), seen) })
}

// TestMatchParams: a kept Match is invalidated only by the params objects
// its pod's bindings may read. A ConfigMap written in a namespace that no
// policy's params read, another object of a namespace that a paramRef
// names one object of, or the namespace a policy that does not select the
// pod reads, leaves every kept Match in place (the same pointer); a write
// of the object a binding reads by name, or in the namespace a binding's
// selector reads, gives the pod a new Match, made from the new objects. So
// do a cluster-scoped kind's objects.
func TestMatchParams(t *testing.T) {
	t.Parallel()
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(clusterPlacementGVK)
	cluster.SetName("default")
	cluster.SetUID("uid-cluster-default")
	cluster.Object["data"] = map[string]any{"zones": "a"}
	f := newParamsFixture(t, paramsConfigMap("team-a", "placement", "a"), paramsConfigMap("team-b", "placement", "b"), cluster)
	// tenant reads the ConfigMap placement of the pod's namespace; shared
	// the ConfigMaps labelled tier=gpu of the namespace shared, for pods
	// labelled app=gpu; cluster the ClusterPlacement default.
	f.upsert(tenantParamsPolicy("tenant"))
	f.upsert(builder.MakePolicy("shared").Stored().ParamKind("v1", "ConfigMap").
		ParamSelector(map[string]string{"tier": "gpu"}, "shared", schedv1alpha1.AllowAction).
		PodLabels(map[string]string{"app": "gpu"}).Filter("f", "params.data['zones'] != ''").Obj())
	f.upsert(builder.MakePolicy("cluster").Stored().ParamKind("example.com/v1", "ClusterPlacement").
		ParamRef("default", "", schedv1alpha1.DenyAction).Filter("f", "params.data['zones'] != ''").Obj())
	f.waitListed(t, "ConfigMap", "ClusterPlacement")
	rt := paramsRuntime(t, f, namespace("team-a", "1", nil), namespace("team-b", "1", nil))
	podA := pod("team-a", "a", nil)
	podB := pod("team-b", "b", map[string]string{"app": "gpu"})
	podA.ResourceVersion, podB.ResourceVersion = "1", "1"
	prepare := func(p *corev1.Pod) *Match {
		t.Helper()
		c, err := rt.Prepare(context.Background(), p, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return c.Match
	}
	// params names the params objects the Match's filter policies are
	// bound to, with their versions.
	params := func(m *Match) []string {
		var out []string
		for _, p := range m.Filters {
			if b := p.Params(); b != nil {
				out = append(out, p.Name+": "+b.String()+"@"+b.ResourceVersion)
			}
		}
		if m.Rejection != nil {
			out = append(out, "rejected: "+m.Rejection.String())
		}
		return out
	}
	kept := map[*corev1.Pod]*Match{podA: prepare(podA), podB: prepare(podB)}
	if diff := cmp.Diff([]string{"cluster: ClusterPlacement default@", "tenant: ConfigMap team-a/placement@"}, params(kept[podA])); diff != "" {
		t.Fatalf("pod a's bindings (-want +got):\n%s", diff)
	}

	steps := []struct {
		name  string
		write func()
		// renewed are the pods whose Match is new after the write; the
		// others keep theirs. want are their bindings then.
		renewed map[*corev1.Pod][]string
	}{
		{name: "a ConfigMap in a namespace no policy reads", write: func() {
			f.write(t, configMapGVR, paramsConfigMap("elsewhere", "placement", "z"), "1")
		}},
		{name: "another ConfigMap of the namespace whose placement tenant reads", write: func() {
			f.write(t, configMapGVR, paramsConfigMap("team-a", "other", "z"), "1")
		}},
		{name: "a ClusterPlacement no policy names", write: func() {
			other := cluster.DeepCopy()
			other.SetName("other")
			other.SetUID("uid-cluster-other")
			f.write(t, clusterPlacementGVR, other, "1")
		}},
		{name: "a ConfigMap labelled tier=gpu in shared, which only pod b's policies read", write: func() {
			cm := paramsConfigMap("shared", "gpu", "g")
			cm.SetLabels(map[string]string{"tier": "gpu"})
			f.write(t, configMapGVR, cm, "1")
		}, renewed: map[*corev1.Pod][]string{podB: {"cluster: ClusterPlacement default@", "shared: ConfigMap shared/gpu@1", "tenant: ConfigMap team-b/placement@"}}},
		{name: "an unlabelled ConfigMap in shared: the selector's namespace", write: func() {
			f.write(t, configMapGVR, paramsConfigMap("shared", "plain", "p"), "1")
		}, renewed: map[*corev1.Pod][]string{podB: {"cluster: ClusterPlacement default@", "shared: ConfigMap shared/gpu@1", "tenant: ConfigMap team-b/placement@"}}},
		{name: "the placement pod a's binding reads", write: func() {
			f.write(t, configMapGVR, paramsConfigMap("team-a", "placement", "b"), "2")
		}, renewed: map[*corev1.Pod][]string{podA: {"cluster: ClusterPlacement default@", "tenant: ConfigMap team-a/placement@2"}}},
		{name: "the placement pod b's binding reads, deleted", write: func() {
			gone := paramsConfigMap("team-b", "placement", "")
			delete(gone.Object, "data")
			f.write(t, configMapGVR, gone, "")
		}, renewed: map[*corev1.Pod][]string{podB: {"cluster: ClusterPlacement default@", "shared: ConfigMap shared/gpu@1",
			"rejected: node(s) rejected by SchedulingPolicy tenant, rule paramRef: no params ConfigMap placement in namespace team-b found (parameterNotFoundAction Deny)"}}},
		{name: "the ClusterPlacement every pod's binding reads", write: func() {
			f.write(t, clusterPlacementGVR, cluster.DeepCopy(), "3")
		}, renewed: map[*corev1.Pod][]string{
			podA: {"cluster: ClusterPlacement default@3", "tenant: ConfigMap team-a/placement@2"},
			podB: {"cluster: ClusterPlacement default@3", "shared: ConfigMap shared/gpu@1",
				"rejected: node(s) rejected by SchedulingPolicy tenant, rule paramRef: no params ConfigMap placement in namespace team-b found (parameterNotFoundAction Deny)"},
		}},
	}
	for _, step := range steps {
		step.write()
		for _, p := range []*corev1.Pod{podA, podB} {
			m := prepare(p)
			want, renewed := step.renewed[p]
			switch {
			case !renewed && m != kept[p]:
				t.Errorf("after %s, pod %s's kept Match was dropped", step.name, p.Name)
			case renewed && m == kept[p]:
				t.Errorf("after %s, pod %s's kept Match was reused", step.name, p.Name)
			case renewed:
				if diff := cmp.Diff(want, params(m)); diff != "" {
					t.Errorf("after %s, pod %s's bindings (-want +got):\n%s", step.name, p.Name, diff)
				}
			}
			if again := prepare(p); again != m {
				t.Errorf("after %s, pod %s's Match was not kept", step.name, p.Name)
			}
			kept[p] = m
		}
	}
}

// TestMatchParamsKind: a kept Match that read a param kind's state (not
// watched yet, not served) is made again once that changes, and not
// before.
func TestMatchParamsKind(t *testing.T) {
	t.Parallel()
	// matcher prepares p's cycles on the fixture's runtime: next checks
	// that the Match is new (or not) and kept, and returns it.
	type matcher struct {
		rt   *Runtime
		last *Match
	}
	p := pod("team-a", "a", nil)
	p.ResourceVersion = "1"
	next := func(m *matcher, what string, renewed bool) *Match {
		t.Helper()
		prepare := func() *Match {
			t.Helper()
			c, err := m.rt.Prepare(context.Background(), p, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return c.Match
		}
		got := prepare()
		if (got != m.last) != renewed {
			t.Errorf("%s: Match renewed %v, want %v", what, got != m.last, renewed)
		}
		if again := prepare(); again != got {
			t.Errorf("%s: the Match was not kept", what)
		}
		m.last = got
		return got
	}
	// rejection is what rejects the pod on every node, "" when nothing.
	rejection := func(m *Match) string {
		if m.Rejection == nil {
			return ""
		}
		return m.Rejection.String()
	}

	t.Run("watched", func(t *testing.T) {
		t.Parallel()
		f := newParamsFixture(t, paramsConfigMap("team-a", "placement", "a"))
		m := &matcher{rt: paramsRuntime(t, f, namespace("team-a", "1", nil))}
		// The registry has the policy; the store has not synced it yet.
		f.registry.Upsert(tenantParamsPolicy("tenant"))
		if got := next(m, "not watched yet", true); !strings.Contains(rejection(got), "is not watched yet") {
			t.Fatalf("not watched yet: rejection %q", rejection(got))
		}
		f.store.Sync(f.registry.Snapshot())
		f.waitListed(t, "ConfigMap")
		if got := next(m, "watched and listed", true); rejection(got) != "" || len(got.Filters) != 1 {
			t.Fatalf("watched and listed: rejection %q, %d filter policies", rejection(got), len(got.Filters))
		}
		next(m, "nothing changed", false)
	})

	t.Run("served", func(t *testing.T) {
		t.Parallel()
		f := newParamsFixture(t, paramsConfigMap("team-a", "placement", "a"))
		mapper := &laterMapper{RESTMapper: f.store.Mapper}
		f.store.Mapper = mapper
		f.store.kindRetry = time.Hour
		f.upsert(tenantParamsPolicy("tenant"))
		m := &matcher{rt: paramsRuntime(t, f, namespace("team-a", "1", nil))}
		if got := next(m, "not served", true); !strings.Contains(rejection(got), "is not served") {
			t.Fatalf("not served: rejection %q", rejection(got))
		}
		next(m, "still not served", false)
		// The CRD is installed: the store's retry looks the kind up again.
		mapper.served.Store(true)
		f.store.mu.Lock()
		if f.store.retry != nil {
			f.store.retry.Stop()
			f.store.retry = nil
		}
		f.store.kindRetry = time.Millisecond
		f.store.armRetry()
		f.store.mu.Unlock()
		f.waitListed(t, "ConfigMap")
		if got := next(m, "served", true); rejection(got) != "" || len(got.Filters) != 1 {
			t.Fatalf("served: rejection %q, %d filter policies", rejection(got), len(got.Filters))
		}
		next(m, "nothing changed", false)
	})
}

// TestQueuedMatchShared: the Match CELPreEnqueue makes of a queued pod
// (Runtime.Queued) is kept, and the pod's cycle reuses it (one conversion,
// one match per pod version); a bound pod's Match is not kept (it has no
// cycle to come, and binding is what drops kept Matches), nor one made
// after its context ended; a negative QueuedBudget makes none.
func TestQueuedMatchShared(t *testing.T) {
	t.Parallel()
	rt, registry := newTestRuntime(t, namespace("ns", "1", nil))
	registry.Upsert(builder.MakePolicy("held").PreEnqueue("one", "pod.spec.containers.size() == 1", "").Filter("f", "true").Obj())
	ctx := context.Background()
	p := pod("ns", "p", nil)
	p.ResourceVersion = "3"

	queued, err := rt.Queued(ctx, p)
	if err != nil || queued == nil {
		t.Fatalf("Queued: %v, %v", queued, err)
	}
	if kept, _ := rt.Inputs.matches.byPod.Load(p.UID); kept != queued {
		t.Error("the queued pod's Match was not kept")
	}
	c, err := rt.Prepare(ctx, p, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.Match != queued {
		t.Error("the pod's cycle matched it again")
	}

	bound := pod("ns", "bound", nil)
	bound.ResourceVersion, bound.Spec.NodeName = "4", "n1"
	if m, err := rt.Queued(ctx, bound); err != nil || m == nil {
		t.Fatalf("Queued of a bound pod: %v, %v", m, err)
	}
	if _, kept := rt.Inputs.matches.byPod.Load(bound.UID); kept {
		t.Error("a bound pod's Match was kept")
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	late := pod("ns", "late", nil)
	late.ResourceVersion = "5"
	if m, err := rt.Queued(ended, late); m != nil || err != nil {
		t.Errorf("Queued after its context ended: %v, %v; want no Match", m, err)
	}
	if _, kept := rt.Inputs.matches.byPod.Load(late.UID); kept {
		t.Error("a Match made after the context ended was kept")
	}

	rt.QueuedBudget = -1
	other := pod("ns", "other", nil)
	other.ResourceVersion = "6"
	if m, err := rt.Queued(ctx, other); m != nil || err != nil {
		t.Errorf("Queued with a negative budget: %v, %v; want no Match", m, err)
	}
}
