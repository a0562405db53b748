package engine

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/celsched/celsched/engine/celcost"
)

// checkedExpr type-checks an expression against the stored-expressions
// environment of a fresh policy, for benchmarks that plan it themselves.
func checkedExpr(tb testing.TB, text string) (*cel.Env, *cel.Ast) {
	tb.Helper()
	pe, err := testEnv(tb).newPolicyEnv()
	if err != nil {
		tb.Fatal(err)
	}
	env, err := pe.envSet.Env(environment.StoredExpressions)
	if err != nil {
		tb.Fatal(err)
	}
	ast, issues := env.Compile(text)
	if issues.Err() != nil {
		tb.Fatal(issues.Err())
	}
	return env, ast
}

// celGoTracked is the program the Kubernetes environment builds as-is:
// cel-go's own runtime cost tracker, with no limit.
type celGoTracked struct{ prg cel.Program }

func (p celGoTracked) Eval(ctx context.Context, vars interpreter.Activation) (val ref.Val, cost uint64, err error) {
	v, details, err := p.prg.ContextEval(ctx, vars)
	if details != nil && details.ActualCost() != nil {
		cost = *details.ActualCost()
	}
	return v, cost, err
}

// BenchmarkTrackedLoop evaluates loops of growing length untracked
// (bounded), with celsched's cost tracker (tracked) and with cel-go's
// (cel-go), and reports the cost and the time per cost unit: cel-go's
// tracker is quadratic in the length of a loop, celsched's linear. The
// design in celcost/limits.go quotes these numbers.
func BenchmarkTrackedLoop(b *testing.B) {
	conv := NewConverter(testEnv(b), 0)
	pod, err := conv.Pod(makePod("ns", "p", nil), makeNamespace("ns", nil))
	if err != nil {
		b.Fatal(err)
	}
	node, err := conv.Node(realisticNode("n1"), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 10000, 30000} {
		env, ast := checkedExpr(b, fmt.Sprintf("lists.range(%d).all(i, i >= 0)", n))
		bounded, err := celcost.NewBounded(env, ast, 0)
		if err != nil {
			b.Fatal(err)
		}
		tracked, err := celcost.NewTracked(env, ast, math.MaxUint64)
		if err != nil {
			b.Fatal(err)
		}
		celgo, err := env.Program(ast, cel.CostLimit(math.MaxUint64))
		if err != nil {
			b.Fatal(err)
		}
		programs := []struct {
			name string
			prg  celcost.Program
		}{{"bounded", bounded}, {"tracked", tracked}, {"cel-go", celGoTracked{celgo}}}
		for _, p := range programs {
			if p.name == "cel-go" && n > 10000 {
				continue // over a second per evaluation
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, p.name), func(b *testing.B) {
				_, cost, err := p.prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
				if err != nil {
					b.Fatal(err)
				}
				if p.name == "bounded" {
					_, cost, _ = tracked.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
				}
				b.ResetTimer()
				for b.Loop() {
					if _, _, err := p.prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cost), "cost/op")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cost), "ns/unit")
			})
		}
	}
}

// BenchmarkFunctionCost evaluates each function whose work grows with its
// input on large inputs (bigNode's 160 KiB annotations and 500 images,
// 20000-element lists), tracked, and reports its cost and the time per
// cost unit: a function priced below its work shows many nanoseconds per
// unit. celcost/limits.go quotes these numbers.
func BenchmarkFunctionCost(b *testing.B) {
	const (
		a    = "node.metadata.annotations['big']"
		a2   = "node.metadata.annotations['big2']"
		csv  = "node.metadata.annotations['csv']"
		list = "lists.range(20000)"
	)
	conv := NewConverter(testEnv(b), 0)
	pod, err := conv.Pod(makePod("ns", "p", nil), makeNamespace("ns", nil))
	if err != nil {
		b.Fatal(err)
	}
	node, err := conv.Node(bigNode("big"), func() *NodeInfo { return manyPods(20000) })
	if err != nil {
		b.Fatal(err)
	}
	for _, x := range []string{
		"size(" + a + ")",
		a + ".charAt(100)",
		a + ".indexOf(" + a2 + ")",
		a + ".indexOf('b')",
		a + ".lastIndexOf('b')",
		a + ".substring(1)",
		a + ".lowerAscii()",
		a + ".replace('a', 'bb')",
		csv + ".split(',')",
		csv + ".split(',').join(',')",
		a + ".contains(" + a2 + ")",
		a + ".matches('^a*b$')",
		a + ".find('a+b')",
		a + ".findAll('a')",
		a + " + " + a,
		"strings.quote(" + a + ")",
		"'%s'.format([" + a + "])",
		"isURL(" + a + ")",
		"isIP(" + a + ")",
		"int(" + a + ")",
		"format.dns1123Label().validate(" + a + ")",
		a + " in node.metadata.labels",
		list + ".sort()",
		"lists.range(2000).distinct()",
		list + ".indexOf(19999)",
		list + ".map(i, string(i)).join(',')",
		"[" + list + ", " + list + "].flatten()",
		"sets.equivalent(lists.range(2000), lists.range(2000))",
		list + " == " + list,
		"node == node",
		"nodeInfo.pods == nodeInfo.pods",
	} {
		env, ast := checkedExpr(b, x)
		prg, err := celcost.NewTracked(env, ast, math.MaxUint64)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(x, func(b *testing.B) {
			var cost uint64
			for b.Loop() {
				_, cost, _ = prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
			}
			b.ReportMetric(float64(cost), "cost/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(max(cost, 1)), "ns/unit")
		})
	}
}
