package verdict

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	schedulerconfigfile "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestClassVerdictReschedule: a bound pod's verdict from its class's
// evaluation and its own node (ClassVerdict.Reschedule) is the verdict of
// a whole cycle of its own (Evaluator.Reschedule, Result.Placement) on
// every bound pod: accepted and refused nodes, the feasible count, the
// node's total score and rank. Where removing the pod could move another
// node's verdict or normalized score (a node that admits the pod only
// without it, topology spread over the pods on each node, a score rule
// reading nodeInfo, a cycle out of distinct messages), it takes the whole
// cycle; otherwise it never does.
func TestClassVerdictReschedule(t *testing.T) {
	zones := []string{"a", "b", "c"}
	spread := func(when corev1.UnsatisfiableConstraintAction) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
				WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
		}
	}
	zoneFilter := builder.MakePolicy("no-c").Filter("zone", "node.metadata.labels['zone'] != 'c'").Obj()
	preferA := builder.MakePolicy("prefer-a").Score("a", "node.metadata.labels['zone'] == 'a' ? 100 : 0", 1, schedv1alpha1.MinMax).Obj()
	tests := map[string]struct {
		policies []*schedv1alpha1.SchedulingPolicy
		// cpu is each replica's request; nodeCPU, when set, the first
		// node's allocatable CPU.
		cpu     string
		nodeCPU string
		mutate  func(*corev1.Pod)
		// wantFallbacks says whether some pod takes a whole cycle.
		wantFallbacks bool
	}{
		"node rules and resources": {policies: []*schedv1alpha1.SchedulingPolicy{zoneFilter, preferA}, cpu: "500m"},
		"no policy":                {cpu: "100m"},
		"a node that fits the pod only without it": {policies: []*schedv1alpha1.SchedulingPolicy{preferA}, cpu: "900m", nodeCPU: "1",
			wantFallbacks: true},
		"soft spread over each node's pods":       {cpu: "100m", mutate: spread(corev1.ScheduleAnyway), wantFallbacks: true},
		"hard spread (PreFilter tracks removals)": {cpu: "100m", mutate: spread(corev1.DoNotSchedule), wantFallbacks: true},
		"a score reading nodeInfo": {policies: []*schedv1alpha1.SchedulingPolicy{
			builder.MakePolicy("fewest").Score("pods", "nodeInfo.podCount", 1, schedv1alpha1.MinMaxReverse).Obj()}, cpu: "100m", wantFallbacks: true},
		"a message per node": {policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("named").
			FilterMsg("zone", "node.metadata.labels['zone'] != 'c'", "", "'node ' + node.metadata.name + ' is in zone c'").Obj()},
			cpu: "100m", wantFallbacks: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var nodes []*corev1.Node
			for i := range 60 {
				n := node(fmt.Sprintf("n-%02d", i), map[string]string{"zone": zones[i%3], corev1.LabelHostname: fmt.Sprintf("n-%02d", i)})
				if i == 0 && tc.nodeCPU != "" {
					n.Status.Allocatable[corev1.ResourceCPU] = resourceQuantity(tc.nodeCPU)
				}
				nodes = append(nodes, n)
			}
			var pods []*corev1.Pod
			for i := range 40 {
				p := pod("web", fmt.Sprintf("web-%02d", i), map[string]string{"app": "web"})
				requesting(tc.cpu)(p)
				if tc.mutate != nil {
					tc.mutate(p)
				}
				p.Spec.NodeName = nodes[(i*7)%len(nodes)].Name // some nodes hold two
				pods = append(pods, p)
			}
			e := newEvaluator(t, namespace("web", nil), nodes, pods, tc.policies)
			cv, err := e.EvaluateClass(ctx, pods[0])
			if err != nil {
				t.Fatal(err)
			}
			accepted, refused := 0, 0
			for _, p := range pods {
				got, err := cv.Reschedule(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				full, err := e.Reschedule(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				want := full.Placement(p.Spec.NodeName)
				if diff := cmp.Diff(comparable(want), comparable(got)); diff != "" {
					t.Errorf("pod %s on %s (-whole cycle +class):\n%s", p.Name, p.Spec.NodeName, diff)
				}
				if want.Node != nil && want.Node.Feasible {
					accepted++
				} else {
					refused++
				}
			}
			if (cv.Fallbacks() > 0) != tc.wantFallbacks {
				t.Errorf("%d of %d pods took a whole cycle; want some: %v", cv.Fallbacks(), len(pods), tc.wantFallbacks)
			}
			if accepted == 0 {
				t.Errorf("no pod's node accepts it: the case tests nothing")
			}
			t.Logf("%d accepted, %d refused, %d whole cycles", accepted, refused, cv.Fallbacks())
		})
	}
}

