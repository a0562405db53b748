package celplugins

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestPolicyFeed: through the wrapped informer factory, every handler
// added to the SchedulingPolicy informer (kube-scheduler's, which runs the
// queueing hints) sees each event only after the registry holds it; the
// handler's registration syncs only once the initial list is compiled; a
// policy deleted and re-created under its name is the new object.
func TestPolicyFeed(t *testing.T) {
	t.Parallel()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	var mu sync.Mutex
	var notified []string
	feed := &PolicyFeed{Registry: registry, Logger: klog.Background(), Compiled: func(name string) {
		mu.Lock()
		defer mu.Unlock()
		notified = append(notified, name)
	}}

	// The fake client serves unstructured objects only: the scheme must not
	// know the typed kind.
	scheme := runtime.NewScheme()
	stored := []runtime.Object{}
	for _, name := range []string{"a", "b", "c"} {
		stored = append(stored, unstructuredOf(t, typed(builder.MakePolicy(name).Stored().Filter("f", "true").Obj())))
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{PolicyGVR: "SchedulingPolicyList"}, stored...)
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	wrapped := feed.WrapInformers(factory)

	var events []seen
	record := func(event string, obj any) {
		obj, _ = tombstoned[any](obj)
		name := obj.(metav1.Object).GetName()
		s := seen{Event: event, Name: name}
		if p := registry.Snapshot().Get(name); p != nil {
			s.UID, s.Generation = string(p.UID), p.Generation
		}
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
	}
	reg, err := wrapped.ForResource(PolicyGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !feed.Attached() {
		t.Fatal("the feed is not attached to the handler")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("the handler did not sync")
	}
	if got := registry.Snapshot().Len(); got != 3 {
		t.Fatalf("after the initial list the registry holds %d policies, want 3", got)
	}

	res := client.Resource(PolicyGVR)
	updated := builder.MakePolicy("a").Stored().Filter("f", "false").Generation(2, "").Obj()
	if _, err := res.Update(ctx, unstructuredOf(t, typed(updated)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := res.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated := builder.MakePolicy("b").Stored().UID("uid-b-2").Filter("g", "true").Obj()
	if _, err := res.Create(ctx, unstructuredOf(t, typed(recreated)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(events) == 6 })

	mu.Lock()
	defer mu.Unlock()
	want := []seen{
		{Event: "add", Name: "a", UID: "uid-a", Generation: 1},
		{Event: "add", Name: "b", UID: "uid-b", Generation: 1},
		{Event: "add", Name: "c", UID: "uid-c", Generation: 1},
		{Event: "update", Name: "a", UID: "uid-a", Generation: 2},
		{Event: "delete", Name: "b"},
		{Event: "add", Name: "b", UID: "uid-b-2", Generation: 1},
	}
	if diff := cmp.Diff(want, sortedInitial(events)); diff != "" {
		t.Errorf("the registry as each handler call saw it (-want +got):\n%s", diff)
	}
	if got := registry.Snapshot().Get("b").FilterRuleNames(); !cmp.Equal(got, []string{"g"}) {
		t.Errorf("re-created b has filters %v, want [g]", got)
	}
	if len(notified) != 6 {
		t.Errorf("Compiled told %d times (%v), want 6", len(notified), notified)
	}
}

// seen is what the registry held for an event's name when the handler ran.
type seen struct {
	Event, Name, UID string
	Generation       int64
}

// typed sets the type meta an object needs to be stored as unstructured.
func typed(p *schedv1alpha1.SchedulingPolicy) *schedv1alpha1.SchedulingPolicy {
	p.APIVersion, p.Kind = schedv1alpha1.GroupVersion.String(), "SchedulingPolicy"
	return p
}

// sortedInitial orders the initial list's adds (the first three events) by
// name; the list's order is the fake client's.
func sortedInitial(events []seen) []seen {
	out := slices.Clone(events)
	slices.SortFunc(out[:3], func(a, b seen) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNamespaceFeed: a handler added to the wrapped Namespace informer (the
// scheduler's, which runs the namespace queueing hint) runs after the feed
// has given the new version to Runtime.ObserveNamespace.
func TestNamespaceFeed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var observed []string
	feed := &PolicyFeed{Logger: klog.Background(), Namespace: func(ns *corev1.Namespace) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, ns.Name+"@"+ns.Labels["team"])
	}}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"team": "a"}}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NamespaceGVR: "NamespaceList"}, unstructuredOf(t, ns))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	var seenByHandler []string
	record := func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		seenByHandler = append(seenByHandler, fmt.Sprintf("%s after %v", obj.(metav1.Object).GetName(), slices.Clone(observed)))
	}
	reg, err := feed.WrapInformers(factory).ForResource(NamespaceGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("the handler did not sync")
	}
	ns.Labels["team"] = "b"
	if _, err := client.Resource(NamespaceGVR).Update(ctx, unstructuredOf(t, ns), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seenByHandler) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"ml after [ml@a]", "ml after [ml@a ml@b]"}, seenByHandler); diff != "" {
		t.Errorf("what the handler ran after (-want +got):\n%s", diff)
	}
}
