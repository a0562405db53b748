package examples

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Facts are what make run's program says it built: the sample policies it
// applied (from config/samples) and the number of nodes.
type Facts struct {
	Policies []string
	Nodes    int
}

var (
	appliedRE = regexp.MustCompile(`(?m)^Applied (\d+) sample SchedulingPolicies from \S+: (.*)$`)
	nodesRE   = regexp.MustCompile(`(?m)^Created (\d+) KWOK nodes`)
)

// ParseMakeRun reads the Facts from make run's output.
func ParseMakeRun(out string) (Facts, error) {
	var f Facts
	m := appliedRE.FindStringSubmatch(out)
	if m == nil {
		return f, errors.New("make run's output has no line `Applied N sample SchedulingPolicies from DIR: NAMES`")
	}
	f.Policies = strings.Split(m[2], ", ")
	if n, _ := strconv.Atoi(m[1]); n != len(f.Policies) {
		return f, fmt.Errorf("make run says it applied %s policies and names %d", m[1], len(f.Policies))
	}
	m = nodesRE.FindStringSubmatch(out)
	if m == nil {
		return f, errors.New("make run's output has no line `Created N KWOK nodes`")
	}
	f.Nodes, _ = strconv.Atoi(m[1])
	return f, nil
}

// claims are the counts a doc's prose states about make run's cluster.
var claims = []struct {
	re   *regexp.Regexp
	what string
	want func(Facts) int
}{
	{regexp.MustCompile("\\b(\\w+)\\s+policies\\s+of\\s+`config/samples/`"), "policies of config/samples/", func(f Facts) int { return len(f.Policies) }},
	{regexp.MustCompile(`\b(\w+)\s+KWOK\s+nodes\b`), "KWOK nodes", func(f Facts) int { return f.Nodes }},
}

var numbers = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
	"nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
	"seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20}

// CheckCounts finds, in a doc's prose, the number of sample policies make
// run applies and of nodes it creates ("the eleven policies of
// `config/samples/`", "six KWOK nodes"), and says where they differ from
// the facts. It also returns how many claims it checked.
func CheckCounts(doc string, text []byte, f Facts) (int, []error) {
	// Words wrap across lines: match on the text with lines joined (one
	// byte each, so offsets still give lines).
	flat := strings.ReplaceAll(string(text), "\n", " ")
	checked := 0
	var errs []error
	for _, c := range claims {
		for _, m := range c.re.FindAllStringSubmatchIndex(flat, -1) {
			word := strings.ToLower(flat[m[2]:m[3]])
			n, ok := numbers[word]
			if !ok {
				var err error
				if n, err = strconv.Atoi(word); err != nil {
					continue // "the KWOK nodes", "sample policies of ..."
				}
			}
			checked++
			if want := c.want(f); n != want {
				line := strings.Count(string(text[:m[0]]), "\n") + 1
				errs = append(errs, fmt.Errorf("%s:%d: says %q %s; make run has %d", doc, line, word, c.what, want))
			}
		}
	}
	return checked, errs
}
