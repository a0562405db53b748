package app

import (
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// tableWidth is the width the CLI's tables fit: long text (evidence,
// reasons, messages) is folded under its row; -o json and -o yaml carry
// it whole.
const tableWidth = 120

// writeWrapped writes text folded at spaces to tableWidth: its first line
// indented by first spaces, the others by rest. A word longer than a line
// gets a line of its own.
func writeWrapped(w io.Writer, first, rest int, text string) {
	var b strings.Builder
	indent := first
	line := 0
	for _, word := range strings.Fields(text) {
		switch {
		case line == 0:
			b.WriteString(strings.Repeat(" ", indent))
			line = indent
		case line+1+len(word) > tableWidth:
			b.WriteString("\n")
			indent = rest
			b.WriteString(strings.Repeat(" ", indent))
			line = indent
		default:
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}

// writeLabelled writes label, indented, and text after it folded to
// tableWidth, its continuation lines aligned under the text.
func writeLabelled(w io.Writer, indent int, label, text string) {
	folded := &strings.Builder{}
	writeWrapped(folded, indent+len(label), indent+len(label), text)
	out := folded.String()
	_, _ = io.WriteString(w, strings.Repeat(" ", indent)+label+out[indent+len(label):])
}

// newTable is a tabwriter for the CLI's tables whose rows longer than
// tableWidth are cut, ending in "…", when it is flushed (the whole text is
// in -o json and -o yaml), except the rows that begin with wholeRow.
func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

type table struct {
	*tabwriter.Writer
	out io.Writer
	buf strings.Builder
}

// wholeRow begins a row (in place of the space its first cell starts
// with) that Flush writes whole: a sub-expression and its value under a
// rule (--why), which the column it sits in leaves too little room.
const wholeRow = "\x00"

// Flush writes the table's rows, each at most tableWidth wide but those
// that begin with wholeRow.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(t.buf.String(), "\n")
	t.buf.Reset()
	for _, line := range lines {
		if whole, ok := strings.CutPrefix(line, wholeRow); ok {
			line = " " + whole
		} else if text := strings.TrimSuffix(line, "\n"); utf8.RuneCountInString(text) > tableWidth {
			line = string([]rune(text)[:tableWidth-1]) + "…\n"
		}
		if _, err := io.WriteString(t.out, line); err != nil {
			return err
		}
	}
	return nil
}

// plural is n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
