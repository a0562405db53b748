package celplugins

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

var (
	configMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")
	configMapGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
	// clusterPlacementGVK is a cluster-scoped param kind the fixture's API
	// server serves.
	clusterPlacementGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "ClusterPlacement"}
	clusterPlacementGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "clusterplacements"}
)

func paramsConfigMap(namespace, name, zones string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(configMapGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetUID(ktypes.UID("uid-" + namespace + "-" + name))
	u.Object["data"] = map[string]any{"zones": zones}
	return u
}

// paramsFixture is a ParamsStore over a fake API server serving ConfigMaps
// and ClusterPlacements, fed by a registry holding the policies.
type paramsFixture struct {
	env      *engine.Environment
	store    *ParamsStore
	registry *engine.Registry
	client   *dynamicfake.FakeDynamicClient
	mu       sync.Mutex
	changed  []string
	listed   []string
}

func newParamsFixture(t *testing.T, objs ...runtime.Object) *paramsFixture {
	t.Helper()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(configMapGVK, meta.RESTScopeNamespace)
	mapper.Add(clusterPlacementGVK, meta.RESTScopeRoot)
	f := &paramsFixture{
		env:      env,
		registry: engine.NewRegistry(engine.NewCompiler(env)),
		client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{configMapGVR: "ConfigMapList", clusterPlacementGVR: "ClusterPlacementList"}, objs...),
	}
	f.store = &ParamsStore{Env: env, Client: f.client, Mapper: mapper, Logger: klog.Background(),
		Changed: func(kind schema.GroupVersionKind, oldObj, newObj *unstructured.Unstructured) {
			f.mu.Lock()
			defer f.mu.Unlock()
			what := "add"
			switch {
			case oldObj != nil && newObj != nil:
				what = "update"
			case newObj == nil:
				what = "delete"
			}
			obj := newObj
			if obj == nil {
				obj = oldObj
			}
			f.changed = append(f.changed, what+" "+kind.Kind+" "+obj.GetNamespace()+"/"+obj.GetName())
		},
		Listed: func(kind schema.GroupVersionKind) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.listed = append(f.listed, kind.Kind)
		}}
	t.Cleanup(f.store.Stop)
	return f
}

func (f *paramsFixture) upsert(p *schedv1alpha1.SchedulingPolicy) {
	f.registry.Upsert(p)
	f.store.Sync(f.registry.Snapshot())
}

func (f *paramsFixture) changes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.changed...)
}

func tenantParamsPolicy(name string) *schedv1alpha1.SchedulingPolicy {
	return builder.MakePolicy(name).Stored().ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
		Filter("zone", "node.metadata.labels[?'zone'].orValue('') in params.data['zones'].split(',')").Obj()
}

func TestParamsStore(t *testing.T) {
	t.Parallel()
	f := newParamsFixture(t, paramsConfigMap("team-a", "placement", "a"), paramsConfigMap("team-b", "other", "b"))
	f.upsert(tenantParamsPolicy("tenant"))
	if !f.store.WaitForSync(t.Context()) {
		t.Fatal("not synced")
	}
	if err := f.store.KindError(configMapGVK); err != nil {
		t.Errorf("KindError of a listed kind: %v", err)
	}
	spec := f.registry.Snapshot().Get("tenant").ParamSpec()
	resolve := func(namespace string) []*engine.Params {
		t.Helper()
		got, err := f.store.Resolve(spec, st.MakePod().Namespace(namespace).Name("p").Obj())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a := resolve("team-a")
	if len(a) != 1 || a[0].String() != "ConfigMap team-a/placement" {
		t.Fatalf("team-a: got %v", a)
	}
	if b := resolve("team-b"); len(b) != 0 {
		t.Errorf("team-b: got %v, want none (its ConfigMap has another name)", b)
	}
	// Converted once per version, bound once per policy and version.
	if again := resolve("team-a"); again[0] != a[0] {
		t.Error("the same version was converted again")
	}
	policy := f.registry.Snapshot().Get("tenant")
	first := f.store.Bound(policy, a[0])
	if second := f.store.Bound(policy, a[0]); first != second || first.Params() != a[0] {
		t.Error("the same policy and params version were bound twice")
	}

	// An update is seen, converted anew, and reported.
	cm := paramsConfigMap("team-a", "placement", "b")
	cm.SetResourceVersion("2")
	if _, err := f.client.Resource(configMapGVR).Namespace("team-a").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { got := resolve("team-a"); return len(got) == 1 && got[0] != a[0] })
	waitFor(t, func() bool { return len(f.changes()) >= 3 })
	want := []string{"add ConfigMap team-a/placement", "add ConfigMap team-b/other", "update ConfigMap team-a/placement"}
	got := f.changes()
	if diff := cmp.Diff(want, got, sortStrings); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}

	// The kind was said to be listed, once. The store is synced when its
	// informer is; the report of it comes from a goroutine that polls for
	// that (cache.WaitForCacheSync), so it may come a little later.
	waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.listed) > 0 })
	f.mu.Lock()
	listed := slices.Clone(f.listed)
	f.mu.Unlock()
	if !slices.Equal(listed, []string{"ConfigMap"}) {
		t.Errorf("listed %v, want ConfigMap once", listed)
	}

	// The last policy naming the kind goes: its informer stops, and the
	// kind is no longer watched.
	f.registry.Delete("tenant")
	f.store.Sync(f.registry.Snapshot())
	if _, err := f.store.Resolve(spec, st.MakePod().Namespace("team-a").Name("p").Obj()); !IsParamsNotReady(err) {
		t.Errorf("after the policy is gone: err %v, want not ready (not watched)", err)
	}
}

