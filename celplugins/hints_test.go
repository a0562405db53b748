package celplugins

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// newTestRuntime returns a runtime over a registry, whose namespace lister
// holds namespaces.
func newTestRuntime(t testing.TB, namespaceList ...*corev1.Namespace) (*Runtime, *engine.Registry) {
	t.Helper()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaceList {
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	rt := NewRuntime(registry, engine.NewConverter(env, 0))
	rt.Inputs.namespaces = &namespaces{lister: corelisters.NewNamespaceLister(indexer), seen: map[string]*corev1.Namespace{}}
	return rt, registry
}

func namespace(name, rv string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("ns-" + name), ResourceVersion: rv, Labels: labels}}
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("pod-" + name), Labels: labels},
		Spec:       corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{Name: "c"}}},
	}
}

func node(name, rv string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: ktypes.UID("node-" + name), ResourceVersion: rv, Labels: labels}}
}

// testPolicy is an enforced policy with one filter for namespaces labelled
// team=<team> (any namespace when team is empty).
func testPolicy(name, rv, team, filter string, generation int64) *schedv1alpha1.SchedulingPolicy {
	b := builder.MakePolicy(name).UID("policy-"+name).Generation(generation, rv).Filter("f", filter)
	if team != "" {
		b = b.NamespaceLabels(map[string]string{"team": team})
	}
	return b.Obj()
}

func unstructuredOf(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestPolicyHint: the hint requeues a pod on a spec change or deletion of
// a policy whose old or new selectors select it, and only reads: the
// registry is what the feed made it.
func TestPolicyHint(t *testing.T) {
	t.Parallel()
	ml := namespace("ml", "10", map[string]string{"team": "ml"})
	p := pod("ml", "trainer", nil)
	v1 := testPolicy("gpu", "5", "ml", "false", 1)
	v1status := testPolicy("gpu", "6", "ml", "false", 1) // status write: same generation
	v2 := testPolicy("gpu", "7", "ml", "true", 2)
	other := testPolicy("web", "5", "web", "false", 1)
	otherV2 := testPolicy("web", "7", "web", "true", 2)

	cases := map[string]struct {
		oldObj, newObj any
		want           fwk.QueueingHint
	}{
		"added: adds rules only":                  {newObj: v1, want: fwk.QueueSkip},
		"status update":                           {oldObj: v1, newObj: v1status, want: fwk.QueueSkip},
		"spec update of a policy for the pod":     {oldObj: v1, newObj: v2, want: fwk.Queue},
		"spec update of another team's policy":    {oldObj: other, newObj: otherV2, want: fwk.QueueSkip},
		"deletion of a policy for the pod":        {oldObj: v1, want: fwk.Queue},
		"deletion seen as a tombstone":            {oldObj: cache.DeletedFinalStateUnknown{Key: "gpu", Obj: v1}, want: fwk.Queue},
		"deletion of another team's policy":       {oldObj: other, want: fwk.QueueSkip},
		"unstructured, as the dynamic informer":   {oldObj: unstructuredOf(t, v1), newObj: unstructuredOf(t, v2), want: fwk.Queue},
		"a selector change that now selects pods": {oldObj: testPolicy("gpu", "5", "web", "false", 1), newObj: testPolicy("gpu", "7", "ml", "false", 2), want: fwk.Queue},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, registry := newTestRuntime(t, ml)
			registry.Upsert(v1)
			before := registry.Snapshot()
			got, err := rt.Requeue.PolicyHint(klog.Background(), p, tc.oldObj, tc.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
			if registry.Snapshot() != before {
				t.Error("the hint changed the registry")
			}
		})
	}
}

