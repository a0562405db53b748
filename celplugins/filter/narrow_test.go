package filter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/engine/metrics"
	"github.com/celsched/celsched/test/builder"
)

// rackNodes are two nodes in each of three racks.
func rackNodes() []fwk.NodeInfo {
	var nodes []fwk.NodeInfo
	for _, rack := range []string{"a", "b", "c"} {
		for i := 1; i <= 2; i++ {
			ni := framework.NewNodeInfo()
			name := fmt.Sprintf("%s%d", rack, i)
			node := st.MakeNode().Name(name).UID(name).Label("rack", rack).Obj()
			node.ResourceVersion = "1" // the remembered outcomes are a node version's
			ni.SetNode(node)
			nodes = append(nodes, ni)
		}
	}
	return nodes
}

// relabel returns a node's new version with a label set.
func relabel(ni fwk.NodeInfo, key, value string) fwk.NodeInfo {
	node := ni.Node().DeepCopy()
	node.ResourceVersion += "1"
	node.Labels[key] = value
	out := framework.NewNodeInfo()
	out.SetNode(node)
	return out
}

// TestWorthNarrowing: the cost model's verdicts on the cases
// worthNarrowing's comment names, and kube-scheduler's number of
// feasible nodes to find.
func TestWorthNarrowing(t *testing.T) {
	for _, c := range []struct {
		percentage int32
		all, want  int
	}{{0, 50, 50}, {0, 1000, 420}, {0, 5000, 500}, {0, 15000, 750}, {10, 500, 100}, {100, 5000, 5000}} {
		if got := feasibleToFind(c.percentage, c.all); got != c.want {
			t.Errorf("feasibleToFind(%d, %d) = %d, want %d", c.percentage, c.all, got, c.want)
		}
	}
	for _, c := range []struct {
		admitted, refused int
		percentage        int32
		want              bool
	}{
		{500, 500, 0, true},     // half of 1000 nodes
		{2500, 2500, 0, false},  // half of 5000: 750 to score instead of 500
		{2500, 2500, 100, true}, // ... unless every feasible node is scored
		{500, 4500, 0, true},    // a rack in ten of 5000
		{100, 900, 0, true},     // a rack in ten of 1000
		{900, 100, 0, false},    // NodeOnly10's rules
		{5, 1, 0, false},        // one node in six
		{2, 4, 0, true},
		{0, 1000, 0, false}, // Filter gives each node its reason
		{1000, 0, 0, false},
	} {
		if got := worthNarrowing(c.admitted, c.refused, c.percentage); got != c.want {
			t.Errorf("worthNarrowing(%d admitted, %d refused, %d%%) = %v, want %v", c.admitted, c.refused, c.percentage, got, c.want)
		}
	}
}

func rackPod(name, rack string) *corev1.Pod {
	return st.MakePod().Namespace("ns").Name(name).UID(name).Label("rack", rack).Obj()
}

// cycle runs CELFilter's PreFilter, then Filter on the nodes it selected
// (every node when it selected none), then Reserve; it returns the
// PreFilterResult's nodes (nil: every node) and the nodes Filter passed.
func cycle(t *testing.T, pl *Filter, pod *corev1.Pod, nodes []fwk.NodeInfo) (selected, passed sets.Set[string]) {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	res, s := pl.PreFilter(ctx, state, pod, nodes)
	if !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	passed = sets.New[string]()
	for _, ni := range nodes {
		if !res.AllNodes() && !res.NodeNames.Has(ni.Node().Name) {
			continue
		}
		if pl.Filter(ctx, state, pod, ni).IsSuccess() {
			passed.Insert(ni.Node().Name)
		}
	}
	pl.Reserve(ctx, state, pod, "")
	if res.AllNodes() {
		return nil, passed
	}
	return res.NodeNames, passed
}

