package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/builder"
)

// undeclared is an expression of n undeclared identifiers, nope0 && nope1
// && ..., at most limit bytes long.
func undeclared(n, limit int) string {
	var b strings.Builder
	for i := range n {
		next := fmt.Sprintf("nope%d", i)
		if i > 0 {
			next = " && " + next
		}
		if b.Len()+len(next) > limit {
			break
		}
		b.WriteString(next)
	}
	return b.String()
}

// TestCompileErrorText: a CEL error lists at most MaxIssuesPerExpression
// issues, each with at most MaxIssueMessage bytes of message and
// MaxSnippetWidth characters of the line around its column, and quotes at
// most MaxQuotedExpression bytes of the expression; short expressions read
// as cel-go writes them.
func TestCompileErrorText(t *testing.T) {
	t.Parallel()
	long := undeclared(1000, 5120)
	tests := map[string]struct {
		expression string
		want       string
	}{
		"short, as cel-go writes it": {
			expression: "node.metadata.labels['zone'] == nope",
			want: `spec.filters[0].expression: Invalid value: "node.metadata.labels['zone'] == nope": compilation failed: ERROR: <input>:1:33: undeclared reference to 'nope' (in container '')
 | node.metadata.labels['zone'] == nope
 | ................................^`,
		},
		"four issues": {
			expression: "a && b && c && d",
			want: `spec.filters[0].expression: Invalid value: "a && b && c && d": compilation failed: ERROR: <input>:1:1: undeclared reference to 'a' (in container '')
 | a && b && c && d
 | ^
ERROR: <input>:1:6: undeclared reference to 'b' (in container '')
 | a && b && c && d
 | .....^
ERROR: <input>:1:11: undeclared reference to 'c' (in container '')
 | a && b && c && d
 | ..........^
and 1 more error`,
		},
		"a long line, cut around the column, and a long message": {
			expression: strings.Repeat("x", 300) + " + 'a' == 1",
			want: `spec.filters[0].expression: Invalid value: "` + strings.Repeat("x", 200) + `... (311 characters)": compilation failed: ERROR: <input>:1:1: undeclared reference to '` + strings.Repeat("x", 228) + `...
 | ` + strings.Repeat("x", 100) + `...
 | ^
ERROR: <input>:1:308: found no matching overload for '_==_' applied to '(string, int)'
 | ...` + strings.Repeat("x", 89) + ` + 'a' == 1
 | ...` + strings.Repeat(".", 96) + `^`,
		},
		"5,120 characters of undeclared identifiers": {
			expression: long,
			want: `spec.filters[0].expression: Invalid value: "` + long[:200] + `... (` + fmt.Sprint(len(long)) + ` characters)": compilation failed: ERROR: <input>:1:1: undeclared reference to 'nope0' (in container '')
 | ` + long[:100] + `...
 | ^
ERROR: <input>:1:10: undeclared reference to 'nope1' (in container '')
 | ` + long[:100] + `...
 | .........^
ERROR: <input>:1:19: undeclared reference to 'nope2' (in container '')
 | ` + long[:100] + `...
 | ..................^
and at least 97 more errors`,
		},
		"an issue far into a long line": {
			expression: strings.Repeat("1 + ", 100) + "nope",
			want: `spec.filters[0].expression: Invalid value: "` + strings.Repeat("1 + ", 50) + `... (404 characters)": compilation failed: ERROR: <input>:1:401: undeclared reference to 'nope' (in container '')
 | ...` + strings.Repeat("1 + ", 24) + `nope
 | ...` + strings.Repeat(".", 96) + `^`,
		},
	}
	compiler := NewCompiler(testEnv(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compiler.Compile(builder.MakePolicy("p").Filter("f", tc.expression).Obj(), CompileOptions{})
			var got []string
			for _, e := range p.Errors {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompileStops: a compile stops at MaxErrors errors, or when its
// context is done, and its last error says so.
func TestCompileStops(t *testing.T) {
	t.Parallel()
	policy := builder.MakePolicy("p")
	for i := range 5 {
		policy.Filter(fmt.Sprintf("f%d", i), "nope")
	}
	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("the request was abandoned"))
	tests := map[string]struct {
		ctx       context.Context
		maxErrors int
		want      []string // fields, then the last error's text
	}{
		"everything": {
			ctx: context.Background(),
			want: []string{"spec.filters[0].expression", "spec.filters[1].expression", "spec.filters[2].expression",
				"spec.filters[3].expression", "spec.filters[4].expression"},
		},
		"at most 2 errors": {
			ctx:       context.Background(),
			maxErrors: 2,
			want: []string{"spec.filters[0].expression", "spec.filters[1].expression", "spec",
				"spec: Forbidden: too many errors: the first 2 are listed, the other expressions were not checked"},
		},
		"cancelled": {
			ctx: cancelled,
			want: []string{"spec",
				"spec: Internal error: compilation stopped before every expression was checked: the request was abandoned"},
		},
	}
	compiler := NewCompiler(testEnv(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compiler.CompileContext(tc.ctx, policy.Obj(), CompileOptions{MaxErrors: tc.maxErrors})
			var got []string
			for _, e := range p.Errors {
				got = append(got, e.Field)
			}
			if last := p.Errors[len(p.Errors)-1]; last.Field == "spec" {
				got = append(got, last.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkCompileHugeInvalidPolicy compiles the largest invalid policy
// the API accepts: 64 rules whose expression and messageExpression are
// 5,120 characters of undeclared identifiers (622 KB), every error listed.
// Before CEL issues were capped and drawn by celsched, this took 5.7 s and
// allocated 17.5 GB, for 73 MB of error text.
func BenchmarkCompileHugeInvalidPolicy(b *testing.B) {
	expression := undeclared(1000, 5120)
	policy := builder.MakePolicy("huge")
	for i := range 64 {
		policy.FilterMsg(fmt.Sprintf("r%d", i), expression, "", expression)
	}
	p := policy.Obj()
	compiler := NewCompiler(testEnv(b))
	b.ReportAllocs()
	var size int
	for b.Loop() {
		compiled := compiler.Compile(p, CompileOptions{})
		size = len(compiled.Err().Error())
	}
	b.ReportMetric(float64(size), "error-bytes")
}