func TestNamespaceHint(t *testing.T) {
	t.Parallel()
	old := namespace("ml", "10", map[string]string{"team": "ml"})
	approved := namespace("ml", "11", map[string]string{"team": "ml", "gpu-approved": "true"})
	annotated := old.DeepCopy()
	annotated.ResourceVersion = "11"
	annotated.Annotations = map[string]string{"a": "b"}
	cases := map[string]struct {
		oldObj, newObj *corev1.Namespace
		pod            *corev1.Pod
		want           fwk.QueueingHint
	}{
		"labels of the pod's namespace changed": {oldObj: old, newObj: approved, pod: pod("ml", "p", nil), want: fwk.Queue},
		"annotations only":                      {oldObj: old, newObj: annotated, pod: pod("ml", "p", nil), want: fwk.QueueSkip},
		"another namespace":                     {oldObj: old, newObj: approved, pod: pod("web", "p", nil), want: fwk.QueueSkip},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, _ := newTestRuntime(t, old) // the lister has not seen the update yet
			got, err := rt.Requeue.NamespaceHint(klog.Background(), tc.pod, unstructuredOf(t, tc.oldObj), unstructuredOf(t, tc.newObj))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}

	// The hint only reads; the retry reads the labels the feed observed
	// before the hint ran (PolicyFeed.Namespace), although the lister lags.
	rt, _ := newTestRuntime(t, old)
	if _, err := rt.Requeue.NamespaceHint(klog.Background(), pod("ml", "p", nil), old, approved); err != nil {
		t.Fatal(err)
	}
	if ns, err := rt.Inputs.namespaces.get("ml"); err != nil || ns.ResourceVersion != "10" {
		t.Errorf("namespace after the hint: %+v, %v; want the lister's version: the hint must not write", ns, err)
	}
	rt.Inputs.ObserveNamespace(approved)
	ns, err := rt.Inputs.namespaces.get("ml")
	if err != nil || ns.Labels["gpu-approved"] != "true" {
		t.Errorf("namespace after the feed observed the update: %+v, %v; want the approved version", ns, err)
	}
}

