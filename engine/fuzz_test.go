package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// maxCompileErrorBytes bounds the text of one compile error: a field path,
// at most MaxQuotedExpression bytes of the expression (quoted, so up to
// ten bytes each), and at most MaxIssuesPerExpression issues of
// MaxIssueMessage bytes with MaxSnippetWidth characters of snippet and
// caret (up to four bytes each).
const maxCompileErrorBytes = 100 + 10*MaxQuotedExpression + 100 +
	MaxIssuesPerExpression*(100+MaxIssueMessage+2*4*(MaxSnippetWidth+10)) + 100

// FuzzCompile compiles arbitrary expression text in every position of a
// policy: it must never panic, and a policy either compiles or says why,
// with a field path and an error of bounded size. The environment is built
// once, outside the fuzz function.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		zoneFilter,
		"nodeInfo.pods.filter(p, p.labels[?'app'].orValue('') == 'web').size()",
		"pod.spec.containers.exists(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)",
		"quantity(node.status.allocatable['cpu']).asApproximateFloat()",
		"cel.bind(x, 1, x + x)",
		"variables.v",
		"'a' + ",
		"[1, 'a']",
		"node.metadata.labels[?'a'].orValue(1)",
		"lists.range(20000).all(i, node.metadata.?annotations[?'big'].orValue('').charAt(i) != '#')",
		"node.metadata.annotations['big'].indexOf(node.metadata.annotations['big2']) >= 0",
		"node.metadata.?annotations[?'a'].orValue('').replace('', 'xyz').size() > 0",
		"'%s and %d'.format([node.metadata.name, nodeInfo.podCount])",
		"node == node && [1, 2] == [1, 2] && {'a': 1} in [{'a': 1}]",
		"[[1], [2, 3]].flatten().size()",
		"nope0 && nope1 && nope2 && nope3 && " + strings.Repeat("x", 600),
		"params == null || node.metadata.labels[?'zone'].orValue('') in params.data['zones'].split(',')",
		"params.?spec.zones.orValue([]).exists(z, z == 'a')",
	} {
		f.Add(seed)
	}
	compiler := NewCompiler(testEnv(f))
	f.Fuzz(func(t *testing.T, expression string) {
		p := builder.MakePolicy("fuzz").
			Condition("c", expression).
			Variable("v", expression).
			PreEnqueue("pe", expression, "").
			FilterMsg("f", expression, "", expression).
			Score("s", expression, 1, schedv1alpha1.MinMax).Obj()
		compiled := compiler.Compile(p, CompileOptions{})
		if compiled.Err() == nil && len(compiled.filters) != 1 {
			t.Fatalf("policy compiled without its filter")
		}
		for _, e := range compiled.Errors {
			if e.Field == "" {
				t.Fatalf("error without a field path: %v", e)
			}
			if n := len(e.Error()); n > maxCompileErrorBytes {
				t.Fatalf("error of %d bytes, want at most %d: %.300s...", n, maxCompileErrorBytes, e.Error())
			}
		}
	})
}