var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

func TestParamsStoreKindNotServed(t *testing.T) {
	t.Parallel()
	f := newParamsFixture(t)
	f.upsert(builder.MakePolicy("crd").Stored().ParamKind("example.com/v1", "TenantPlacement").ParamRef("p", "", "").Filter("f", "true").Obj())
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "TenantPlacement"}
	err := f.store.KindError(gvk)
	if err == nil || !strings.Contains(err.Error(), "paramKind example.com/v1, Kind=TenantPlacement is not served by the API server") {
		t.Errorf("KindError: %v", err)
	}
	spec := f.registry.Snapshot().Get("crd").ParamSpec()
	if _, err := f.store.Resolve(spec, st.MakePod().Namespace("a").Name("p").Obj()); err == nil || IsParamsNotReady(err) {
		t.Errorf("Resolve: %v, want the kind's error (which follows failurePolicy)", err)
	}
	if err := f.store.KindError(configMapGVK); !IsParamsNotReady(err) {
		t.Errorf("a kind no policy names: %v, want not ready (not watched)", err)
	}
}

// laterMapper serves its kinds only once served is set, as an API server
// does once a CRD is installed, and counts the lookups.
type laterMapper struct {
	meta.RESTMapper
	served  atomic.Bool
	lookups atomic.Int32
}