func TestOwnLabelsHint(t *testing.T) {
	t.Parallel()
	p := pod("ml", "p", map[string]string{"app": "a"})
	relabelled := pod("ml", "p", map[string]string{"app": "b"})
	other := pod("ml", "q", map[string]string{"app": "b"})
	cases := map[string]struct {
		oldObj, newObj *corev1.Pod
		want           fwk.QueueingHint
	}{
		"own labels changed":  {p, relabelled, fwk.Queue},
		"own labels the same": {p, p.DeepCopy(), fwk.QueueSkip},
		"another pod":         {pod("ml", "q", nil), other, fwk.QueueSkip},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := OwnLabelsHint(klog.Background(), p, tc.oldObj, tc.newObj)
			if err != nil || got != tc.want {
				t.Errorf("hint %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestNodeHint(t *testing.T) {
	t.Parallel()
	red := node("n1", "2", map[string]string{"color": "red"})
	blue := node("n1", "1", map[string]string{"color": "blue"})
	redAnnotated := red.DeepCopy()
	redAnnotated.ResourceVersion = "3"
	redAnnotated.Annotations = map[string]string{"a": "b"}
	p := pod("web", "p", nil)
	cases := map[string]struct {
		filter         string
		oldObj, newObj *corev1.Node
		want           fwk.QueueingHint
	}{
		"new node passes":              {filter: "node.metadata.labels['color'] == 'red'", newObj: red, want: fwk.Queue},
		"new node fails":               {filter: "node.metadata.labels['color'] == 'red'", newObj: blue, want: fwk.QueueSkip},
		"update makes the node pass":   {filter: "node.metadata.labels['color'] == 'red'", oldObj: blue, newObj: red, want: fwk.Queue},
		"update makes the node fail":   {filter: "node.metadata.labels['color'] == 'red'", oldObj: red, newObj: blue, want: fwk.QueueSkip},
		"passed before, passes now":    {filter: "node.metadata.labels['color'] == 'red'", oldObj: red, newObj: redAnnotated, want: fwk.QueueSkip},
		"error with Fail is rejection": {filter: "node.metadata.labels['missing'] == 'x'", oldObj: blue, newObj: red, want: fwk.QueueSkip},
		"nodeInfo cannot be judged":    {filter: "nodeInfo.podCount < 2", oldObj: red, newObj: redAnnotated, want: fwk.Queue},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, registry := newTestRuntime(t, namespace("web", "1", nil))
			registry.Upsert(testPolicy("colors", "1", "", tc.filter, 1))
			var oldObj any
			if tc.oldObj != nil {
				oldObj = tc.oldObj
			}
			got, err := rt.Requeue.NodeHint(klog.Background(), p, oldObj, tc.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodHint(t *testing.T) {
	t.Parallel()
	p := pod("web", "p", map[string]string{"app": "a"})
	assigned := pod("web", "running", nil)
	assigned.Spec.NodeName = "n1"
	unassigned := pod("web", "pending", nil)
	relabelled := p.DeepCopy()
	relabelled.Labels = map[string]string{"app": "b"}
	cases := map[string]struct {
		filter         string
		oldObj, newObj any
		want           fwk.QueueingHint
	}{
		"assigned pod deleted, nodeInfo rule":    {filter: "nodeInfo.podCount < 2", oldObj: assigned, want: fwk.Queue},
		"assigned pod deleted, tombstone":        {filter: "nodeInfo.podCount < 2", oldObj: cache.DeletedFinalStateUnknown{Obj: assigned}, want: fwk.Queue},
		"assigned pod added, nodeInfo rule":      {filter: "nodeInfo.podCount < 2", newObj: assigned, want: fwk.Queue},
		"assigned pod deleted, no nodeInfo rule": {filter: "node.metadata.name == 'n1'", oldObj: assigned, want: fwk.QueueSkip},
		"unassigned pod deleted":                 {filter: "nodeInfo.podCount < 2", oldObj: unassigned, want: fwk.QueueSkip},
		"the pod's own labels changed":           {filter: "true", oldObj: p, newObj: relabelled, want: fwk.Queue},
		"the pod's own update, labels unchanged": {filter: "true", oldObj: p, newObj: p.DeepCopy(), want: fwk.QueueSkip},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, registry := newTestRuntime(t, namespace("web", "1", nil))
			registry.Upsert(testPolicy("rules", "1", "", tc.filter, 1))
			got, err := rt.Requeue.PodHint(klog.Background(), p, tc.oldObj, tc.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHintsOnlyRead: the node and pod hints evaluate the policies for the
// pod, and record nothing: no tally is started or flushed, no error or slow
// rule is recorded, no policy is reported to the status writer, although
// the policies fail at match time under Ignore, fail a filter under Fail
// and audit; no Match is kept. (They start no timer either: their evaluations run under a
// hintContext, whose deadline needs none.)
func TestHintsOnlyRead(t *testing.T) {
	t.Parallel()
	rt, registry := newTestRuntime(t, namespace("ns", "1", nil))
	registry.Upsert(builder.MakePolicy("condition-fails").Ignore().Condition("c", "pod.metadata.labels['missing'] == 'x'").
		Filter("f", "node.metadata.name != ''").Obj())
	registry.Upsert(builder.MakePolicy("filter-fails").Filter("rack", "node.metadata.labels['rack'] == 'r1'").Obj())
	registry.Upsert(builder.MakePolicy("audit").Audit().Filter("zone", "node.metadata.?labels[?'zone'].orValue('') == 'a'").Obj())
	registry.Upsert(builder.MakePolicy("pods").Filter("few", "nodeInfo.podCount < 10").Obj())
	notified := 0
	rt.Report.Notify = func(string) { notified++ }
	tallies := [2]any{rt.Report.tallies[0].Load(), rt.Report.tallies[1].Load()}
	p := pod("ns", "p", map[string]string{"app": "web"})
	p.ResourceVersion = "1" // a Match of it could be kept
	logger := klog.Background()
	if _, err := rt.Requeue.NodeHint(logger, p, node("n", "1", nil), node("n", "2", map[string]string{"rack": "r1"})); err != nil {
		t.Fatal(err)
	}
	other := pod("ns", "other", nil)
	other.Spec.NodeName = "n"
	if hint, err := rt.Requeue.PodHint(logger, p, nil, other); err != nil || hint != fwk.Queue {
		t.Fatalf("PodHint: %v, %v, want Queue (a filter reads nodeInfo)", hint, err)
	}
	if got := [2]any{rt.Report.tallies[0].Load(), rt.Report.tallies[1].Load()}; got != tallies {
		t.Errorf("a hint changed the cycle's tallies")
	}
	for _, name := range []string{"condition-fails", "filter-fails", "audit", "pods"} {
		if r, ok := rt.Report.Errors.Get(name); ok {
			t.Errorf("a hint recorded an error of %s: %+v", name, r)
		}
		if r, ok := rt.Report.Slow.Get(name); ok {
			t.Errorf("a hint recorded a slow rule of %s: %+v", name, r)
		}
	}
	if notified != 0 {
		t.Errorf("hints notified the status writer %d times", notified)
	}
	if _, kept := rt.Inputs.matches.byPod.Load(p.UID); kept {
		t.Error("a hint kept the pod's Match")
	}
	// The same evaluations in a cycle do record.
	if _, err := rt.Prepare(context.Background(), p, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Report.Errors.Get("condition-fails"); !ok {
		t.Errorf("Prepare recorded no error of condition-fails: the test's policy does not fail")
	}
}