// TestNarrow: once every node's outcome for a class of pods is
// remembered, CELFilter's PreFilter hands kube-scheduler the nodes the
// filters admit, and counts the refused ones as Filter would; it leaves
// every node to Filter when an outcome is missing (a node's new version),
// when narrowing is not worth it (worthNarrowing; such a class is looked
// at again after recheckAfter pods, then half as often while it is still
// not worth it) or the filters refuse every node, and
// always for a pod whose last attempt was unschedulable, for filters
// that read nodeInfo, and in a dry run.
func TestNarrow(t *testing.T) {
	t.Parallel()
	sameRack := builder.MakePolicy("narrow-racks").Filter("same-rack", "pod.metadata.labels['rack'] == node.metadata.labels['rack']").Obj()
	newPlugin := func(policies ...*schedv1alpha1.SchedulingPolicy) *Filter {
		pl := &Filter{rt: plugintest.Runtime(t, policies, plugintest.Namespace("ns", nil)), narrowed: newNarrowed(), narrowedPods: newNarrowedPods()}
		pl.args.EvaluationBudget.Duration = time.Minute
		return pl
	}
	rackA := sets.New("a1", "a2")

	pl := newPlugin(sameRack)
	nodes := rackNodes()
	if sel, passed := cycle(t, pl, rackPod("p1", "a"), nodes); sel != nil || !passed.Equal(rackA) {
		t.Fatalf("first pod: selected %v, passed %v; want every node, %v", sel, passed, sets.List(rackA))
	}
	deny := testutil.ToFloat64(metrics.EvaluationsTotal.WithLabelValues("narrow-racks", "filters/same-rack", metrics.ResultDeny))
	allow := testutil.ToFloat64(metrics.EvaluationsTotal.WithLabelValues("narrow-racks", "filters/same-rack", metrics.ResultAllow))
	if sel, passed := cycle(t, pl, rackPod("p2", "a"), nodes); !sel.Equal(rackA) || !passed.Equal(rackA) {
		t.Fatalf("second pod of the class: selected %v, passed %v; want %v", sets.List(sel), sets.List(passed), sets.List(rackA))
	}
	// The refused nodes are counted as Filter counts them.
	if got := testutil.ToFloat64(metrics.EvaluationsTotal.WithLabelValues("narrow-racks", "filters/same-rack", metrics.ResultDeny)) - deny; got != 4 {
		t.Errorf("denials counted: %v, want 4", got)
	}
	if got := testutil.ToFloat64(metrics.EvaluationsTotal.WithLabelValues("narrow-racks", "filters/same-rack", metrics.ResultAllow)) - allow; got != 2 {
		t.Errorf("allows counted: %v, want 2", got)
	}
	// Another class (rack b) is narrowed once its own outcomes are known.
	if sel, _ := cycle(t, pl, rackPod("p3", "b"), nodes); sel != nil {
		t.Errorf("first pod of rack b: selected %v, want every node", sets.List(sel))
	}
	if sel, _ := cycle(t, pl, rackPod("p4", "b"), nodes); !sel.Equal(sets.New("b1", "b2")) {
		t.Errorf("second pod of rack b: selected %v, want b1, b2", sets.List(sel))
	}

	// A node's new version: its outcome is not known yet.
	changed := rackNodes()
	c1 := changed[4].Node().DeepCopy()
	c1.ResourceVersion = "2"
	c1.Labels["rack"] = "a"
	changed[4] = framework.NewNodeInfo()
	changed[4].SetNode(c1)
	wantA := sets.New("a1", "a2", "c1")
	if sel, passed := cycle(t, pl, rackPod("p5", "a"), changed); sel != nil || !passed.Equal(wantA) {
		t.Errorf("after a node changed: selected %v, passed %v; want every node, %v", sets.List(sel), sets.List(passed), sets.List(wantA))
	}
	if sel, _ := cycle(t, pl, rackPod("p6", "a"), changed); !sel.Equal(wantA) {
		t.Errorf("then: selected %v, want %v", sets.List(sel), sets.List(wantA))
	}

	// A narrowed pod that kube-scheduler writes Unschedulable (here: its
	// cycle ends after PreFilter, as when another plugin refuses the
	// nodes admitted) is retried (its own update), over every node; then
	// it is not retried so again.
	p6 := rackPod("p6b", "a")
	if res, _ := pl.PreFilter(context.Background(), framework.NewCycleState(), p6, changed); res.AllNodes() {
		t.Fatalf("%s not narrowed", p6.Name)
	}
	unschedulable := p6.DeepCopy()
	unschedulable.ResourceVersion = "2"
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	hint := func(pod, updated *corev1.Pod) fwk.QueueingHint {
		t.Helper()
		h, err := pl.narrowedHint(klog.Background(), pod, pod, updated)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if got := hint(p6, unschedulable); got != fwk.Queue {
		t.Errorf("a narrowed pod written Unschedulable: hint %v, want Queue", got)
	}
	if got := hint(p6, p6); got != fwk.QueueSkip {
		t.Errorf("a narrowed pod updated otherwise: hint %v, want QueueSkip", got)
	}
	if got := hint(rackPod("p5", "a"), unschedulable); got != fwk.QueueSkip {
		t.Errorf("another pod's update: hint %v, want QueueSkip", got)
	}
	if sel, _ := cycle(t, pl, unschedulable, changed); sel != nil {
		t.Errorf("the retried pod: selected %v, want every node", sets.List(sel))
	}
	if got := hint(p6, unschedulable); got != fwk.QueueSkip {
		t.Errorf("a pod whose last cycle was not narrowed: hint %v, want QueueSkip", got)
	}

	// A pod no node admits: every node goes to Filter, for its reasons.
	for _, name := range []string{"z1", "z2"} {
		if sel, passed := cycle(t, pl, rackPod(name, "z"), changed); sel != nil || passed.Len() != 0 {
			t.Errorf("%s: selected %v, passed %v; want every node, none", name, sets.List(sel), sets.List(passed))
		}
	}
	// A pod whose last attempt was unschedulable.
	failed := rackPod("p7", "a")
	failed.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	if sel, _ := cycle(t, pl, failed, changed); sel != nil {
		t.Errorf("a pod unschedulable before: selected %v, want every node", sets.List(sel))
	}
	// A dry run gives every node its reason.
	pl.rt.EveryNode = true
	if sel, _ := cycle(t, pl, rackPod("p8", "a"), changed); sel != nil {
		t.Errorf("a dry run: selected %v, want every node", sets.List(sel))
	}

	// Filters reading nodeInfo: the pods on a node change without the node.
	info := newPlugin(builder.MakePolicy("narrow-info").Filter("same-rack", "pod.metadata.labels['rack'] == node.metadata.labels['rack'] && size(nodeInfo.pods) < 10").Obj())
	for _, name := range []string{"i1", "i2"} {
		if sel, _ := cycle(t, info, rackPod(name, "a"), nodes); sel != nil {
			t.Errorf("a filter reading nodeInfo, %s: selected %v, want every node", name, sets.List(sel))
		}
	}
	// Filters that admit every node, or refuse too few to be worth it
	// (worthNarrowing).
	for _, policy := range []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("narrow-all").Filter("any", "node.metadata.name != ''").Obj(),
		builder.MakePolicy("narrow-not-c1").Filter("not-c1", "node.metadata.name != 'c1'").Obj(),
	} {
		pl := newPlugin(policy)
		for _, name := range []string{"n1", "n2", "n3"} {
			if sel, _ := cycle(t, pl, rackPod(name, "a"), nodes); sel != nil {
				t.Errorf("%s, %s: selected %v, want every node", policy.Name, name, sets.List(sel))
			}
		}
	}
	// A class not worth narrowing is looked at again after recheckAfter
	// pods: here the nodes' new versions make its rule refuse four of six.
	blocked := newPlugin(builder.MakePolicy("narrow-blocked").Filter("not-blocked", "node.metadata.labels[?'blocked'].orValue('') != 'true'").Obj())
	few := rackNodes()
	few[4] = relabel(few[4], "blocked", "true") // c1
	for _, name := range []string{"f1", "f2"} {
		if sel, _ := cycle(t, blocked, rackPod(name, "a"), few); sel != nil {
			t.Fatalf("one node blocked, %s: selected %v, want every node", name, sets.List(sel))
		}
	}
	many := rackNodes()
	for i := 2; i < 6; i++ {
		many[i] = relabel(many[i], "blocked", "true")
	}
	narrowedAt := 0
	for i := 1; i <= recheckAfter+2 && narrowedAt == 0; i++ {
		if sel, _ := cycle(t, blocked, rackPod(fmt.Sprintf("m%d", i), "a"), many); sel != nil {
			if !sel.Equal(rackA) {
				t.Fatalf("four nodes blocked, pod %d: selected %v, want a1, a2", i, sets.List(sel))
			}
			narrowedAt = i
		}
	}
	if narrowedAt == 0 {
		t.Errorf("four nodes blocked: no pod of %d narrowed, want one after at most %d", recheckAfter+2, recheckAfter+1)
	}

	// A class still not worth narrowing is looked at half as often each
	// time (64, 128, ... pods), down to once per maxRecheckAfter pods: after
	// a thousand pods over the same nodes, the nodes' new versions that
	// make it worth narrowing are noticed later than after 64 pods, and
	// within maxRecheckAfter.
	steady := newPlugin(builder.MakePolicy("narrow-steady").Filter("not-blocked", "node.metadata.labels[?'blocked'].orValue('') != 'true'").Obj())
	for i := range 1000 {
		if sel, _ := cycle(t, steady, rackPod(fmt.Sprintf("s%d", i), "a"), few); sel != nil {
			t.Fatalf("one node blocked, pod %d: selected %v, want every node", i, sets.List(sel))
		}
	}
	narrowedAt = 0
	for i := 1; i <= maxRecheckAfter+2 && narrowedAt == 0; i++ {
		if sel, _ := cycle(t, steady, rackPod(fmt.Sprintf("t%d", i), "a"), many); sel != nil {
			narrowedAt = i
		}
	}
	if narrowedAt <= 2*recheckAfter { // 0: not narrowed at all
		t.Errorf("four nodes blocked after a thousand pods with one: narrowed at pod %d, want after %d and at most %d", narrowedAt, 2*recheckAfter, maxRecheckAfter+2)
	}

	// Node-only filters refusing more than half of the nodes: one class
	// for every pod.
	onlyA := newPlugin(builder.MakePolicy("narrow-a").Filter("a", "node.metadata.labels['rack'] == 'a'").Obj())
	cycle(t, onlyA, rackPod("o1", "b"), nodes)
	if sel, _ := cycle(t, onlyA, rackPod("o2", "c"), nodes); !sel.Equal(rackA) {
		t.Errorf("node-only filters: selected %v, want a1, a2", sets.List(sel))
	}
}
