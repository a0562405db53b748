package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// outcome is what a caller sees of a decision.
type outcome struct {
	Verdict       Verdict
	Rule, Message string
	Err           string
	Ignored       int
	Scores        []string
}

func outcomeOf(d Decision, scores []float64) outcome {
	o := outcome{Verdict: d.Verdict, Rule: d.Rule, Message: d.Message, Ignored: len(d.Ignored)}
	if d.Err != nil {
		o.Err = d.Err.Error()
	}
	for _, s := range scores {
		if math.IsNaN(s) {
			o.Scores = append(o.Scores, "NaN")
		} else {
			o.Scores = append(o.Scores, fmt.Sprint(s))
		}
	}
	return o
}

// TestCachedAgreesWithUncached: random policies of the supported kinds
// (FuzzEvaluate's generator), on nodes that change, for pods that differ:
// evaluating with the per-node-version cache of node-only expressions
// (a node with a resourceVersion, evaluated for one pod after another)
// gives exactly the verdicts, messages, errors and scores of evaluating
// without it (the same node without a resourceVersion is never cached).
func TestCachedAgreesWithUncached(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	compiler := NewCompiler(env)
	conv := NewConverter(env, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"a", "b", "zone-a", "10.0.0.1", "1.2.3", "http://x", "", "[", "100m"}
	compared, cachedNodeOnly, cachedPodAndNode, cachedNodeInfo := 0, 0, 0, 0
	// generation numbers the contents of the nodes' NodeInfo, as the
	// scheduler's does.
	generation := int64(0)
	fromInfo := func(source any) *NodeInfo { return source.(*NodeInfo) }
	for i := range 400 {
		choices := make([]byte, 32)
		for j := range choices {
			choices[j] = byte(rng.IntN(256))
		}
		p := compiler.Compile(fuzzPolicy(choices, strs[rng.IntN(len(strs))], int64(rng.IntN(2000)-500)), CompileOptions{})
		if p.Err() != nil {
			continue
		}
		for _, f := range p.filters {
			switch f.memo {
			case memoNode:
				cachedNodeOnly++
			case memoPodAndNode:
				cachedPodAndNode++
			case memoNodeInfo, memoPodAndNodeInfo:
				cachedNodeInfo++
			}
		}
		// Node versions: the same name, updated twice.
		node := fuzzNode(strs[rng.IntN(len(strs))], uint8(rng.IntN(4)), uint16(rng.IntN(40)))
		node.Name = fmt.Sprintf("node-%d", i)
		for version := 1; version <= 3; version++ {
			node = node.DeepCopy()
			node.ResourceVersion = fmt.Sprint(version)
			node.Labels["zone"] = strs[rng.IntN(len(strs))]
			uncachedNode := node.DeepCopy()
			uncachedNode.ResourceVersion = ""
			info := manyPods(rng.IntN(20))
			generation++
			// Replicas: pods that differ only in their names share the
			// results of rules that read their labels.
			for j, podLabel := range []string{"a", "b", "a", strs[rng.IntN(len(strs))], "b"} {
				if rng.IntN(3) == 0 { // a pod placed on the node
					info = manyPods(rng.IntN(20))
					generation++
				}
				pod, err := conv.Pod(makePod("ns", fmt.Sprintf("p-%s-%d", podLabel, j), map[string]string{"app": podLabel}), makeNamespace("ns", nil))
				if err != nil {
					t.Fatal(err)
				}
				evaluate := func(n *NodeInput) outcome {
					ctx := context.Background()
					d := p.Filter(ctx, pod, n)
					scores := make([]float64, len(p.ScoreRules()))
					s := p.Score(ctx, pod, n, scores)
					o := outcomeOf(d, scores)
					o.Scores = append(o.Scores, s.Verdict.String(), s.Rule)
					return o
				}
				cachedInput, err := conv.NodeInput(node, generation, info, fromInfo)
				if err != nil {
					t.Fatal(err)
				}
				cached := &cachedInput
				if cached.memo == nil {
					t.Fatal("a node with a resourceVersion has no cache")
				}
				uncached, err := conv.Node(uncachedNode, func() *NodeInfo { return info })
				if err != nil {
					t.Fatal(err)
				}
				want := evaluate(uncached)
				for range 2 { // fills, then reads the cache
					if diff := cmp.Diff(want, evaluate(cached)); diff != "" {
						t.Fatalf("policy %+v on node version %d, pod %s: cached (+) and uncached (-) differ:\n%s", p.Name, version, podLabel, diff)
					}
					compared++
				}
			}
		}
	}
	if compared < 1000 || cachedNodeOnly < 50 || cachedPodAndNode < 50 || cachedNodeInfo < 50 {
		t.Errorf("only %d comparisons, %d node-only, %d pod-and-node and %d nodeInfo filters: the generator does not reach the cache",
			compared, cachedNodeOnly, cachedPodAndNode, cachedNodeInfo)
	}
	t.Logf("%d comparisons, %d node-only, %d pod-and-node and %d nodeInfo filters", compared, cachedNodeOnly, cachedPodAndNode, cachedNodeInfo)
}