// Fragments of expressions for FuzzEvaluate. {s} is a fuzzed string
// literal, {n} a fuzzed integer, {k} a small non-negative one.
var (
	boolFragments = []string{
		"node.metadata.labels[?'zone'].orValue('') == {s}",
		"node.metadata.?labels[?{s}].hasValue()",
		"node.metadata.labels.exists(k, k.startsWith({s}))",
		"node.metadata.name.split('-').size() > {k}",
		"node.metadata.?annotations[?'big'].orValue('').contains({s})",
		"node.metadata.?annotations[?'big'].orValue('').indexOf({s}) >= 0",
		"node.metadata.?annotations[?'big'].orValue('').lastIndexOf({s}, {k}) >= 0",
		"node.metadata.?annotations[?'big'].orValue('').charAt({k}) != '#'",
		"lists.range({k}).all(i, node.metadata.?annotations[?'big'].orValue('').charAt(i) != '#')",
		"size(node.metadata.?annotations[?'big'].orValue('')) > {n}",
		"node.metadata.?annotations[?'big'].orValue('').matches({s})",
		"node.metadata.?annotations[?'big'].orValue('').find('a+b') == ''",
		"node.metadata.?annotations[?'big'].orValue('').replace({s}, 'xyz') != ''",
		"node.metadata.?annotations[?'big'].orValue('').lowerAscii().substring({k}) != ''",
		"node.metadata.?annotations[?'csv'].orValue('').split(',').join('-').size() > 0",
		"node.metadata.?annotations[?'big'].orValue('') == node.metadata.?annotations[?'big2'].orValue('')",
		"node.status.images.exists(i, i.sizeBytes > {n})",
		"node.status.images.all(a, node.status.images.exists(b, a.sizeBytes == b.sizeBytes))",
		"node.status.images.map(i, i.sizeBytes).distinct().size() > {k}",
		"sets.contains(node.status.images.map(i, i.sizeBytes), [{n}])",
		"node.status.images[0] in node.status.images",
		"nodeInfo.pods.exists(p, p.labels[?'app'].orValue('') == {s})",
		"nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size() < {k}",
		"nodeInfo.pods.all(a, nodeInfo.pods.exists(b, a.name == b.name))",
		"nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu'] >= {n}",
		"lists.range({k}).all(i, i >= 0)",
		"pod.spec.containers.all(c, c.name != {s})",
		"pod.metadata.?labels[?'app'].orValue('') == {s}",
		"isQuantity(node.metadata.?annotations[?'q'].orValue('')) && quantity(node.metadata.annotations['q']).isGreaterThan(quantity('1'))",
		"quantity(node.metadata.?annotations[?'q'].orValue('0')).isLessThan(quantity('100Gi'))",
		"isIP(node.metadata.?annotations[?'ip'].orValue('')) && ip(node.metadata.annotations['ip']).family() == 4",
		"cidr('10.0.0.0/8').containsIP(node.metadata.?annotations[?'ip'].orValue('10.0.0.1'))",
		"semver(node.metadata.?annotations[?'version'].orValue('1.0.0')).major() >= {k}",
		"isSemver(node.metadata.?annotations[?'version'].orValue('')) && semver(node.metadata.annotations['version']).isGreaterThan(semver('1.2.3'))",
		"url(node.metadata.?annotations[?'url'].orValue('https://a')).getHost() != ''",
		"int(node.metadata.?annotations[?'q'].orValue('0')) < {n}",
		"node.metadata.labels[?{s}].or(optional.of('x')).value() != ''",
		"cel.bind(z, node.metadata.?annotations[?'big'].orValue(''), size(z) + size(z) >= 0)",
		"node == node",
		"pod.metadata.?labels[?'app'].orValue('') == node.metadata.labels[?'app'].orValue('-')",
		"pod.metadata.?labels[?'app'].orValue('') in ['a', {s}] || node.metadata.labels[?'zone'].orValue('') == {s}",
		"pod.spec.containers.exists(c, node.metadata.name.contains(c.name))",
	}
	numberFragments = []string{
		"nodeInfo.podCount",
		"{n}",
		"double({n}) / double(nodeInfo.podCount)",
		"node.metadata.name.endsWith({s}) ? 1.7e308 : -1.7e308",
		"{n} * {n}",
		"size(node.metadata.?annotations[?'big'].orValue(''))",
		"quantity(node.status.allocatable['cpu']).asApproximateFloat()",
		"node.status.images.map(i, i.sizeBytes).sum()",
		"nodeInfo.allocatable['memory'] - nodeInfo.requested['memory']",
		"lists.range({k}).size()",
		"node.metadata.?annotations[?'big'].orValue('').indexOf({s})",
		"pod.metadata.?labels[?'app'].orValue('') == node.metadata.labels[?'app'].orValue('') ? 10 : {n}",
	}
	stringFragments = []string{
		"'node ' + node.metadata.name",
		"{s}",
		"node.metadata.?annotations[?'big'].orValue('')",
		"'%s has %d pods'.format([node.metadata.name, nodeInfo.podCount])",
		"nodeInfo.pods.exists(p, p.namespace != pod.metadata.namespace) ? 'shared with ' + nodeInfo.pods[0].name : 'own node'",
		"strings.quote(node.metadata.?annotations[?'big2'].orValue(''))",
		"node.metadata.labels[?{s}].orValue('default')",
		"node.metadata.?annotations[?'big'].orValue('').upperAscii()",
		"node.metadata.?annotations[?'big'].orValue('').replace('', {s})",
		"pod.metadata.?labels[?'app'].orValue('none') + ' on ' + node.metadata.name",
	}
)