// comparable is what Reschedule's verdicts must agree on: the node's
// per-plugin scores are a whole cycle's detail.
func comparable(p Placement) Placement {
	if p.Node != nil {
		n := *p.Node
		n.PluginScores = nil
		p.Node = &n
	}
	return p
}

// TestClassEvaluatedOnce: a class's pods cost one cycle over every node,
// whatever their number; pending pods share its Result, and its nodes
// refused for one reason share one Rejection.
func TestClassEvaluatedOnce(t *testing.T) {
	ctx := context.Background()
	var nodes []*corev1.Node
	for i := range 20 {
		nodes = append(nodes, node(fmt.Sprintf("n-%02d", i), map[string]string{"zone": []string{"a", "b"}[i%2]}))
	}
	var bound []*corev1.Pod
	for i := range 30 {
		p := pod("web", fmt.Sprintf("web-%02d", i), map[string]string{"app": "web"})
		p.Spec.NodeName = nodes[i%len(nodes)].Name
		bound = append(bound, p)
	}
	e := newEvaluator(t, namespace("web", nil), nodes, bound,
		[]*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("only-a").Filter("zone", "node.metadata.labels['zone'] == 'a'").Obj()})
	before := e.sweeps.Load()
	cv, err := e.EvaluateClass(ctx, pod("web", "pending", map[string]string{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bound {
		if _, err := cv.Reschedule(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.sweeps.Load() - before; got != 1 || cv.Fallbacks() != 0 {
		t.Errorf("%d cycles over every node and %d whole cycles for one class of %d bound pods; want 1 and 0", got, cv.Fallbacks(), len(bound))
	}
	if got := len(cv.Result().Feasible); got != 10 {
		t.Errorf("the class has %d feasible nodes; want the 10 of zone a", got)
	}
	// The 10 nodes of zone b are refused for one reason: one Rejection,
	// not one per node.
	var shared *Rejection
	refused := 0
	for _, n := range cv.Result().Nodes {
		if n.RejectedBy == nil {
			continue
		}
		refused++
		if shared == nil {
			shared = n.RejectedBy
		}
		if n.RejectedBy != shared {
			t.Errorf("node %s's rejection %+v is not the other refused nodes' %+v (%p, %p)", n.Name, *n.RejectedBy, *shared, n.RejectedBy, shared)
		}
	}
	if refused != 10 {
		t.Errorf("%d refused nodes; want the 10 of zone b", refused)
	}
}

func newEvaluator(t *testing.T, ns *corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, policies []*schedv1alpha1.SchedulingPolicy) *Evaluator {
	t.Helper()
	return newEvaluatorWith(t, ns, nodes, pods, policies, func(*schedulerconfig.KubeSchedulerConfiguration) {})
}

// newEvaluatorWith is newEvaluator with the default configuration changed
// by edit.
func newEvaluatorWith(t *testing.T, ns *corev1.Namespace, nodes []*corev1.Node, pods []*corev1.Pod, policies []*schedv1alpha1.SchedulingPolicy, edit func(*schedulerconfig.KubeSchedulerConfiguration)) *Evaluator {
	t.Helper()
	return newEvaluatorOver(t, NewCluster([]*corev1.Namespace{ns}, nodes, pods, nil), policies, edit)
}

// newEvaluatorOver builds the Evaluator of the policies over a cluster,
// with the default configuration changed by edit.
func newEvaluatorOver(t *testing.T, c *Cluster, policies []*schedv1alpha1.SchedulingPolicy, edit func(*schedulerconfig.KubeSchedulerConfiguration)) *Evaluator {
	t.Helper()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	compiler := engine.NewCompiler(env)
	var compiled []*engine.CompiledPolicy
	for i, p := range policies {
		p = p.DeepCopy()
		p.UID = ktypes.UID(fmt.Sprint("uid-", i))
		compiled = append(compiled, compiler.Compile(p, engine.CompileOptions{Stored: true}))
	}
	cfg, err := schedulerconfigfile.Load("")
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	// No test here is about the CEL time budget: a minute, as impact's and
	// analyze's, keeps a loaded machine (-race, packages in parallel) from
	// spending the profile's 100 ms on a descheduled goroutine.
	e, err := New(context.Background(), c, Policies{Snapshot: engine.NewSnapshot(compiled...), Converter: engine.NewConverter(env, 0)}, Options{Config: cfg, Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestClassOfGroupMembers: the members of one group share a class when the
// policies read the group's object only (the class holds the group's name,
// in the spec, and its namespace); members of another group do not; a
// policy that reads where the members are (which changes as they land)
// makes each pod a class of its own.
func TestClassOfGroupMembers(t *testing.T) {
	t.Parallel()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func(filter string) *engine.Snapshot {
		p := engine.NewCompiler(env).Compile(builder.MakePolicy("p").Filter("f", filter).Obj(), engine.CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		return engine.NewSnapshot(p)
	}
	member := func(name, group string) *corev1.Pod {
		p := pod("ml", name, nil)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		return p
	}
	classOf := func(s *engine.Snapshot, p *corev1.Pod) string {
		class, ok := Class(s, p)
		if !ok {
			return "(own)"
		}
		return class
	}
	object := snapshot("podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'")
	if a0, a1 := classOf(object, member("a-0", "a")), classOf(object, member("a-1", "a")); a0 != a1 || a0 == "(own)" {
		t.Errorf("two members of group a: classes %s and %s, want one", a0, a1)
	}
	if a0, b0 := classOf(object, member("a-0", "a")), classOf(object, member("b-0", "b")); a0 == b0 {
		t.Errorf("members of groups a and b share the class %s", a0)
	}
	members := snapshot("node.metadata.name in podGroup.assignedNodes")
	if a0 := classOf(members, member("a-0", "a")); a0 != "(own)" {
		t.Errorf("a member under a policy reading assignedNodes has the class %s, want its own", a0)
	}
}

// TestEvaluatorReadsPodGroup: a dry run's podGroup is the cluster's
// PodGroup (WithPodGroups) and where the cluster's pods of the group are,
// as the scheduler's is its pod group state: a gang of 8 is refused the
// small nodes, and a filter keeping members together admits only the node
// of the member already bound; without the PodGroups, a group is its name
// alone (minCount 0).
func TestEvaluatorReadsPodGroup(t *testing.T) {
	ctx := context.Background()
	small, large := map[string]string{"size": "small"}, map[string]string{"size": "large"}
	nodes := []*corev1.Node{node("small-1", small), node("small-2", small), node("large-1", large), node("large-2", large)}
	member := func(name, group, nodeName string) *corev1.Pod {
		p := pod("ml", name, nil)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		p.Spec.NodeName = nodeName
		return p
	}
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("gang-size").Filter("small-or-large", "podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'").Obj(),
		builder.MakePolicy("together").Filter("with-the-others", "size(podGroup.assignedNodes) == 0 || node.metadata.name in podGroup.assignedNodes").Obj(),
	}
	bound := []*corev1.Pod{member("big-0", "big", "large-1")}
	groups := []*schedulingv1beta1.PodGroup{builder.Gang("ml", "big", 8, nil), builder.Gang("ml", "pair", 2, nil)}
	feasible := func(e *Evaluator, p *corev1.Pod) []string {
		r, err := e.Schedule(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range r.Nodes {
			if n.Feasible {
				out = append(out, n.Name)
			}
		}
		return out
	}
	withGroups := newEvaluatorOver(t, NewCluster([]*corev1.Namespace{namespace("ml", nil)}, nodes, bound, nil).WithPodGroups(groups), policies, func(*schedulerconfig.KubeSchedulerConfiguration) {})
	if got, want := feasible(withGroups, member("big-1", "big", "")), []string{"large-1"}; !cmp.Equal(got, want) {
		t.Errorf("a member of the gang of 8: feasible %v, want %v", got, want)
	}
	if got, want := feasible(withGroups, member("pair-0", "pair", "")), []string{"large-1", "large-2", "small-1", "small-2"}; !cmp.Equal(got, want) {
		t.Errorf("a member of the pair: feasible %v, want %v", got, want)
	}
	without := newEvaluatorOver(t, NewCluster([]*corev1.Namespace{namespace("ml", nil)}, nodes, bound, nil), policies, func(*schedulerconfig.KubeSchedulerConfiguration) {})
	if got, want := feasible(without, member("big-1", "big", "")), []string{"large-1"}; !cmp.Equal(got, want) {
		t.Errorf("without PodGroups, a member of big: feasible %v, want %v (its bound member's node)", got, want)
	}
	if got, want := feasible(without, member("other-0", "other", "")), []string{"large-1", "large-2", "small-1", "small-2"}; !cmp.Equal(got, want) {
		t.Errorf("without PodGroups, a member of another group: feasible %v, want %v", got, want)
	}
}
