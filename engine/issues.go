package engine

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
)

// Bounds on the text of compile errors, so that an invalid policy is
// denied with a message a person can read, and that a policy of 64 rules
// of 5,120 characters of errors each is not denied with 70 MB of text (as
// it was when every CEL issue quoted the whole expression twice).
const (
	// MaxIssuesPerExpression is how many CEL issues the error of one
	// expression lists; the count of the others follows.
	MaxIssuesPerExpression = 3
	// MaxSnippetWidth is how many characters of the expression's line an
	// issue shows around its column.
	MaxSnippetWidth = 100
	// MaxQuotedExpression is how many bytes of an expression an error
	// quotes as the field's invalid value.
	MaxQuotedExpression = 200
	// MaxIssueMessage is how many bytes of one CEL issue's message are
	// shown (a message repeats an undeclared identifier, of any length).
	MaxIssueMessage = 256

	// celMaxIssues is how many issues cel-go keeps of one expression.
	celMaxIssues = 100
)

// issuesText formats the first MaxIssuesPerExpression issues of an
// expression as cel-go does (position, message, the line and a caret under
// the column), each line cut to MaxSnippetWidth characters around the
// column, and counts the others.
func issuesText(issues *cel.Issues, text string) string {
	errs := slices.Clone(issues.Errors())
	slices.SortStableFunc(errs, func(a, b *common.Error) int {
		if a.Location.Line() != b.Location.Line() {
			return a.Location.Line() - b.Location.Line()
		}
		return a.Location.Column() - b.Location.Column()
	})
	lines := strings.Split(text, "\n")
	var b strings.Builder
	for i, e := range errs {
		if i == MaxIssuesPerExpression {
			switch more := len(errs) - i; {
			case len(errs) >= celMaxIssues:
				fmt.Fprintf(&b, "\nand at least %d more errors", more)
			case more == 1:
				b.WriteString("\nand 1 more error")
			default:
				fmt.Fprintf(&b, "\nand %d more errors", more)
			}
			break
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "ERROR: <input>:%d:%d: %s", e.Location.Line(), e.Location.Column()+1, Truncate(e.Message, MaxIssueMessage))
		if line := e.Location.Line(); line >= 1 && line <= len(lines) {
			b.WriteString(snippet(lines[line-1], e.Location.Column()))
		}
	}
	return b.String()
}

// snippet is an issue's source line and a caret under its column (in
// characters, from 0), as cel-go draws them, with at most MaxSnippetWidth
// characters of the line around the column, "..." marking what is cut.
func snippet(line string, column int) string {
	line = strings.ReplaceAll(line, "\t", " ")
	runes := []rune(line)
	column = min(max(column, 0), len(runes))
	start, end := 0, len(runes)
	if len(runes) > MaxSnippetWidth {
		start = max(0, min(column-MaxSnippetWidth/2, len(runes)-MaxSnippetWidth))
		end = start + MaxSnippetWidth
	}
	var src, caret strings.Builder
	src.WriteString("\n | ")
	caret.WriteString("\n | ")
	if start > 0 {
		src.WriteString("...")
		caret.WriteString("...")
	}
	src.WriteString(string(runes[start:end]))
	if end < len(runes) {
		src.WriteString("...")
	}
	for _, r := range runes[start:column] {
		if utf8.RuneLen(r) > 1 {
			caret.WriteString("\uff0e")
		} else {
			caret.WriteString(".")
		}
	}
	if column < len(runes) && utf8.RuneLen(runes[column]) > 1 {
		caret.WriteString("\uff3e")
	} else {
		caret.WriteString("^")
	}
	return src.String() + caret.String()
}

// textSource is an expression's source for the CEL compiler, without
// snippets: cel-go renders every issue as text inside Compile (Issues.Err),
// drawing the issue's whole line and a caret built one character at a
// time, which for 100 issues on a line of 5,120 characters allocates
// gigabytes. issuesText draws the snippets instead.
type textSource struct {
	common.Source
}

// Snippet implements common.Source: there are none.
func (textSource) Snippet(int) (string, bool) { return "", false }

// quoted is an expression as a field error quotes it: whole when short,
// else its first MaxQuotedExpression bytes and its length.
func quoted(text string) string {
	if len(text) <= MaxQuotedExpression {
		return text
	}
	return fmt.Sprintf("%s... (%d characters)", cutUTF8(text, MaxQuotedExpression), utf8.RuneCountInString(text))
}

// cutUTF8 is the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 character.
func cutUTF8(s string, n int) string {
	cut := s[:n]
	for cut != "" && !utf8.RuneStart(s[len(cut)]) {
		cut = cut[:len(cut)-1]
	}
	return cut
}
