package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// Rules that fail (no such key), are false, and are true, on the test node
// and pod, which have no "missing" label.
const (
	failingPodRule  = "pod.metadata.labels['missing'] == 'x'"
	failingNodeRule = "node.metadata.labels['missing'] == 'x'"
	failingScore    = "double(node.metadata.labels['missing'])"
)

// decided is what the matrix compares of a decision.
type decided struct {
	Verdict        Verdict
	Rule           string
	Acts, WouldAct bool
	Ignored        int
	Matches        bool      // Match only
	Raw            []float64 // Score only; -1 stands for NaN
}

// TestDecisionMatrix: every point decides the same way for every
// combination of enforcement and failurePolicy, with a policy whose first
// rule fails and whose second is false: under Fail the error decides;
// under Ignore the failing rule is skipped and the false rule after it
// still decides (as in ValidatingAdmissionPolicy); under Audit nothing
// acts, and the decision is what would have acted.
func TestDecisionMatrix(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	ctx := context.Background()
	pod := podInput(t, conv, nil, nil)
	node := nodeInput(t, conv, "n", nil, nil)
	type point struct {
		build  func(*builder.PolicyWrapper) *builder.PolicyWrapper
		decide func(*CompiledPolicy) decided
	}
	points := map[string]point{
		"match": {
			build: func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
				return b.Condition("broken", failingPodRule).Filter("f", "true")
			},
			decide: func(p *CompiledPolicy) decided {
				m := p.Match(ctx, pod)
				return decidedOf(&m.Decision, m.Matches, nil)
			},
		},
		"compile error": {
			build: func(b *builder.PolicyWrapper) *builder.PolicyWrapper { return b.Filter("f", "nope") },
			decide: func(p *CompiledPolicy) decided {
				m := p.Match(ctx, pod)
				return decidedOf(&m.Decision, m.Matches, nil)
			},
		},
		"preEnqueue": {
			build: func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
				return b.PreEnqueue("broken", failingPodRule, "").PreEnqueue("no", "false", "").PreEnqueue("yes", "true", "")
			},
			decide: func(p *CompiledPolicy) decided {
				matched, d := p.MatchAndPreEnqueue(ctx, pod)
				return decidedOf(&d, matched, nil)
			},
		},
		"filter": {
			build: func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
				return b.Filter("broken", failingNodeRule).Filter("no", "false").Filter("yes", "true")
			},
			decide: func(p *CompiledPolicy) decided {
				d := p.Filter(ctx, pod, node)
				return decidedOf(&d, true, nil)
			},
		},
		"score": {
			build: func(b *builder.PolicyWrapper) *builder.PolicyWrapper {
				return b.Score("broken", failingScore, 1, schedv1alpha1.MinMax).Score("five", "5", 1, schedv1alpha1.MinMax)
			},
			decide: func(p *CompiledPolicy) decided {
				raw := []float64{-2, -2}
				d := p.Score(ctx, pod, node, raw)
				return decidedOf(&d, true, raw)
			},
		},
	}
	want := map[string]decided{
		"match/Enforce/Fail":           {Verdict: Error, Rule: "broken", Acts: true, Matches: true},
		"match/Enforce/Ignore":         {Verdict: Pass, Ignored: 1},
		"match/Audit/Fail":             {Verdict: Error, Rule: "broken", WouldAct: true, Matches: true},
		"match/Audit/Ignore":           {Verdict: Pass, Ignored: 1},
		"compile error/Enforce/Fail":   {Verdict: Error, Acts: true, Matches: true},
		"compile error/Enforce/Ignore": {Verdict: Pass, Ignored: 1},
		"compile error/Audit/Fail":     {Verdict: Error, WouldAct: true, Matches: true},
		"compile error/Audit/Ignore":   {Verdict: Pass, Ignored: 1},
		"preEnqueue/Enforce/Fail":      {Verdict: Error, Rule: "broken", Acts: true, Matches: true},
		"preEnqueue/Enforce/Ignore":    {Verdict: Hold, Rule: "no", Acts: true, Ignored: 1, Matches: true},
		"preEnqueue/Audit/Fail":        {Verdict: Error, Rule: "broken", WouldAct: true, Matches: true},
		"preEnqueue/Audit/Ignore":      {Verdict: Hold, Rule: "no", WouldAct: true, Ignored: 1, Matches: true},
		"filter/Enforce/Fail":          {Verdict: Error, Rule: "broken", Acts: true, Matches: true},
		"filter/Enforce/Ignore":        {Verdict: Reject, Rule: "no", Acts: true, Ignored: 1, Matches: true},
		"filter/Audit/Fail":            {Verdict: Error, Rule: "broken", WouldAct: true, Matches: true},
		"filter/Audit/Ignore":          {Verdict: Reject, Rule: "no", WouldAct: true, Ignored: 1, Matches: true},
		"score/Enforce/Fail":           {Verdict: Error, Rule: "broken", Acts: true, Matches: true, Raw: []float64{-1, -2}},
		"score/Enforce/Ignore":         {Verdict: Pass, Ignored: 1, Matches: true, Raw: []float64{-1, 5}},
		"score/Audit/Fail":             {Verdict: Error, Rule: "broken", WouldAct: true, Matches: true, Raw: []float64{-1, -2}},
		"score/Audit/Ignore":           {Verdict: Pass, Ignored: 1, Matches: true, Raw: []float64{-1, 5}},
	}
	compiler := NewCompiler(testEnv(t))
	for pointName, pt := range points {
		for _, enforcement := range []schedv1alpha1.EnforcementAction{schedv1alpha1.Enforce, schedv1alpha1.Audit} {
			for _, failure := range []schedv1alpha1.FailurePolicyType{schedv1alpha1.Fail, schedv1alpha1.Ignore} {
				name := pointName + "/" + string(enforcement) + "/" + string(failure)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					b := builder.MakePolicy("p")
					if enforcement == schedv1alpha1.Audit {
						b = b.Audit()
					}
					if failure == schedv1alpha1.Ignore {
						b = b.Ignore()
					}
					p := compiler.Compile(pt.build(b).Obj(), CompileOptions{})
					if diff := cmp.Diff(want[name], pt.decide(p)); diff != "" {
						t.Errorf("decision (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

func decidedOf(d *Decision, matches bool, raw []float64) decided {
	out := decided{Verdict: d.Verdict, Rule: d.Rule, Acts: d.Acts(), WouldAct: d.WouldAct(), Ignored: len(d.Ignored), Matches: matches}
	for _, v := range raw {
		if math.IsNaN(v) {
			v = -1
		}
		out.Raw = append(out.Raw, v)
	}
	return out
}

// TestDecisionString: what a pod's owner reads, per verdict and point, on
// one line and without the node's name.
func TestDecisionString(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	p := compiler.Compile(builder.MakePolicy("p").Filter("r", "true").Obj(), CompileOptions{})
	broken := builder.MakePolicy("broken").Filter("f", "node.metadata.lables == {}").Filter("g", "1").Obj()
	compileErr := compiler.Compile(broken, CompileOptions{}).Err()
	evalErr := &EvalError{Policy: "p", Rule: "r", Field: "spec.filters[0].expression", Err: errNoSuchKey}
	cases := map[string]struct {
		d    Decision
		want string
	}{
		"pass":   {Decision{Policy: p}, ""},
		"reject": {Decision{Policy: p, Point: PointFilter, Verdict: Reject, Rule: "r", Message: "first line\nsecond line"}, "node(s) rejected by SchedulingPolicy p, rule r: first line"},
		"hold":   {Decision{Policy: p, Point: PointPreEnqueue, Verdict: Hold, Rule: "r", Message: "no"}, "held by SchedulingPolicy p, rule r: no"},
		"filter error": {Decision{Policy: p, Point: PointFilter, Verdict: Error, Rule: "r", Err: evalErr},
			"node(s) rejected: SchedulingPolicy p, rule r: spec.filters[0].expression: no such key: missing (failurePolicy Fail)"},
		"preEnqueue error": {Decision{Policy: p, Point: PointPreEnqueue, Verdict: Error, Rule: "r", Err: evalErr},
			"held: SchedulingPolicy p, rule r: spec.filters[0].expression: no such key: missing (failurePolicy Fail)"},
		"compile error": {Decision{Policy: p, Point: PointMatch, Verdict: Error, Err: compileErr},
			"SchedulingPolicy broken does not compile (failurePolicy Fail): spec.filters[0].expression: compilation failed: ERROR: <input>:1:14: undefined field 'lables' (and 1 more, see the policy's Ready condition)"},
		"long message is cut": {Decision{Policy: p, Point: PointFilter, Verdict: Reject, Rule: "r", Message: string(make([]byte, 5000))}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := tc.d.String()
			if name == "long message is cut" {
				if len(got) != MaxMessageLength {
					t.Errorf("length %d, want %d", len(got), MaxMessageLength)
				}
				return
			}
			if got != tc.want {
				t.Errorf("String() =\n%q, want\n%q", got, tc.want)
			}
		})
	}
}

var errNoSuchKey = errorString("no such key: missing")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestTruncate(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short":                  {"abc", 5, "abc"},
		"cut":                    {"abcdefgh", 6, "abc..."},
		"not inside a character": {"aééé", 5, "a..."}, // 7 bytes; the first 2 end inside an é
	}
	for name, tc := range cases {
		if got := Truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("%s: Truncate(%q, %d) = %q, want %q", name, tc.in, tc.n, got, tc.want)
		}
	}
}

// TestPodMessagesHideData: the error of ip(), cidr(), semver() or url()
// repeats its argument (here a node annotation); the message a pod's owner
// reads says where an admin finds it instead, while the decision's error,
// for the log and the policy's status, keeps it. CEL's own errors, which
// name parts of the expression, stay visible.
func TestPodMessagesHideData(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	node := makeNode("n", nil)
	node.Annotations = map[string]string{"addr": "tenant-b-secret-value", "version": "tenant-b-secret-value"}
	in, err := conv.Node(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	compiler := NewCompiler(testEnv(t))
	// hidden: the pod's message hides the error; echoes: the full error
	// repeats the annotation (so that the case shows the hiding works).
	type want struct{ hidden, echoes bool }
	for expression, w := range map[string]want{
		"ip(node.metadata.annotations['addr']).family() == 4":                       {true, true},
		"cidr(node.metadata.annotations['addr']).prefixLength() == 4":               {true, true},
		"semver(node.metadata.annotations['version']).major() == 1":                 {true, false},
		"url(node.metadata.annotations['addr']).getHost() == ''":                    {true, true},
		"node.metadata.annotations['missing'] == node.metadata.annotations['addr']": {false, false},
	} {
		t.Run(expression, func(t *testing.T) {
			hidden := w.hidden
			p := compiler.Compile(builder.MakePolicy("p").Filter("f", expression).Obj(), CompileOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			d := p.Filter(context.Background(), podInput(t, conv, nil, nil), in)
			if d.Verdict != Error {
				t.Fatalf("verdict %v, want Error", d.Verdict)
			}
			msg := d.String()
			if strings.Contains(msg, "tenant-b-secret-value") {
				t.Errorf("the pod's message shows the node's data: %s", msg)
			}
			if hidden {
				if w.echoes && !strings.Contains(d.Err.Error(), "tenant-b-secret-value") {
					t.Errorf("the full error lost the argument (so this case proves nothing): %v", d.Err)
				}
				if !strings.Contains(msg, "evaluation failed; the error is in the scheduler's log") {
					t.Errorf("message %q does not say where the error is", msg)
				}
			} else if !strings.Contains(msg, "no such key: missing") {
				t.Errorf("message %q hides CEL's own error", msg)
			}
		})
	}
}

// TestRejectionTextsBounded: a policy's rejections are formatted once per
// rule and message, at most maxRejectionTexts of them are kept, and every
// one reads the same whether it was kept or not.
func TestRejectionTextsBounded(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").Filter("f", "true").Obj())
	for round := range 2 {
		for i := range 2 * maxRejectionTexts {
			d := Decision{Policy: p, Point: PointFilter, Verdict: Reject, Rule: "f", Message: fmt.Sprintf("message %d", i)}
			want := fmt.Sprintf("node(s) rejected by SchedulingPolicy p, rule f: message %d", i)
			if got := d.String(); got != want {
				t.Fatalf("round %d: %q, want %q", round, got, want)
			}
		}
	}
	kept := 0
	p.texts.m.Range(func(any, any) bool { kept++; return true })
	if kept != maxRejectionTexts {
		t.Errorf("kept %d texts, want %d", kept, maxRejectionTexts)
	}
}
