package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
)

// bigNode is a node as the probes made them: a 160 KiB annotation
// (big), another of 80 KiB ending differently (big2), a comma-separated
// one (csv), and 500 images.
func bigNode(name string) *corev1.Node {
	node := realisticNode(name)
	node.Annotations = map[string]string{
		"big":  strings.Repeat("a", 160*1024),
		"big2": strings.Repeat("a", 80*1024) + "b",
		"csv":  strings.Repeat("a,", 80*1024),
	}
	node.Status.Images = nil
	for i := range 500 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:0123456789abcdef", i)},
			SizeBytes: int64(i + 1),
		})
	}
	return node
}

// TestExpensiveExpressionsAreStopped: each expression of the issue, and
// others whose work grows with their input, is either denied at compile
// time with its estimated cost, or cut off at runtime by its cost limit;
// both errors name the expression's field.
func TestExpensiveExpressionsAreStopped(t *testing.T) {
	t.Parallel()
	const field = "spec.filters[0].expression"
	tests := map[string]struct {
		expression string
		// denied: the compiler refuses it; otherwise it compiles and its
		// evaluation on bigNode stops at the cost limit.
		denied bool
	}{
		"charAt at 20000 indices (151 s on 20 nodes)": {
			expression: "lists.range(20000).all(i, node.metadata.?annotations[?'big'].orValue('').charAt(i) != '#')",
			denied:     true,
		},
		"indexOf of one annotation in another (57 s on 20 nodes)": {
			expression: "has(node.metadata.annotations) && 'big' in node.metadata.annotations && 'big2' in node.metadata.annotations && " +
				"node.metadata.annotations['big'].indexOf(node.metadata.annotations['big2']) >= 0",
			denied: true,
		},
		"lastIndexOf of one annotation in another": {
			expression: "node.metadata.?annotations[?'big'].orValue('').lastIndexOf(node.metadata.?annotations[?'big2'].orValue('')) >= 0",
			denied:     true,
		},
		"replace inserting an annotation between every character": {
			expression: "size(node.metadata.?annotations[?'big'].orValue('').replace('', node.metadata.?annotations[?'big2'].orValue(''))) > 0",
			denied:     true,
		},
		"deep comparison of a node in a loop": {
			expression: "node.status.images.all(i, node == node)",
			denied:     true,
		},
		"nested loop over node.status.images (5.5 s on 20 nodes)": {
			expression: "node.status.images.all(a, node.status.images.all(b, a.sizeBytes >= 0))",
		},
		"charAt at 300 indices": {
			expression: "lists.range(300).all(i, node.metadata.?annotations[?'big'].orValue('').charAt(i) != '#')",
		},
		"size of an annotation in a loop": {
			expression: "node.status.images.all(i, size(node.metadata.?annotations[?'big'].orValue('')) > 0)",
			denied:     true,
		},
		"size of an annotation 100 times": {
			expression: "lists.range(100).all(i, size(node.metadata.?annotations[?'big'].orValue('')) > i)",
		},
		"distinct of a long list, refused before it runs": {
			expression: "node.status.images.map(i, i.sizeBytes).distinct().size() > 0 && " +
				"node.status.images.map(i, i.sizeBytes + 1).distinct().size() > 0",
		},
	}
	compiler := NewCompiler(testEnv(t))
	conv := NewConverter(testEnv(t), 0)
	node, err := conv.Node(bigNode("big"), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := podInput(t, conv, nil, nil)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compiler.Compile(builder.MakePolicy("p").Filter("f", tc.expression).Obj(), CompileOptions{})
			if tc.denied {
				if len(p.Errors) != 1 || p.Errors[0].Field != field || !strings.Contains(p.Errors[0].Error(), "estimated cost") {
					t.Fatalf("want one compile error of %s with its estimated cost, got %v", field, p.Errors)
				}
				return
			}
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			if _, ok := p.filters[0].prg.(*celcost.Tracked); !ok {
				t.Fatalf("program is %T, want tracked", p.filters[0].prg)
			}
			err := p.Filter(context.Background(), pod, node).Err
			var evalErr *EvalError
			if !errors.As(err, &evalErr) || evalErr.Field != field || !errors.Is(err, celcost.ErrCostLimitExceeded) || !strings.Contains(err.Error(), "cost") {
				t.Fatalf("want an evaluation error of %s over its cost limit, got %v", field, err)
			}
		})
	}
}

