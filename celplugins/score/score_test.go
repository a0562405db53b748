package score

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// prepared is the state CELFilter's PreFilter leaves for the pod, with a
// time budget that no load on the machine uses up: without it, PreScore
// prepares the cycle with DefaultEvaluationBudget (100 ms), which a test
// machine under load (-race, parallel packages) can spend before the
// first score is computed.
func prepared(t *testing.T, rt *celplugins.Runtime, pod *corev1.Pod) *framework.CycleState {
	t.Helper()
	c, err := rt.Prepare(context.Background(), pod, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	state.Write(celplugins.StateKey, c)
	return state
}

// TestStatusCodes: PreScore skips pods no scored policy matches; a score
// rule's error under Fail fails the cycle (Error: the pod is retried with
// backoff); under Ignore the rule scores 0 on that node and the other
// nodes are normalized without it.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Label("app", "db").Obj()
	nodes := []fwk.NodeInfo{nodeInfo("n1", "1"), nodeInfo("n2", "3"), nodeInfo("n3", "")}
	rackScore := "double(node.metadata.labels['rack'])" // fails on n3, which has no rack
	cases := map[string]struct {
		policies     []*schedv1alpha1.SchedulingPolicy
		wantPreScore fwk.Code
		wantScore    fwk.Code
		wantScores   []int64
	}{
		"no policy": {wantPreScore: fwk.Skip},
		"a policy without score rules": {
			policies:     []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("f", "true").Obj()},
			wantPreScore: fwk.Skip,
		},
		"an error under Fail fails the cycle": {
			policies:  []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Score("rack", rackScore, 1, schedv1alpha1.MinMax).Obj()},
			wantScore: fwk.Error,
		},
		"an error under Ignore scores 0 there": {
			policies:   []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().Score("rack", rackScore, 1, schedv1alpha1.MinMax).Obj()},
			wantScores: []int64{0, 100, 0},
		},
		"an Audit policy changes no score": {
			policies:   []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Audit().Score("rack", rackScore, 1, schedv1alpha1.MinMax).Obj()},
			wantScores: []int64{0, 0, 0},
		},
		"overflowing raw values still give valid scores": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").
				Score("extreme", "node.metadata.name == 'n1' ? 1.7e308 : -1.7e308", 1, schedv1alpha1.MinMax).Obj()},
			wantScores: []int64{100, 0, 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pl := &Score{rt: plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))}
			ctx := context.Background()
			// A skipped pod evaluates nothing: PreScore prepares its cycle
			// itself, as without CELFilter.
			state := framework.NewCycleState()
			if tc.wantPreScore != fwk.Skip {
				state = prepared(t, pl.rt, pod)
			}
			if got := pl.PreScore(ctx, state, pod, nodes); got.Code() != tc.wantPreScore {
				t.Fatalf("PreScore: %v, want %v", got, tc.wantPreScore)
			}
			if tc.wantPreScore == fwk.Skip {
				return
			}
			got, status := scoreAll(ctx, pl, state, pod, nodes)
			if status.Code() != tc.wantScore {
				t.Fatalf("Score: %v, want %v", status, tc.wantScore)
			}
			if !status.IsSuccess() {
				return
			}
			if diff := cmp.Diff(tc.wantScores, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParamsScoresCombine: a parameterized policy whose selector finds two
// params objects scores each node with both, as two policies would: the
// node's score is the mean of the two.
func TestParamsScoresCombine(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	nodes := []fwk.NodeInfo{nodeInfo("n1", "1"), nodeInfo("n2", "3"), nodeInfo("n3", "")}
	policy := builder.MakePolicy("preferred-rack").ParamKind("v1", "ConfigMap").
		ParamSelector(map[string]string{"racks": "preferred"}, "", schedv1alpha1.DenyAction).
		Score("rack", "node.metadata.?labels[?'rack'].orValue('') == params.data['rack'] ? 100 : 0", 1, schedv1alpha1.None).Obj()
	rack := func(name, value string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"rack": value}}}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetResourceVersion("1")
		u.SetLabels(map[string]string{"racks": "preferred"})
		return u
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		params []*unstructured.Unstructured
		want   []int64
	}{
		"one params object":  {params: []*unstructured.Unstructured{rack("a", "1")}, want: []int64{100, 0, 0}},
		"two params objects": {params: []*unstructured.Unstructured{rack("a", "1"), rack("b", "3")}, want: []int64{50, 50, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))
			params, err := engine.NewStaticParams(env, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			rt.Inputs.Params = params
			pl := &Score{rt: rt}
			ctx := context.Background()
			state := prepared(t, rt, pod)
			if got := pl.PreScore(ctx, state, pod, nodes); !got.IsSuccess() {
				t.Fatalf("PreScore: %v", got)
			}
			got, status := scoreAll(ctx, pl, state, pod, nodes)
			if !status.IsSuccess() {
				t.Fatalf("Score: %v", status)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// scoreAll runs Score on every node, then NormalizeScore, as the framework
// does, and returns the normalized scores, or the first status that is not
// a success.
func scoreAll(ctx context.Context, pl *Score, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) ([]int64, *fwk.Status) {
	scores := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		score, status := pl.Score(ctx, state, pod, ni)
		if !status.IsSuccess() {
			return nil, status
		}
		scores[i] = fwk.NodeScore{Name: ni.Node().Name, Score: score}
	}
	if status := pl.NormalizeScore(ctx, state, pod, scores); !status.IsSuccess() {
		return nil, status
	}
	got := make([]int64, len(scores))
	for i, s := range scores {
		got[i] = s.Score
	}
	return got, nil
}

func nodeInfo(name, rack string) fwk.NodeInfo {
	n := st.MakeNode().Name(name)
	if rack != "" {
		n = n.Label("rack", rack)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(n.Obj())
	return ni
}

// BenchmarkScoreNodeOnlyPolicies: CELScore's Score on a node for a pod that
// ten node-only policies (a label score each) match, once their results are
// cached for the node's version: what a scheduling cycle pays per node.
func BenchmarkScoreNodeOnlyPolicies(b *testing.B) {
	var policies []*schedv1alpha1.SchedulingPolicy
	for i := range 10 {
		policies = append(policies, builder.MakePolicy(fmt.Sprintf("p%02d", i)).
			Score("spot", "node.metadata.?labels[?'spot'].orValue('') == 'true' ? 100 : 0", 1, schedv1alpha1.None).Obj())
	}
	pl := &Score{rt: plugintest.Runtime(b, policies, plugintest.Namespace("ns", nil))}
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Obj()
	node := st.MakeNode().Name("n1").Label("spot", "true").Obj()
	node.ResourceVersion = "1"
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	state := framework.NewCycleState()
	if status := pl.PreScore(context.Background(), state, pod, []fwk.NodeInfo{ni}); !status.IsSuccess() {
		b.Fatal(status)
	}
	ctx := context.Background()
	b.ReportAllocs()
	s, err := celplugins.ReadState[*scoreState](state, stateKey)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s.next.Store(0) // one node, scored again
		if _, status := pl.Score(ctx, state, pod, ni); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}

// TestScoreListAgreesWithEvaluation: for pods that the same node-only
// score policies apply to, CELScore on node versions whose raw values are
// kept (engine.PolicyList) gives exactly the scores of the same nodes
// evaluated afresh (no resourceVersion), and the second pod reads them.
func TestScoreListAgreesWithEvaluation(t *testing.T) {
	t.Parallel()
	policies := append(nodeScorePolicies(),
		builder.MakePolicy("own-rack").Score("own", "node.metadata.?labels[?'team'].orValue('') == pod.metadata.namespace ? 10 : 0", 5, schedv1alpha1.MinMax).Obj())
	pl := &Score{rt: plugintest.Runtime(t, policies, plugintest.Namespace("team-a", nil), plugintest.Namespace("team-b", nil))}
	var cached, fresh []fwk.NodeInfo
	for i := range 20 {
		n := st.MakeNode().Name(fmt.Sprintf("node-%d", i*37)).Label("rack", fmt.Sprintf("r%d", i%3))
		if i%4 == 0 {
			n = n.Label("spot", "true")
		}
		n = n.Label("team", []string{"team-a", "team-b"}[i%2])
		c, f := plugintest.CachedAndFresh(n.Obj())
		cached, fresh = append(cached, c), append(fresh, f)
	}
	ctx := context.Background()
	scores := func(pod *corev1.Pod, nodes []fwk.NodeInfo) []int64 {
		t.Helper()
		// The pod's cycle as CELFilter's PreFilter leaves it, with a budget
		// that no load on the machine uses up (without one, PreScore would
		// prepare it with DefaultEvaluationBudget).
		c, err := pl.rt.Prepare(ctx, pod, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		state := framework.NewCycleState()
		state.Write(celplugins.StateKey, c)
		if status := pl.PreScore(ctx, state, pod, nodes); !status.IsSuccess() {
			t.Fatal(status)
		}
		list := make(fwk.NodeScoreList, len(nodes))
		for i, ni := range nodes {
			score, status := pl.Score(ctx, state, pod, ni)
			if !status.IsSuccess() {
				t.Fatal(status)
			}
			list[i] = fwk.NodeScore{Name: ni.Node().Name, Score: score}
		}
		if status := pl.NormalizeScore(ctx, state, pod, list); !status.IsSuccess() {
			t.Fatal(status)
		}
		out := make([]int64, len(list))
		for i := range list {
			out[i] = list[i].Score
		}
		return out
	}
	// Pods of two tenants, whose scores differ by namespace: each reads
	// what was kept for its own namespace, from the third pod on.
	for i := range 4 {
		pod := st.MakePod().Namespace([]string{"team-a", "team-b"}[i%2]).Name(fmt.Sprintf("p%d", i)).SchedulerName("celsched").Obj()
		if i > 1 {
			c, err := pl.rt.Prepare(ctx, pod, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			in, err := pl.rt.Inputs.Converter.NodeInput(cached[0].Node(), cached[0].GetGeneration(), cached[0], celplugins.NodeInfoFrom)
			if err != nil {
				t.Fatal(err)
			}
			if c.ScoreList.Cached(c.Pod, &in) == nil {
				t.Fatalf("pod %d: the raw values of the first pod were not kept", i)
			}
		}
		if diff := cmp.Diff(scores(pod, fresh), scores(pod, cached)); diff != "" {
			t.Errorf("pod %d: kept (+) and fresh (-) scores differ:\n%s", i, diff)
		}
	}
}

// TestBatchRescore: kube-scheduler 1.37's opportunistic batching, for the
// next pod of the same signature, rescores only the node the last pod took
// (PreScore with every candidate on a clone of the pod's CycleState, Score
// on that node) and normalizes the other candidates' raw scores of the
// earlier cycle with it. CELScore's raw scores name their cycle's table,
// so that normalization succeeds and gives the scores of a fresh cycle,
// rescore after rescore; a raw score of a table no longer kept (a fresh
// cycle came since) or of other policies fails the normalization (the
// batch is dropped), never reads another cycle's values.
func TestBatchRescore(t *testing.T) {
	t.Parallel()
	policies := append(nodeScorePolicies(),
		builder.MakePolicy("team-b-only").NamespaceLabels(map[string]string{"team": "b"}).
			Score("spot", "node.metadata.?labels[?'spot'].orValue('') == 'true' ? 0 : 100", 1, schedv1alpha1.None).Obj())
	pl := &Score{rt: plugintest.Runtime(t, policies, plugintest.Namespace("team-a", map[string]string{"team": "a"}), plugintest.Namespace("team-b", map[string]string{"team": "b"}))}
	nodes := spotNodes(12, 37, 4)
	ctx := context.Background()
	pod := func(ns, name string) *corev1.Pod {
		return st.MakePod().Namespace(ns).Name(name).SchedulerName("celsched").Obj()
	}
	// fresh is a whole cycle: PreScore, Score on every node, NormalizeScore;
	// it returns the raw scores (as batching keeps them) and the scores.
	fresh := func(p *corev1.Pod) (raw, scores fwk.NodeScoreList) {
		t.Helper()
		state := prepared(t, pl.rt, p)
		if status := pl.PreScore(ctx, state, p, nodes); !status.IsSuccess() {
			t.Fatal(status)
		}
		raw = make(fwk.NodeScoreList, len(nodes))
		for i, ni := range nodes {
			score, status := pl.Score(ctx, state, p, ni)
			if !status.IsSuccess() {
				t.Fatal(status)
			}
			raw[i] = fwk.NodeScore{Name: ni.Node().Name, Score: score}
		}
		scores = slices.Clone(raw)
		if status := pl.NormalizeScore(ctx, state, p, scores); !status.IsSuccess() {
			t.Fatal(status)
		}
		return raw, scores
	}
	// rescore is batching's rescoring of node i, with the other nodes' raw
	// scores of earlier cycles; it returns the new raw scores and the
	// normalization's scores or status.
	rescore := func(p *corev1.Pod, raw fwk.NodeScoreList, i int) (fwk.NodeScoreList, fwk.NodeScoreList, *fwk.Status) {
		t.Helper()
		state := prepared(t, pl.rt, p).Clone()
		if status := pl.PreScore(ctx, state, p, nodes); !status.IsSuccess() {
			t.Fatal(status)
		}
		score, status := pl.Score(ctx, state, p, nodes[i])
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		raw = slices.Clone(raw)
		raw[i].Score = score
		scores := slices.Clone(raw)
		return raw, scores, pl.NormalizeScore(ctx, state, p, scores)
	}

	raw, want := fresh(pod("team-a", "p0"))
	for k, i := range []int{3, 0, 3, 7} {
		var got fwk.NodeScoreList
		var status *fwk.Status
		raw, got, status = rescore(pod("team-a", fmt.Sprintf("p%d", k+1)), raw, i)
		if !status.IsSuccess() {
			t.Fatalf("rescore %d (node %d): %v", k, i, status)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rescore %d (node %d): scores differ from a fresh cycle's (-fresh +rescored):\n%s", k, i, diff)
		}
	}
	// Other policies (team-b's pods have a third): the kept tables are not
	// theirs.
	if _, _, status := rescore(pod("team-b", "q0"), raw, 2); status.IsSuccess() {
		t.Error("a rescore of another policy set normalized the earlier raw scores")
	}
	// A fresh cycle since: the batch's tables are gone.
	fresh(pod("team-a", "p9"))
	if _, _, status := rescore(pod("team-a", "p10"), raw, 2); status.IsSuccess() {
		t.Error("a rescore normalized raw scores of tables dropped by a later fresh cycle")
	}
}

// nodeScorePolicies are two policies of node-only score rules: a label
// (None), and a label and the name's length (MinMaxReverse, MinMax).
func nodeScorePolicies() []*schedv1alpha1.SchedulingPolicy {
	return []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("spot").Score("spot", "node.metadata.?labels[?'spot'].orValue('') == 'true' ? 100 : 0", 3, schedv1alpha1.None).Obj(),
		builder.MakePolicy("rack").Score("rack", "node.metadata.?labels[?'rack'].orValue('r0') == 'r1' ? 7.5 : 2", 1, schedv1alpha1.MinMaxReverse).
			Score("name", "size(node.metadata.name)", 2, schedv1alpha1.MinMax).Obj(),
	}
}

// TestConcurrentCycles: cycles of one plugin that overlap, as the dry run's
// evaluations of several classes at once do (celsched impact), each get the
// scores of a cycle alone. A cycle's NormalizeScore keeps its table of raw
// values for batching and lets go of the tables kept before it; the
// tables it lets go of are reused by the next cycles' PreScore, so none
// may be let go while its own cycle still reads it (run with -race).
func TestConcurrentCycles(t *testing.T) {
	t.Parallel()
	pl := &Score{rt: plugintest.Runtime(t, nodeScorePolicies())}
	nodes := spotNodes(24, 13, 5)
	ctx := context.Background()
	cycle := func(name string, nodes []fwk.NodeInfo) ([]int64, error) {
		p := st.MakePod().Namespace("default").Name(name).SchedulerName("celsched").Obj()
		c, err := pl.rt.Prepare(ctx, p, time.Minute)
		if err != nil {
			return nil, err
		}
		state := framework.NewCycleState()
		state.Write(celplugins.StateKey, c)
		if status := pl.PreScore(ctx, state, p, nodes); !status.IsSuccess() {
			return nil, status.AsError()
		}
		got, status := scoreAll(ctx, pl, state, p, nodes)
		return got, status.AsError()
	}
	// Alone, first: the scores of each size of node list.
	want := map[int][]int64{}
	for _, n := range []int{len(nodes), len(nodes) / 2} {
		got, err := cycle("alone", nodes[:n])
		if err != nil {
			t.Fatal(err)
		}
		want[n] = got
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				n := len(nodes)
				if (g+i)%2 == 1 {
					n /= 2
				}
				got, err := cycle(fmt.Sprintf("p-%d-%d", g, i), nodes[:n])
				if err != nil {
					t.Error(err)
					return
				}
				if diff := cmp.Diff(want[n], got); diff != "" {
					t.Errorf("cycle %d of goroutine %d on %d nodes: scores differ from a cycle alone (-alone +overlapping):\n%s", i, g, n, diff)
					return
				}
			}
		})
	}
	wg.Wait()
}

// spotNodes returns n cached nodes named node-<i*stride>, in racks r0..r2
// in turn, every spotEvery-th of them (from the first) labelled spot.
func spotNodes(n, stride, spotEvery int) []fwk.NodeInfo {
	nodes := make([]fwk.NodeInfo, 0, n)
	for i := range n {
		node := st.MakeNode().Name(fmt.Sprintf("node-%d", i*stride)).Label("rack", fmt.Sprintf("r%d", i%3))
		if i%spotEvery == 0 {
			node = node.Label("spot", "true")
		}
		cached, _ := plugintest.CachedAndFresh(node.Obj())
		nodes = append(nodes, cached)
	}
	return nodes
}
