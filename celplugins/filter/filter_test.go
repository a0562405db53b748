package filter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/metrics"
	"github.com/celsched/celsched/test/builder"
)

// TestStatusCodes: PreFilter and Filter answer with kube-scheduler's codes,
// as its own plugins do: Skip when no policy with filters matches,
// UnschedulableAndUnresolvable for what no node and no preemption can
// change, Unschedulable for a filter reading nodeInfo (preemption may
// help), Success when a filter passes, fails under Ignore or only audits.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Label("app", "db").Obj()
	node := st.MakeNode().Name("n1").Label("zone", "c").Obj()
	placement := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"zones": "a,b"}}}
	placement.SetAPIVersion("v1")
	placement.SetKind("ConfigMap")
	placement.SetNamespace("ns")
	placement.SetName("placement")
	tenant := func(name string, notFound schedv1alpha1.ParameterNotFoundActionType) *builder.PolicyWrapper {
		return builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef(name, "", notFound).
			Filter("zone", "node.metadata.labels['zone'] in params.data['zones'].split(',')")
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	params, err := engine.NewStaticParams(env, []*unstructured.Unstructured{placement})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		policies      []*schedv1alpha1.SchedulingPolicy
		params        engine.ParamsResolver
		wantPreFilter *fwk.Status
		wantFilter    *fwk.Status
	}{
		"params found: the filter reads them": {
			policies:   []*schedv1alpha1.SchedulingPolicy{tenant("placement", "").Obj()},
			params:     params,
			wantFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) rejected by SchedulingPolicy p, rule zone: expression is false"),
		},
		"no params, Deny: every node": {
			policies: []*schedv1alpha1.SchedulingPolicy{tenant("other", schedv1alpha1.DenyAction).Obj()},
			params:   params,
			wantPreFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				"node(s) rejected by SchedulingPolicy p, rule paramRef: no params ConfigMap other in namespace ns found (parameterNotFoundAction Deny)"),
		},
		"no params, Allow: skipped": {
			policies:      []*schedv1alpha1.SchedulingPolicy{tenant("other", schedv1alpha1.AllowAction).Obj()},
			params:        params,
			wantPreFilter: fwk.NewStatus(fwk.Skip),
		},
		"params that cannot be read, Ignore: skipped": {
			policies:      []*schedv1alpha1.SchedulingPolicy{tenant("placement", "").Ignore().Obj()},
			wantPreFilter: fwk.NewStatus(fwk.Skip),
		},
		"no policy": {
			wantPreFilter: fwk.NewStatus(fwk.Skip),
		},
		"a policy for other pods": {
			policies:      []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("web").PodLabels(map[string]string{"app": "web"}).Filter("f", "false").Obj()},
			wantPreFilter: fwk.NewStatus(fwk.Skip),
		},
		"a filter passes": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("zone", "node.metadata.labels['zone'] != 'a'").Obj()},
		},
		"a false filter: unresolvable": {
			policies:   []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").FilterMsg("zone", "node.metadata.labels['zone'] != 'c'", "not in zone c", "").Obj()},
			wantFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) rejected by SchedulingPolicy p, rule zone: not in zone c"),
		},
		"a false filter reading nodeInfo: preemption may help": {
			policies:   []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("empty", "nodeInfo.podCount < 0").Obj()},
			wantFilter: fwk.NewStatus(fwk.Unschedulable, "node(s) rejected by SchedulingPolicy p, rule empty: expression is false"),
		},
		"an error under Fail rejects the node": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("rack", "node.metadata.labels['rack'] == 'r1'").Obj()},
			wantFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				"node(s) rejected: SchedulingPolicy p, rule rack: spec.filters[0].expression: no such key: rack (failurePolicy Fail)"),
		},
		"an error under Ignore is skipped, the next filter still applies": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().
				Filter("rack", "node.metadata.labels['rack'] == 'r1'").Filter("zone", "node.metadata.labels['zone'] != 'c'").Obj()},
			wantFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) rejected by SchedulingPolicy p, rule zone: expression is false"),
		},
		"an error under Ignore alone passes": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().Filter("rack", "node.metadata.labels['rack'] == 'r1'").Obj()},
		},
		"an Audit policy changes nothing": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Audit().Filter("zone", "false").Obj()},
		},
		"a policy that does not compile, Fail: every node": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("typo", "node.metadata.lables == {}").Obj()},
			wantPreFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				"SchedulingPolicy p does not compile (failurePolicy Fail): spec.filters[0].expression: compilation failed: ERROR: <input>:1:14: undefined field 'lables'"),
		},
		"a policy that does not compile, Ignore: skipped": {
			policies:      []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().Filter("typo", "node.metadata.lables == {}").Obj()},
			wantPreFilter: fwk.NewStatus(fwk.Skip),
		},
		"a match condition fails, Fail: every node": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Condition("team", "pod.metadata.labels['team'] == 'a'").Filter("f", "true").Obj()},
			wantPreFilter: fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				"SchedulingPolicy p, rule team: spec.match.conditions[0].expression: no such key: team (failurePolicy Fail)"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))
			rt.Inputs.Params = tc.params
			pl := &Filter{rt: rt}
			pl.args.EvaluationBudget.Duration = time.Minute // no cut-off, even under -race
			ctx := context.Background()
			state := framework.NewCycleState()
			_, got := pl.PreFilter(ctx, state, pod, nil)
			if diff := cmp.Diff(tc.wantPreFilter, got, statusCmp); diff != "" {
				t.Fatalf("PreFilter (-want +got):\n%s", diff)
			}
			if !got.IsSuccess() {
				return
			}
			ni := framework.NewNodeInfo()
			ni.SetNode(node)
			if diff := cmp.Diff(tc.wantFilter, pl.Filter(ctx, state, pod, ni), statusCmp); diff != "" {
				t.Errorf("Filter (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterWithoutPreFilter: Filter without its PreFilter's state is an
// Error, not a rejection.
func TestFilterWithoutPreFilter(t *testing.T) {
	t.Parallel()
	pl := &Filter{rt: plugintest.Runtime(t, nil)}
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name("n1").Obj())
	if got := pl.Filter(context.Background(), framework.NewCycleState(), &corev1.Pod{}, ni); got.Code() != fwk.Error {
		t.Errorf("Filter without PreFilter: %v, want Error", got)
	}
}

// statusCmp compares statuses by code and reasons.
var statusCmp = cmp.Comparer(func(a, b *fwk.Status) bool {
	if a == nil || b == nil {
		return a.Code() == b.Code()
	}
	return a.Code() == b.Code() && cmp.Equal(a.Reasons(), b.Reasons())
})

// TestTimeBudget: a filter still running when the cycle's time budget is
// spent is cut off with an error that follows its failurePolicy and is
// recorded as the slow rule; evaluations after it in the cycle are not run
// and fail closed under their own policy's Fail.
func TestTimeBudget(t *testing.T) {
	// Not parallel: the budget runs out 20ms into Filter, a window that
	// tests running beside it could use up before the slow rule starts.
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	slow := "lists.range(300000).all(i, i >= 0)" // runs far longer than a millisecond
	cases := map[string]struct {
		policy    *schedv1alpha1.SchedulingPolicy
		wantFirst string // Filter's message on the first node
	}{
		"Fail": {
			policy:    builder.MakePolicy("a-slow").Filter("slow", slow).Obj(),
			wantFirst: "node(s) rejected: SchedulingPolicy a-slow, rule slow: spec.filters[0].expression: evaluation cancelled: the CEL time budget of the pod's scheduling cycle is spent (1ms) (failurePolicy Fail)",
		},
		"Ignore: the slow rule is skipped, the policies after it are not evaluated": {
			policy:    builder.MakePolicy("a-slow").Ignore().Filter("slow", slow).Obj(),
			wantFirst: "node(s) rejected: SchedulingPolicy b-fast, rule fast: spec.filters[0].expression: not evaluated: the CEL time budget of the pod's scheduling cycle is spent (1ms) (failurePolicy Fail)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The budget runs out 20ms into Filter, whatever PreFilter took.
			// On a loaded machine (-race, packages side by side) the window
			// can pass before the slow rule starts: then nothing was cut
			// off mid-rule (no slow report), which is not what this test is
			// about, and it tries again, at most five times.
			var got *fwk.Status
			var rt *celplugins.Runtime
			for attempt := range 5 {
				got, rt = filterWithBudget(t, tc.policy, pod, 20*time.Millisecond)
				if _, cut := rt.Report.Slow.Get("a-slow"); cut {
					break
				}
				t.Logf("attempt %d: the budget ran out before the slow rule started: %q", attempt+1, got.Message())
			}
			if got.Code() != fwk.UnschedulableAndUnresolvable || got.Message() != tc.wantFirst {
				t.Errorf("Filter: %v %q, want UnschedulableAndUnresolvable %q", got.Code(), got.Message(), tc.wantFirst)
			}
			report, ok := rt.Report.Slow.Get("a-slow")
			if !ok || report.Rule != "filters/slow" || report.Node != "n1" || report.Pod != "ns/p" || report.Count != 1 {
				t.Errorf("slow report %+v, want filters/slow on ns/p and n1, once", report)
			}
			if _, ok := rt.Report.Slow.Get("b-fast"); ok {
				t.Error("the policy evaluated after the budget was spent was reported slow")
			}
		})
	}
}