// TestOrdinaryRulesStayBounded: pricing functions by their input does not
// make ordinary rules tracked (slower) or warned.
func TestOrdinaryRulesStayBounded(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		policy      *builder.PolicyWrapper
		wantTracked []bool // per filter, then per score
	}{
		"label filter": {
			policy:      builder.MakePolicy("p").Filter("zone", zoneFilter),
			wantTracked: []bool{false},
		},
		"optional label with a message naming the node": {
			policy: builder.MakePolicy("p").FilterMsg("gpu", "node.metadata.?labels[?'nvidia.com/gpu.present'].orValue('') == 'true'", "",
				"'node %s has no GPU, zone %s'.format([node.metadata.name, node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('none')])"),
			wantTracked: []bool{false},
		},
		"label prefix and length": {
			policy:      builder.MakePolicy("p").Filter("pool", "node.metadata.labels[?'celsched.io/pool'].orValue('').startsWith('gpu-') && size(node.metadata.name) < 64"),
			wantTracked: []bool{false},
		},
		"an annotation's text": {
			policy:      builder.MakePolicy("p").Filter("reason", "node.metadata.?annotations[?'celsched.io/maintenance-reason'].orValue('').lowerAscii().indexOf('disk') < 0"),
			wantTracked: []bool{false},
		},
		"quantity score": {
			policy:      builder.MakePolicy("p").Score("cpu", "quantity(node.status.allocatable['cpu']).asApproximateFloat()", 1, ""),
			wantTracked: []bool{false},
		},
	}
	compiler := NewCompiler(testEnv(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compiler.Compile(tc.policy.Obj(), CompileOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) > 0 {
				t.Errorf("warnings: %v", p.Warnings)
			}
			var got []bool
			for _, f := range p.filters {
				_, tracked := f.prg.(*celcost.Tracked)
				got = append(got, tracked)
				if f.messageExpression != nil {
					if _, tracked := f.messageExpression.prg.(*celcost.Tracked); tracked {
						t.Errorf("messageExpression of %s is tracked", f.name)
					}
				}
			}
			for _, s := range p.scores {
				_, tracked := s.prg.(*celcost.Tracked)
				got = append(got, tracked)
			}
			if diff := cmp.Diff(tc.wantTracked, got); diff != "" {
				t.Errorf("tracked programs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEstimateBoundsRuntimeCost: on a node within the sizes the API server
// allows, what an expression costs at runtime is never more than its
// worst-case estimate, so that an untracked (bounded) program is bounded in
// fact.
func TestEstimateBoundsRuntimeCost(t *testing.T) {
	t.Parallel()
	const (
		a   = "node.metadata.annotations['big']"
		b   = "node.metadata.annotations['big2']"
		csv = "node.metadata.annotations['csv']"
	)
	expressions := []string{
		"size(" + a + ")",
		a + ".charAt(100)",
		a + ".indexOf('b')",
		a + ".indexOf('b', 5)",
		a + ".lastIndexOf('b')",
		a + ".lastIndexOf('b', 100)",
		a + ".substring(1)",
		a + ".substring(1, 10)",
		a + ".lowerAscii()",
		a + ".upperAscii()",
		a + ".trim()",
		a + ".replace('a', 'bb')",
		a + ".replace('a', 'b', 5)",
		csv + ".replace(',', 'xyz')",
		csv + ".split(',')",
		a + ".split('')",
		csv + ".split(',').join('-')",
		a + ".contains(" + b + ")",
		a + ".startsWith(" + b + ")",
		a + ".endsWith('b')",
		a + ".matches('^a*b$')",
		a + ".find('a+b')",
		a + ".findAll('a')",
		a + " + " + b,
		a + " == " + b,
		a + " < " + b,
		"strings.quote(" + a + ")",
		"'%s and %s'.format([" + a + ", node.metadata.name])",
		"isQuantity(" + a + ")",
		"isSemver(" + a + ")",
		"isIP(" + a + ")",
		"isCIDR(" + a + ")",
		"isURL(" + a + ")",
		"format.dns1123Label().validate(" + a + ").hasValue()",
		"string(bytes(" + a + "))",
		"int(" + a + ")",
		"node.metadata.labels.map(k, k).sort()",
		"node.status.images.map(i, i.sizeBytes).distinct()",
		"node.status.images.map(i, i.names[0]).indexOf('x')",
		"sets.equivalent(node.status.images.map(i, i.sizeBytes), node.status.images.map(i, i.sizeBytes))",
		"node.status.images.map(i, i.sizeBytes).sum()",
		"node.status.images == node.status.images",
		"node.metadata.labels == node.metadata.labels",
		"node == node",
		"node.status.images[0] in node.status.images",
		"lists.range(20000).reverse().slice(0, 100)",
	}
	conv := NewConverter(testEnv(t), 0)
	node, err := conv.Node(bigNode("big"), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := podInput(t, conv, nil, nil)
	for _, x := range expressions {
		t.Run(x, func(t *testing.T) {
			env, ast := checkedExpr(t, x)
			pe, err := testEnv(t).newPolicyEnv()
			if err != nil {
				t.Fatal(err)
			}
			estimate, err := env.EstimateCost(ast, pe.worst)
			if err != nil {
				t.Fatal(err)
			}
			prg, err := celcost.NewTracked(env, ast, estimate.Max)
			if err != nil {
				t.Fatal(err)
			}
			_, cost, err := prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
			if errors.Is(err, celcost.ErrCostLimitExceeded) {
				t.Fatalf("cost %d passed the estimate %d", cost, estimate.Max)
			}
			if cost == 0 {
				t.Fatalf("not evaluated: %v", err)
			}
		})
	}
}

// TestRefusedCallIsNotRun: a call whose price passes the limit is refused
// before it runs (an indexOf of an 80 KiB string in a 160 KiB one takes
// seconds), and what the evaluation is charged is what ran.
func TestRefusedCallIsNotRun(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	node, err := conv.Node(bigNode("big"), nil)
	if err != nil {
		t.Fatal(err)
	}
	env, ast := checkedExpr(t, "node.metadata.annotations['big'].indexOf(node.metadata.annotations['big2']) >= 0")
	prg, err := celcost.NewTracked(env, ast, celcost.PerExpressionCostLimit)
	if err != nil {
		t.Fatal(err)
	}
	// Again: the program reuses the state of the evaluation it stopped.
	for range 3 {
		_, cost, err := prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), podInput(t, conv, nil, nil), node))
		if !errors.Is(err, celcost.ErrCostLimitExceeded) {
			t.Fatalf("want the cost limit error, got %v", err)
		}
		if cost > celcost.PerExpressionCostLimit {
			t.Errorf("charged %d, more than the limit %d", cost, celcost.PerExpressionCostLimit)
		}
	}
}

// TestTrackedConcurrent: evaluations of one tracked program in parallel,
// as the scheduler's Filter runs, each see their own cost (the program
// reuses its cost states; meaningful under -race).
func TestTrackedConcurrent(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	env, ast := checkedExpr(t, "nodeInfo.pods.all(p, p.name.size() > 0 && p.labels[?'app'].orValue('') == 'web')")
	prg, err := celcost.NewTracked(env, ast, celcost.PerExpressionCostLimit)
	if err != nil {
		t.Fatal(err)
	}
	pod := podInput(t, conv, nil, nil)
	want := map[int]uint64{}
	for _, n := range []int{1, 10, 100} {
		node := nodeInput(t, conv, fmt.Sprintf("n%d", n), nil, manyPods(n))
		_, cost, err := prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
		if err != nil {
			t.Fatal(err)
		}
		want[n] = cost
	}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		n := []int{1, 10, 100}[i%3]
		node := nodeInput(t, conv, fmt.Sprintf("n%d-%d", n, i), nil, manyPods(n))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, cost, err := prg.Eval(context.Background(), (&CompiledPolicy{Program: &Program{Name: "p"}}).newEvaluation(context.Background(), pod, node))
				if err == nil && cost != want[n] {
					err = fmt.Errorf("%d pods cost %d, want %d", n, cost, want[n])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
