package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/builder"
)

// TestRememberedCostCharged: a policy whose filters together exceed the
// cost budget fails the same for every pod on a node, whether its filters
// were evaluated (the first pod) or remembered (the next ones).
func TestRememberedCostCharged(t *testing.T) {
	t.Parallel()
	b := builder.MakePolicy("expensive")
	for k := range 18 {
		b.Filter(fmt.Sprintf("f%d", k), fmt.Sprintf("lists.range(100000).all(i, i >= -%d) && node.metadata.name != ''", k))
	}
	p := compileOK(t, b.Obj())
	conv := NewConverter(testEnv(t), 0)
	node := nodeInput(t, conv, "n", nil, nil)
	var first Decision
	for i := range 3 {
		in, err := conv.Pod(makePod("team-a", fmt.Sprintf("p%d", i), nil), makeNamespace("team-a", nil))
		if err != nil {
			t.Fatal(err)
		}
		d := p.Filter(context.Background(), in, node)
		if !errors.Is(d.Err, ErrCostBudgetExceeded) {
			t.Fatalf("pod %d: %s, want the cost budget exceeded", i, d.String())
		}
		if i == 0 {
			first = d
			continue
		}
		if diff := cmp.Diff(outcomeOf(first, nil), outcomeOf(d, nil)); diff != "" {
			t.Errorf("pod %d (remembered) and pod 0 (evaluated) differ:\n%s", i, diff)
		}
	}
}

// TestErrorsAreValues: two rules reading one failing variable each get an
// error naming themselves, every time, in every goroutine, although the
// variable's error is one memo entry (run with -race).
func TestErrorsAreValues(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").Ignore().
		Variable("rack", "node.metadata.labels['rack']").
		Filter("a", "variables.rack != 'x'").
		Filter("b", "variables.rack != 'y'").Obj())
	conv := NewConverter(testEnv(t), 0)
	node := makeNode("no-rack", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				in, err := conv.Pod(makePod("team-a", fmt.Sprintf("p%d-%d", g, i), nil), makeNamespace("team-a", nil))
				if err != nil {
					errs <- err
					return
				}
				n, err := conv.NodeInput(node, 0, nil, nil)
				if err != nil {
					errs <- err
					return
				}
				d := p.Filter(context.Background(), in, &n)
				var rules []string
				for _, e := range d.Ignored {
					var ee *EvalError
					if !errors.As(e, &ee) {
						errs <- fmt.Errorf("ignored error %T: %v", e, e)
						return
					}
					rules = append(rules, ee.Rule+" "+ee.Field)
				}
				want := []string{"a spec.variables[0].expression", "b spec.variables[0].expression"}
				if d.Verdict != Pass || !cmp.Equal(want, rules) {
					errs <- fmt.Errorf("goroutine %d, pod %d: %s, ignored errors name %v, want %v", g, i, d.Verdict, rules, want)
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