// choices draws the parts of a generated policy from fuzzed bytes (0 once
// they run out); fill puts the fuzzed string ({s}), integer ({n}) and
// small non-negative integer ({k}, below smallBound) into a fragment.
type choices struct {
	bytes []byte
	fill  func(string) string
}

func newChoices(b []byte, str string, n, smallBound int64) *choices {
	small := n % smallBound
	if small < 0 {
		small = -small
	}
	return &choices{bytes: b, fill: strings.NewReplacer("{s}", strconv.Quote(str), "{n}", strconv.FormatInt(n, 10), "{k}", strconv.FormatInt(small, 10)).Replace}
}

func (c *choices) next() int {
	if len(c.bytes) == 0 {
		return 0
	}
	v := int(c.bytes[0])
	c.bytes = c.bytes[1:]
	return v
}

// condition is one of bools, or two of them combined with && or ||.
func (c *choices) condition(bools []string) string {
	x := c.fill(bools[c.next()%len(bools)])
	switch c.next() % 4 {
	case 1:
		x += " && " + c.fill(bools[c.next()%len(bools)])
	case 2:
		x = "!(" + x + ") || " + c.fill(bools[c.next()%len(bools)])
	}
	return x
}

// fuzzPolicy builds a policy from choices: variables, filters with
// messageExpressions, and scores, each an expression drawn from the
// fragments above, combined with && and ||, and reading the variables.
func fuzzPolicy(choices []byte, str string, n int64) *schedv1alpha1.SchedulingPolicy {
	c := newChoices(choices, str, n, 1000)
	next, fill := c.next, c.fill
	strs, nums, bools := stringFragments, numberFragments, boolFragments
	b := builder.MakePolicy("fuzz")
	if next()%2 == 1 {
		b.Variable("text", fill(strs[next()%len(strs)]))
		strs = append(strs[:len(strs):len(strs)], "variables.text")
		bools = append(bools[:len(bools):len(bools)], "variables.text.startsWith({s})")
	}
	if next()%2 == 1 {
		b.Variable("count", fill(nums[next()%len(nums)]))
		nums = append(nums[:len(nums):len(nums)], "variables.count")
	}
	for i := range 1 + next()%3 {
		message := ""
		if next()%2 == 1 {
			message = fill(strs[next()%len(strs)])
		}
		b.FilterMsg(fmt.Sprintf("f%d", i), c.condition(bools), "", message)
	}
	normalizations := []schedv1alpha1.ScoreNormalization{schedv1alpha1.MinMax, schedv1alpha1.MinMaxReverse, schedv1alpha1.None}
	for i := range next() % 3 {
		b.Score(fmt.Sprintf("s%d", i), fill(nums[next()%len(nums)]), int32(1+next()%100), normalizations[next()%len(normalizations)])
	}
	return b.Obj()
}

// fuzzNode is a node with an annotation of bigKiB KiB and another as long
// ending differently, fuzzed text in labels and annotations, and the given
// number of images.
func fuzzNode(str string, bigKiB uint8, images uint16) *corev1.Node {
	node := realisticNode("n-" + strconv.Itoa(len(str)))
	size := int(bigKiB) * 1024
	node.Labels["zone"] = str
	node.Labels["app"] = str
	node.Annotations = map[string]string{
		"big":     strings.Repeat("a", size),
		"big2":    strings.Repeat("a", size/2) + "b",
		"csv":     strings.Repeat("a,", size/2),
		"q":       str,
		"ip":      str,
		"version": str,
		"url":     str,
	}
	node.Status.Images = nil
	for i := range int(images) % 1025 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/app-%d:v1", i)},
			SizeBytes: int64(i%7 + 1),
		})
	}
	node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("8")
	return node
}