func (m *laterMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.lookups.Add(1)
	if !m.served.Load() {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// TestParamsStoreReadersStartNothing: reading a kind that is not served
// (Resolve, KindError, Namespace, Bound) looks nothing up and starts no
// informer, however long after it was found not served; the store's own
// retry looks it up again and starts it once the kind is served, and its
// objects are then resolved.
func TestParamsStoreReadersStartNothing(t *testing.T) {
	t.Parallel()
	f := newParamsFixture(t, paramsConfigMap("team-a", "placement", "a"))
	mapper := &laterMapper{RESTMapper: f.store.Mapper}
	f.store.Mapper = mapper
	// A retry that cannot fire before it is stopped (a 1 ms one could,
	// under -race and load), then short ones.
	f.store.kindRetry = time.Hour
	f.upsert(tenantParamsPolicy("tenant"))
	// Hold the store's retry, to see what the readers do alone.
	f.store.mu.Lock()
	if f.store.retry == nil || !f.store.retry.Stop() {
		f.store.mu.Unlock()
		t.Fatal("Sync armed no retry of the kind that is not served")
	}
	f.store.retry = nil
	const kindRetry = time.Millisecond
	f.store.kindRetry = kindRetry
	f.store.mu.Unlock()
	lookups := mapper.lookups.Load()

	spec := f.registry.Snapshot().Get("tenant").ParamSpec()
	pod := st.MakePod().Namespace("team-a").Name("p").Obj()
	params := &engine.Params{Kind: configMapGVK, Namespace: "team-a", Name: "placement"}
	for range 5 {
		time.Sleep(2 * kindRetry)
		if _, err := f.store.Resolve(spec, pod); err == nil || IsParamsNotReady(err) {
			t.Fatalf("Resolve of a kind not served: %v, want its error", err)
		}
		if err := f.store.KindError(configMapGVK); err == nil {
			t.Fatal("KindError of a kind not served: nil")
		}
		_ = f.store.Namespace(spec, pod)
		_ = f.store.Bound(f.registry.Snapshot().Get("tenant"), params)
	}
	if got := mapper.lookups.Load(); got != lookups {
		t.Fatalf("the readers looked the kind up %d times, want none (only the store's sync does)", got-lookups)
	}

	mapper.served.Store(true)
	f.store.mu.Lock()
	f.store.armRetry()
	f.store.mu.Unlock()
	waitFor(t, func() bool { return f.store.KindError(configMapGVK) == nil })
	got, err := f.store.Resolve(spec, pod)
	if err != nil || len(got) != 1 || got[0].String() != "ConfigMap team-a/placement" {
		t.Fatalf("after the kind is served: %v, %v", got, err)
	}
}

func TestParamsStoreNotSynced(t *testing.T) {
	t.Parallel()
	f := newParamsFixture(t)
	// Named by no policy: not watched yet, so not ready (never skipped).
	spec := &engine.ParamSpec{Kind: configMapGVK, Name: "placement"}
	_, err := f.store.Resolve(spec, st.MakePod().Namespace("a").Name("p").Obj())
	if !IsParamsNotReady(err) {
		t.Errorf("Resolve of a kind not watched: %v, want not ready", err)
	}
}

// fakeActivator records the pods ParamsChanged activates.
type fakeActivator struct {
	pods      []*corev1.Pod
	activated []string
}

func (a *fakeActivator) attach(rt *Runtime) {
	rt.Requeue.activator.Store(&podActivator{
		activate: func(_ klog.Logger, pods map[string]*corev1.Pod) {
			for k := range pods {
				a.activated = append(a.activated, k)
			}
		},
		pods: func(namespace string) ([]*corev1.Pod, error) {
			var out []*corev1.Pod
			for _, p := range a.pods {
				if namespace == "" || p.Namespace == namespace {
					out = append(out, p)
				}
			}
			return out, nil
		},
	})
}

func TestParamsChanged(t *testing.T) {
	t.Parallel()
	pods := []*corev1.Pod{
		st.MakePod().Namespace("team-a").Name("pending").Obj(),
		st.MakePod().Namespace("team-a").Name("bound").Node("n1").Obj(),
		st.MakePod().Namespace("team-b").Name("pending").Label("team", "b").Obj(),
	}
	perNamespace := tenantParamsPolicy("per-namespace")
	fixed := builder.MakePolicy("fixed").Stored().ParamKind("v1", "ConfigMap").ParamRef("global", "shared", "").Filter("f", "true").Obj()
	tests := map[string]struct {
		policies       []*schedv1alpha1.SchedulingPolicy
		oldObj, newObj *unstructured.Unstructured
		want           []string
	}{
		"a namespace's params: its pending pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{perNamespace},
			newObj:   paramsConfigMap("team-a", "placement", "a"),
			want:     []string{"team-a/pending"},
		},
		"deleted": {
			policies: []*schedv1alpha1.SchedulingPolicy{perNamespace},
			oldObj:   paramsConfigMap("team-b", "placement", "a"),
			want:     []string{"team-b/pending"},
		},
		"an object no policy reads": {
			policies: []*schedv1alpha1.SchedulingPolicy{perNamespace},
			newObj:   paramsConfigMap("team-a", "unrelated", "a"),
		},
		"a fixed object: every pending pod": {
			policies: []*schedv1alpha1.SchedulingPolicy{fixed},
			oldObj:   paramsConfigMap("shared", "global", "a"),
			newObj:   paramsConfigMap("shared", "global", "b"),
			want:     []string{"team-a/pending", "team-b/pending"},
		},
		"a fixed object: the pending pods its policy's selectors select": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("fixed-b").Stored().ParamKind("v1", "ConfigMap").
				ParamRef("global", "shared", "").PodLabels(map[string]string{"team": "b"}).Filter("f", "true").Obj()},
			newObj: paramsConfigMap("shared", "global", "b"),
			want:   []string{"team-b/pending"},
		},
		"the fixed object's name in another namespace": {
			policies: []*schedv1alpha1.SchedulingPolicy{fixed},
			newObj:   paramsConfigMap("team-a", "global", "b"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env, err := engine.NewEnvironment()
			if err != nil {
				t.Fatal(err)
			}
			registry := engine.NewRegistry(engine.NewCompiler(env))
			for _, p := range tc.policies {
				registry.Upsert(p)
			}
			rt := NewRuntime(registry, engine.NewConverter(env, 0))
			a := &fakeActivator{pods: pods}
			a.attach(rt)
			rt.Requeue.ParamsChanged(configMapGVK, tc.oldObj, tc.newObj)
			if diff := cmp.Diff(tc.want, a.activated, sortStrings); diff != "" {
				t.Errorf("activated (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParamsListed: once a param kind is listed, the pending pods that a
// policy of that kind selects are requeued (those refused while it was
// not listed), bound pods and pods no such policy selects are not.
func TestParamsListed(t *testing.T) {
	t.Parallel()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	registry.Upsert(builder.MakePolicy("tenant").Stored().ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
		PodLabels(map[string]string{"team": "a"}).Filter("f", "true").Obj())
	rt := NewRuntime(registry, engine.NewConverter(env, 0))
	a := &fakeActivator{pods: []*corev1.Pod{
		st.MakePod().Namespace("team-a").Name("pending").Label("team", "a").Obj(),
		st.MakePod().Namespace("team-a").Name("bound").Label("team", "a").Node("n1").Obj(),
		st.MakePod().Namespace("team-b").Name("pending").Label("team", "b").Obj(),
	}}
	a.attach(rt)
	rt.Requeue.ParamsListed(configMapGVK)
	if diff := cmp.Diff([]string{"team-a/pending"}, a.activated); diff != "" {
		t.Errorf("activated (-want +got):\n%s", diff)
	}
	a.activated = nil
	rt.Requeue.ParamsListed(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Other"})
	if len(a.activated) != 0 {
		t.Errorf("a kind no policy reads activated %v", a.activated)
	}
}