// filterWithBudget runs CELFilter for pod on one node with the policy and
// a fast one after it, the cycle's CEL time budget (1ms, for the
// messages) running out window into Filter.
func filterWithBudget(t *testing.T, policy *schedv1alpha1.SchedulingPolicy, pod *corev1.Pod, window time.Duration) (*fwk.Status, *celplugins.Runtime) {
	t.Helper()
	fast := builder.MakePolicy("b-fast").Filter("fast", "true").Obj()
	rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy, fast}, plugintest.Namespace("ns", nil))
	pl := &Filter{rt: rt}
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name("n1").Obj())
	// The cycle's context as Prepare builds it, with the test's deadline.
	c := celplugins.ReadCycle(state)
	ctx, cancel := context.WithTimeoutCause(context.Background(), window,
		fmt.Errorf("%w (%s)", engine.ErrTimeBudgetExceeded, time.Millisecond))
	defer cancel()
	c.Ctx, c.Budget = ctx, time.Millisecond
	return pl.Filter(context.Background(), state, pod, ni), rt
}

// TestMessagesBounded: a messageExpression that differs per node (here it
// echoes a 160 KiB annotation with the node's name in front) gives each
// node's rejection at most MaxMessageLength bytes, and at most 16 distinct
// texts per cycle; the other nodes get the rule's static message, so the
// pod's folded condition stays small whatever the cluster's size.
func TestMessagesBounded(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	policy := builder.MakePolicy("p").FilterMsg("no", "false", "not here",
		"node.metadata.name + ': ' + node.metadata.annotations[?'big'].orValue('')").Obj()
	pl := &Filter{rt: plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute // so that only the messages bound them, even under -race
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	big := strings.Repeat("x", 160<<10)
	distinct := map[string]int{}
	for i := range 100 {
		ni := framework.NewNodeInfo()
		node := st.MakeNode().Name(fmt.Sprintf("node-%03d", i)).Obj()
		node.Annotations = map[string]string{"big": big}
		ni.SetNode(node)
		got := pl.Filter(context.Background(), state, pod, ni)
		if got.Code() != fwk.UnschedulableAndUnresolvable || len(got.Message()) > engine.MaxMessageLength {
			t.Fatalf("node %d: %v, %d bytes", i, got.Code(), len(got.Message()))
		}
		distinct[got.Message()]++
	}
	static := "node(s) rejected by SchedulingPolicy p, rule no: not here"
	if len(distinct) != 17 || distinct[static] != 84 {
		t.Errorf("%d distinct messages, %d static; want 16 distinct from the messageExpression and the static one for the other 84 nodes", len(distinct), distinct[static])
	}
}

// nodeOnlyPlugin is CELFilter with ten node-only policies (a label filter
// each) that match every pod of namespace ns.
func nodeOnlyPlugin(b *testing.B) *Filter {
	var policies []*schedv1alpha1.SchedulingPolicy
	for i := range 10 {
		policies = append(policies, builder.MakePolicy(fmt.Sprintf("p%02d", i)).
			Filter("zone", "node.metadata.?labels[?'topology.kubernetes.io/zone'].orValue('') in ['a', 'b']").Obj())
	}
	pl := &Filter{rt: plugintest.Runtime(b, policies, plugintest.Namespace("ns", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute
	return pl
}

// BenchmarkFilterNodeOnlyPolicies: CELFilter on a node for a pod that ten
// node-only policies (a label filter each) match, once their results are
// cached for the node's version: what a scheduling cycle pays per node.
func BenchmarkFilterNodeOnlyPolicies(b *testing.B) {
	pl := nodeOnlyPlugin(b)
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	state := framework.NewCycleState()
	if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		b.Fatal(status)
	}
	node := st.MakeNode().Name("n1").Label("topology.kubernetes.io/zone", "a").Obj()
	node.ResourceVersion = "1"
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if status := pl.Filter(ctx, state, pod, ni); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}

// BenchmarkFilterPodFieldPolicy: CELFilter on a node for a rule that reads
// a pod label and a node label. "hit": another replica (the same labels,
// another name) was filtered on this node version, so the result is a
// lookup; "miss": every iteration is a new node version, so the rule is
// evaluated.
func BenchmarkFilterPodFieldPolicy(b *testing.B) {
	policy := builder.MakePolicy("rack").
		Filter("rack", "pod.metadata.?labels[?'rack'].orValue('') == node.metadata.?labels[?'rack'].orValue('')").Obj()
	pl := &Filter{rt: plugintest.Runtime(b, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute
	cycle := func(name string) (*corev1.Pod, fwk.CycleState) {
		pod := st.MakePod().Namespace("ns").Name(name).SchedulerName("celsched").Label("rack", "r1").Obj()
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
			b.Fatal(status)
		}
		return pod, state
	}
	node := st.MakeNode().Name("n1").Label("rack", "r1").Obj()
	node.ResourceVersion = "1"
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	ctx := context.Background()
	b.Run("hit", func(b *testing.B) {
		first, firstState := cycle("web-1")
		if status := pl.Filter(ctx, firstState, first, ni); !status.IsSuccess() {
			b.Fatal(status)
		}
		pod, state := cycle("web-2")
		b.ReportAllocs()
		for b.Loop() {
			if status := pl.Filter(ctx, state, pod, ni); !status.IsSuccess() {
				b.Fatal(status)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		pod, state := cycle("web-3")
		version := 1
		b.ReportAllocs()
		for b.Loop() {
			version++
			node.ResourceVersion = strconv.Itoa(version)
			if status := pl.Filter(ctx, state, pod, ni); !status.IsSuccess() {
				b.Fatal(status)
			}
		}
	})
}

// TestListOutcomeAgreesWithEvaluation: for pods that the same policies
// apply to, CELFilter on node versions whose outcomes are kept
// (engine.PolicyList, nodes with a resourceVersion) answers exactly as on
// the same nodes evaluated afresh (no resourceVersion), rejection messages
// included; and a pod that reads the same as an earlier one reads the
// outcome.
func TestListOutcomeAgreesWithEvaluation(t *testing.T) {
	t.Parallel()
	nodeOnly := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("a").FilterMsg("l0", "node.metadata.?labels[?'l0'].orValue('') != 'blocked'", "", "'blocked on ' + node.metadata.name").Obj(),
		builder.MakePolicy("b").Filter("l1", "node.metadata.?labels[?'l1'].orValue('') != 'blocked'").Obj(),
		builder.MakePolicy("c").Ignore().Filter("missing", "node.metadata.labels['missing'] == 'x'").Filter("l2", "node.metadata.?labels[?'l2'].orValue('') != 'blocked'").Obj(),
	}
	podAndNode := []*schedv1alpha1.SchedulingPolicy{nodeOnly[0], nodeOnly[1], builder.MakePolicy("rack").
		Filter("rack", "pod.metadata.?labels[?'rack'].orValue('') == node.metadata.?labels[?'rack'].orValue('')").Obj()}
	for name, tc := range map[string]struct {
		policies []*schedv1alpha1.SchedulingPolicy
		// kept says for which pod on which node an outcome is kept.
		kept func(pod, node int) bool
		// namespaces are the pods' namespaces, in turn (default ns).
		namespaces []string
	}{
		"node-only policies": {policies: nodeOnly[:2], kept: func(int, int) bool { return true }},
		// Kept where a or b rejects before c's failing rule is reached.
		"a failing rule under Ignore": {policies: nodeOnly, kept: func(_, n int) bool { return n%7 < 2 }},
		// An Audit policy's would-be rejections are replayed, and a rule
		// reading nodeInfo is kept for the NodeInfo's generation.
		"an Audit policy and a nodeInfo rule": {policies: []*schedv1alpha1.SchedulingPolicy{
			builder.MakePolicy("audit").Audit().Filter("l2", "node.metadata.?labels[?'l2'].orValue('') != 'blocked'").Obj(),
			builder.MakePolicy("room").Filter("room", "nodeInfo.podCount < 100").Obj(), nodeOnly[0],
		}, kept: func(int, int) bool { return true }},
		// Kept for a pod of a rack seen before (pods 1 and 3).
		"a pod-and-node rule": {policies: podAndNode, kept: func(p, _ int) bool { return p == 1 || p == 3 }},
		// Replicas of two tenants: the namespace is in every key, read
		// directly, in a messageExpression, or in a nodeInfo.pods filter.
		// Kept from the second pod of each namespace on.
		"namespace-reading rules, two namespaces": {policies: []*schedv1alpha1.SchedulingPolicy{
			builder.MakePolicy("tenant").FilterMsg("team", "node.metadata.?labels[?'team'].orValue('') == pod.metadata.namespace", "",
				"'reserved for another team than ' + pod.metadata.namespace").Obj(),
			builder.MakePolicy("per-node").Filter("two", "nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size() < 2").Obj(),
		}, kept: func(p, _ int) bool { return p >= 2 }, namespaces: []string{"team-a", "team-b"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pl := &Filter{rt: plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil),
				plugintest.Namespace("team-a", nil), plugintest.Namespace("team-b", nil))}
			pl.args.EvaluationBudget.Duration = time.Minute
			var cached, fresh []fwk.NodeInfo
			for i := range 30 {
				node := st.MakeNode().Name(fmt.Sprintf("n%02d", i)).Label("rack", fmt.Sprintf("r%d", i%3)).
					Label("team", []string{"team-a", "team-b"}[i%2]).Obj()
				for l := range 3 {
					if i%7 == l {
						node.Labels[fmt.Sprintf("l%d", l)] = "blocked"
					}
				}
				c, f := plugintest.CachedAndFresh(node)
				// Two pods of team-a on every third node.
				for j := range 2 * min(1, i%3) {
					placed := st.MakePod().Namespace("team-a").Name(fmt.Sprintf("x%d-%d", i, j)).Obj()
					c.(*framework.NodeInfo).AddPod(placed)
					f.(*framework.NodeInfo).AddPod(placed)
				}
				cached, fresh = append(cached, c), append(fresh, f)
			}
			for i, rack := range []string{"r0", "r0", "r1", "r0", "r2"} {
				namespace := "ns"
				if len(tc.namespaces) > 0 {
					namespace = tc.namespaces[i%len(tc.namespaces)]
				}
				pod := st.MakePod().Namespace(namespace).Name(fmt.Sprintf("p%d", i)).SchedulerName("celsched").Label("rack", rack).Obj()
				// One cycle per view of the nodes, so that each records its
				// own Audit denials.
				state, freshState := framework.NewCycleState(), framework.NewCycleState()
				for _, s := range []fwk.CycleState{state, freshState} {
					if _, status := pl.PreFilter(context.Background(), s, pod, nil); !status.IsSuccess() {
						t.Fatal(status)
					}
				}
				c := celplugins.ReadCycle(state)
				for n := range cached {
					if i > 0 {
						in, err := pl.rt.Inputs.Converter.NodeInput(cached[n].Node(), cached[n].GetGeneration(), cached[n], celplugins.NodeInfoFrom)
						if err != nil {
							t.Fatal(err)
						}
						if kept := c.FilterList.Cached(c.Pod, &in) != nil; kept != tc.kept(i, n) {
							t.Fatalf("pod %d, node %d: outcome kept=%v, want %v", i, n, kept, tc.kept(i, n))
						}
					}
					want := pl.Filter(context.Background(), freshState, pod, fresh[n])
					if got := pl.Filter(context.Background(), state, pod, cached[n]); !cmp.Equal(got.Code(), want.Code()) || got.Message() != want.Message() {
						t.Errorf("pod %d, node %d: %v, evaluated afresh %v", i, n, got, want)
					}
					// What Audit policies would have done on the node.
					if got, want := auditEvents(pl, state, pod, cached[n]), auditEvents(pl, freshState, pod, fresh[n]); !cmp.Equal(got, want) {
						t.Errorf("pod %d, node %d: Audit events %q, evaluated afresh %q", i, n, got, want)
					}
				}
			}
		})
	}
}

// auditEvents are the events PostBind records for a pod bound to a node.
func auditEvents(pl *Filter, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) []string {
	recorder := events.NewFakeRecorder(10)
	pl.recorder = recorder
	pl.PostBind(context.Background(), state, pod, ni.Node().Name)
	close(recorder.Events)
	var out []string
	for e := range recorder.Events {
		out = append(out, e)
	}
	return out
}

// TestExplainRejections: with explainRejections, a pod that a filter
// rejects gets one RejectionDetail event per scheduling cycle with the
// false rule's sub-expressions on a node; without it, none.
func TestExplainRejections(t *testing.T) {
	t.Parallel()
	policy := builder.MakePolicy("zones").Filter("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in ['a', 'b']").Obj()
	for _, explain := range []bool{true, false} {
		t.Run(fmt.Sprint("explainRejections=", explain), func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, nil, plugintest.Namespace("ns", nil))
			pl := &Filter{rt: rt}
			if explain {
				// As New does, before the policies are fed.
				pl.why = &engine.Why{}
				rt.Inputs.Policies.(*engine.Registry).ExplainRules()
			}
			rt.Inputs.Policies.(*engine.Registry).Upsert(policy)
			recorder := events.NewFakeRecorder(10)
			pl.recorder = recorder
			pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
			state := framework.NewCycleState()
			if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
				t.Fatal(status)
			}
			for _, name := range []string{"c1", "c2"} {
				ni := framework.NewNodeInfo()
				ni.SetNode(st.MakeNode().Name(name).Label("topology.kubernetes.io/zone", "c").Obj())
				if status := pl.Filter(context.Background(), state, pod, ni); status.Code() != fwk.UnschedulableAndUnresolvable {
					t.Fatalf("%s: %v", name, status)
				}
			}
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			var want []string
			if explain {
				want = []string{`Normal RejectionDetail node c1, SchedulingPolicy zones, rule zone: ` +
					`node.metadata.labels[?"topology.kubernetes.io/zone"].orValue("") in ["a", "b"] = false; ` +
					`node.metadata.labels[?"topology.kubernetes.io/zone"].orValue("") = "c"; ` +
					`node.metadata.labels[?"topology.kubernetes.io/zone"] = optional.of("c")`}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConcurrentCyclesAndHints: scheduling cycles of two tenants' pods and
// node queueing hints read and fill the same memo entries at once (a
// failing variable under Ignore, a namespace-reading filter): every pod
// gets its own tenant's verdict on every node (run with -race, as make
// test does).
func TestConcurrentCyclesAndHints(t *testing.T) {
	t.Parallel()
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("tenant").Ignore().Variable("rack", "node.metadata.labels['rack']").
			Filter("rack", "variables.rack != 'x'").
			Filter("team", "node.metadata.?labels[?'team'].orValue('') == pod.metadata.namespace").Obj(),
	}
	pl := &Filter{rt: plugintest.Runtime(t, policies, plugintest.Namespace("team-a", nil), plugintest.Namespace("team-b", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute
	var nodes []fwk.NodeInfo
	for i := range 8 {
		cached, _ := plugintest.CachedAndFresh(st.MakeNode().Name(fmt.Sprintf("n%d", i)).Label("team", []string{"team-a", "team-b"}[i%2]).Obj())
		nodes = append(nodes, cached)
	}
	errs := make(chan error, 100)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 25 {
				team := []string{"team-a", "team-b"}[(g+i)%2]
				pod := st.MakePod().Namespace(team).Name(fmt.Sprintf("p%d-%d", g, i)).UID(fmt.Sprintf("p%d-%d", g, i)).SchedulerName("celsched").Obj()
				if g%2 == 1 {
					// A hint for a node that gained its team label.
					n := nodes[i%len(nodes)].Node()
					old := n.DeepCopy()
					delete(old.Labels, "team")
					hint, err := pl.rt.Requeue.NodeHint(klog.Background(), pod, old, n)
					if want := map[bool]fwk.QueueingHint{true: fwk.Queue, false: fwk.QueueSkip}[n.Labels["team"] == team]; err != nil || hint != want {
						errs <- fmt.Errorf("hint for %s/%s on %s: %v, %v, want %v", team, pod.Name, n.Name, hint, err, want)
					}
				}
				state := framework.NewCycleState()
				if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
					errs <- fmt.Errorf("PreFilter: %v", status)
					return
				}
				for _, ni := range nodes {
					status := pl.Filter(context.Background(), state, pod, ni)
					if ok := ni.Node().Labels["team"] == team; status.IsSuccess() != ok {
						errs <- fmt.Errorf("%s/%s on %s: %v", team, pod.Name, ni.Node().Name, status)
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCycleDurationSampled: CELFilter times its policies' evaluations in
// one cycle in metrics.TimingSample and observes their CEL time once per
// timed cycle, at Reserve.
func TestCycleDurationSampled(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	policy := builder.MakePolicy("filter-timed").Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'x'").Obj()
	pl := &Filter{rt: plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute // no cut-off, even under -race
	histogram := metrics.CycleDuration.WithLabelValues("filter-timed", "filter").(prometheus.Histogram)
	observed := func() (uint64, float64) {
		m := &dto.Metric{}
		if err := histogram.Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	// The histogram is the process's: what an earlier run (-count) left
	// in it is not this run's.
	n0, sum0 := observed()
	for i := range 2 * metrics.TimingSample {
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
			t.Fatal(status)
		}
		for n := range 3 {
			ni := framework.NewNodeInfo()
			// A node without a resourceVersion is never remembered: every
			// cycle evaluates.
			ni.SetNode(st.MakeNode().Name(fmt.Sprintf("timed-%d-%d", i, n)).Obj())
			if status := pl.Filter(context.Background(), state, pod, ni); !status.IsSuccess() {
				t.Fatal(status)
			}
		}
		pl.Reserve(context.Background(), state, pod, "timed-0")
	}
	if n, sum := observed(); n-n0 != 2 || sum <= sum0 {
		t.Errorf("%d observations summing to %v s after %d cycles, want 2 with the evaluations' time", n-n0, sum-sum0, 2*metrics.TimingSample)
	}
}

// TestPodGroupStatus: a filter or match condition reading podGroup
// places and refuses a gang's members by their group: its minCount and
// labels, as the pod's Inputs resolve it.
func TestPodGroupStatus(t *testing.T) {
	t.Parallel()
	groups := engine.NewStaticPodGroups([]*schedulingv1beta1.PodGroup{
		builder.Gang("ml", "big", 8, map[string]string{"team": "ml"}), builder.Gang("ml", "small", 2, map[string]string{"team": "ml"}), builder.Gang("ml", "web", 8, nil),
	}, nil)
	size := builder.MakePolicy("gang-size").Condition("ml", "podGroup.metadata.labels[?'team'].orValue('') == 'ml'").
		FilterMsg("small-or-large", "podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'", "gangs of more than 4 need a large node", "").Obj()
	small := st.MakeNode().Name("small").Label("size", "small").Obj()
	large := st.MakeNode().Name("large").Label("size", "large").Obj()
	refused := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) rejected by SchedulingPolicy gang-size, rule small-or-large: gangs of more than 4 need a large node")
	cases := map[string]struct {
		group                string
		wantPreFilter        *fwk.Status
		wantSmall, wantLarge *fwk.Status
	}{
		"a gang of 8: large nodes only": {group: "big", wantSmall: refused},
		"a gang of 2: any node":         {group: "small"},
		"another team's gang: skipped":  {group: "web", wantPreFilter: fwk.NewStatus(fwk.Skip)},
		"no group: skipped":             {wantPreFilter: fwk.NewStatus(fwk.Skip)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{size}, plugintest.Namespace("ml", nil))
			rt.Inputs.PodGroups = groups
			pl := &Filter{rt: rt}
			pl.args.EvaluationBudget.Duration = time.Minute
			pod := st.MakePod().Namespace("ml").Name("m-0").UID("m-0").SchedulerName("celsched").Obj()
			if tc.group != "" {
				pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &tc.group}
			}
			ctx := context.Background()
			state := framework.NewCycleState()
			_, got := pl.PreFilter(ctx, state, pod, nil)
			if diff := cmp.Diff(tc.wantPreFilter, got, statusCmp); diff != "" {
				t.Fatalf("PreFilter (-want +got):\n%s", diff)
			}
			if !got.IsSuccess() {
				return
			}
			for _, n := range []struct {
				node *corev1.Node
				want *fwk.Status
			}{{small, tc.wantSmall}, {large, tc.wantLarge}} {
				ni := framework.NewNodeInfo()
				ni.SetNode(n.node)
				if diff := cmp.Diff(n.want, pl.Filter(ctx, state, pod, ni), statusCmp); diff != "" {
					t.Errorf("Filter on %s (-want +got):\n%s", n.node.Name, diff)
				}
			}
		})
	}
}