// FuzzEvaluate compiles policies generated from fragments of expressions
// over pod, node and nodeInfo and every library (strings, lists, sets,
// regular expressions, quantities, IPs and CIDRs, semver, URLs, optionals),
// and evaluates those that compile against nodes with long strings, long
// lists and many pods: evaluation must never panic, every error must be an
// *EvalError, every score finite and normalized into 0..100, every
// rejection have a message of at most MaxMessageLength bytes, and every
// evaluation end soon after its cycle's deadline (fuzzDeadline).
// fuzzDeadline is the fuzzed evaluations' cycle deadline, and
// fuzzDeadlineSlack how much later than it they may end: one library call
// priced within the cost limit (at most about 0.15 s, see celcost/limits.go) and
// scheduling noise.
const (
	fuzzDeadline      = 100 * time.Millisecond
	fuzzDeadlineSlack = time.Second
)

func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0}, "a", int64(3), uint8(1), uint16(10), uint16(5))
	f.Add([]byte{1, 2, 1, 3, 7, 1, 8, 2, 0, 2, 1, 3, 2, 4, 1}, "b", int64(100), uint8(160), uint16(500), uint16(20))
	f.Add([]byte{0, 0, 2, 17, 2, 18, 1, 4, 2, 3, 5, 2}, "", int64(-1), uint8(255), uint16(1024), uint16(2000))
	f.Add([]byte{1, 5, 1, 1, 1, 8, 0, 1, 3, 2, 2, 3, 50, 0}, "10.0.0.1", int64(math.MaxInt64), uint8(16), uint16(3), uint16(0))
	f.Add([]byte{0, 1, 6, 2, 22, 3, 23, 1, 2, 2, 9, 1, 1, 10, 2}, "1.2.3", int64(1<<40), uint8(64), uint16(200), uint16(1500))
	f.Add([]byte{1, 8, 0, 0, 10, 0, 1, 6}, "[", int64(7), uint8(4), uint16(1), uint16(1))
	env := testEnv(f)
	compiler := NewCompiler(env)
	conv := NewConverter(env, 0)
	f.Fuzz(func(t *testing.T, choices []byte, str string, n int64, bigKiB uint8, images, pods uint16) {
		p := compiler.Compile(fuzzPolicy(choices, str, n), CompileOptions{})
		if p.Err() != nil {
			return
		}
		info := manyPods(int(pods) % 2049)
		info.Allocatable = map[string]int64{"cpu": 8000}
		info.Requested = map[string]int64{"cpu": n}
		pod, err := conv.Pod(makePod("ns", "p", map[string]string{"app": str}), makeNamespace("ns", nil))
		if err != nil {
			t.Fatal(err)
		}
		node, err := conv.Node(fuzzNode(str, bigKiB, images), func() *NodeInfo { return info })
		if err != nil {
			t.Fatal(err)
		}
		check := func(err error) {
			if _, ok := err.(*EvalError); err != nil && !ok {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), fuzzDeadline, ErrTimeBudgetExceeded)
		defer cancel()
		start := time.Now()
		d := p.Filter(ctx, pod, node)
		check(d.Err)
		if d.Verdict == Reject && d.Message == "" {
			t.Fatalf("rejection by %s without a message", d.Rule)
		}
		if msg := d.String(); len(msg) > MaxMessageLength {
			t.Fatalf("a message of %d bytes", len(msg))
		}
		scores := make([]float64, len(p.ScoreRules()))
		d = p.Score(ctx, pod, node, scores)
		check(d.Err)
		for i, s := range scores {
			if math.IsInf(s, 0) || (math.IsNaN(s) && d.Verdict == Pass && len(d.Ignored) == 0) {
				t.Fatalf("score %s is %v", p.scores[i].name, s)
			}
		}
		for _, normalization := range []schedv1alpha1.ScoreNormalization{schedv1alpha1.MinMax, schedv1alpha1.MinMaxReverse, schedv1alpha1.None} {
			for _, v := range NormalizeScores(append(scores, -1.7e308, 1.7e308, math.NaN()), normalization) {
				if v < 0 || v > MaxScore {
					t.Fatalf("normalized score %d", v)
				}
			}
		}
		if took := time.Since(start); took > fuzzDeadline+fuzzDeadlineSlack {
			t.Fatalf("evaluation ran %v past a deadline of %v", took, fuzzDeadline)
		}
	})
}
