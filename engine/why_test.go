package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

func TestWhy(t *testing.T) {
	t.Parallel()
	zone := "topology.kubernetes.io/zone"
	tests := map[string]struct {
		expression string
		preEnqueue bool
		nodeLabels map[string]string
		want       []Step
	}{
		"label not in a list": {
			expression: "node.metadata.labels['" + zone + "'] in ['a', 'b']",
			nodeLabels: map[string]string{zone: "c"},
			want: []Step{
				{Expr: `node.metadata.labels["topology.kubernetes.io/zone"] in ["a", "b"]`, Value: "false"},
				{Expr: `node.metadata.labels["topology.kubernetes.io/zone"]`, Value: `"c"`},
			},
		},
		"optional and a variable": {
			expression: "node.metadata.labels[?'" + zone + "'].orValue('') == variables.want && variables.want != ''",
			nodeLabels: map[string]string{},
			want: []Step{
				{Expr: `node.metadata.labels[?"topology.kubernetes.io/zone"].orValue("") == variables.want && variables.want != ""`, Value: "false"},
				{Expr: `node.metadata.labels[?"topology.kubernetes.io/zone"].orValue("") == variables.want`, Value: "false"},
				{Expr: `node.metadata.labels[?"topology.kubernetes.io/zone"].orValue("")`, Value: `""`},
				{Expr: `node.metadata.labels[?"topology.kubernetes.io/zone"]`, Value: "optional.none()"},
				{Expr: `variables.want`, Value: `"a"`},
			},
		},
		"comprehension": {
			expression: "pod.spec.containers.all(c, c.name.startsWith('app'))",
			preEnqueue: true,
			want: []Step{
				{Expr: `pod.spec.containers.all(c, c.name.startsWith('app'))`, Value: "false"},
				{Expr: `pod.spec.containers`, Value: `[{"image":"registry.k8s.io/pause:3.10","name":"main","resources":{"requests":{"cpu":"500m","memory":"1Gi"}}}]`},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := builder.MakePolicy("p").Variable("want", "'a'")
			if tc.preEnqueue {
				b = b.PreEnqueue("r", tc.expression, "")
			} else {
				b = b.Filter("r", tc.expression)
			}
			p := compileExplained(t, b.Obj())
			conv := NewConverter(testEnv(t), 0)
			in := podInput(t, conv, nil, nil)
			w := &Why{}
			var got []Step
			var err error
			if tc.preEnqueue {
				got, err = w.PreEnqueue(context.Background(), p, in, "r")
			} else {
				got, err = w.Filter(context.Background(), p, in, nodeInput(t, conv, "n", tc.nodeLabels, nil), "r")
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWhyIsBounded: many sub-expressions and long values are cut.
func TestWhyIsBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 500)
	var terms []string
	for range 30 {
		terms = append(terms, "node.metadata.name + '"+long+"' == ''")
	}
	p := compileExplained(t, builder.MakePolicy("p").Filter("r", strings.Join(terms, " || ")).Obj())
	conv := NewConverter(testEnv(t), 0)
	got, err := (&Why{}).Filter(context.Background(), p, podInput(t, conv, nil, nil), nodeInput(t, conv, "n", nil, nil), "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxWhySteps {
		t.Errorf("%d steps, want %d", len(got), MaxWhySteps)
	}
	for _, s := range got {
		if len(s.Expr) > MaxWhyLength || len(s.Value) > MaxWhyLength {
			t.Errorf("step longer than %d: %q = %q", MaxWhyLength, s.Expr, s.Value)
		}
	}
	if none, err := (&Why{}).Filter(context.Background(), p, podInput(t, conv, nil, nil), nodeInput(t, conv, "n", nil, nil), "no-such-rule"); none != nil || err != nil {
		t.Errorf("an unknown rule: %v, %v", none, err)
	}
}

// TestWhyNeedsExplain: a policy compiled as the scheduler compiles it keeps
// no checked expressions, and gets no explanation.
func TestWhyNeedsExplain(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").Filter("r", "node.metadata.name == 'x'").Obj())
	conv := NewConverter(testEnv(t), 0)
	got, err := (&Why{}).Filter(context.Background(), p, podInput(t, conv, nil, nil), nodeInput(t, conv, "n", nil, nil), "r")
	if got != nil || err != nil {
		t.Errorf("Why of a policy compiled without Explain: %v, %v", got, err)
	}
	if p.filters[0].checked != nil {
		t.Error("a policy compiled without Explain keeps its checked expressions")
	}
}

func compileExplained(t *testing.T, p *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	t.Helper()
	compiled := NewCompiler(testEnv(t)).Compile(p, CompileOptions{Explain: true})
	if err := compiled.Err(); err != nil {
		t.Fatalf("compile: %v", err)
	}
	return compiled
}
