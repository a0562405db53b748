package engine

import (
	"math"
	"slices"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// MaxScore is the highest normalized score, as kube-scheduler's
// framework.MaxNodeScore.
const MaxScore = 100

// NormalizeScores maps one score rule's raw values across the candidate
// nodes to 0..MaxScore. It is the one place that normalizes: the score
// plugin and the dry-run both call it.
//   - MinMax: the lowest value maps to 0 and the highest to MaxScore,
//     linearly; when all values are equal, every node gets MaxScore.
//   - MinMaxReverse: the lowest maps to MaxScore and the highest to 0; when
//     all are equal, every node gets MaxScore.
//   - None: the raw value, rounded and clamped to 0..MaxScore.
//
// A NaN raw value is a node where the rule failed and was ignored
// (failurePolicy Ignore): it takes no part in the normalization and scores
// 0. Infinite values and ranges wider than float64 (1.7e308 and -1.7e308)
// still give scores in 0..MaxScore.
func NormalizeScores(raw []float64, normalization schedv1alpha1.ScoreNormalization) []int64 {
	out := make([]int64, len(raw))
	NormalizeScoresInto(out, raw, normalization)
	return out
}

// NormalizeScoresInto is NormalizeScores writing into out (as long as raw),
// for callers that reuse one buffer across rules.
func NormalizeScoresInto(out []int64, raw []float64, normalization schedv1alpha1.ScoreNormalization) {
	clear(out)
	if normalization == schedv1alpha1.None {
		for i, v := range raw {
			if !math.IsNaN(v) {
				out[i] = roundScore(v)
			}
		}
		return
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range raw {
		if !math.IsNaN(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	for i, v := range raw {
		if math.IsNaN(v) {
			continue
		}
		if hi == lo {
			out[i] = MaxScore
			continue
		}
		frac := fraction(v, lo, hi)
		if normalization == schedv1alpha1.MinMaxReverse {
			frac = 1 - frac
		}
		out[i] = clampScore(math.Round(frac * MaxScore))
	}
}

// fraction is where v lies between lo and hi (lo < hi), in 0..1. Halving
// all three keeps hi-lo finite for any finite values; infinite ones sit at
// the ends.
func fraction(v, lo, hi float64) float64 {
	if math.IsInf(lo, -1) || math.IsInf(hi, 1) {
		switch v {
		case hi:
			return 1
		case lo:
			return 0
		default:
			return 0.5
		}
	}
	f := (v/2 - lo/2) / (hi/2 - lo/2)
	if math.IsNaN(f) {
		return 0
	}
	return math.Max(0, math.Min(1, f))
}

// CombineScores returns each node's weighted mean of the normalized rule
// scores: normalized[r][n] is rule r's score of node n, weights[r] its
// weight. The result is in 0..MaxScore. With no rules, every node scores 0.
func CombineScores(normalized [][]int64, weights []int32) []int64 {
	if len(normalized) == 0 {
		return nil
	}
	c := NewScoreCombiner(len(normalized[0]))
	for r, scores := range normalized {
		c.Add(scores, weights[r])
	}
	return c.Mean()
}

// WeightedRule is how a matching rule's raw values become its part of a
// candidate's score: its normalization and weight, and whether only its
// report counts (a rule of an Audit policy).
type WeightedRule struct {
	Weight        int32
	Normalization schedv1alpha1.ScoreNormalization
	Audit         bool
}

// CombineBuffers are the buffers of one rule's values that CombineRows
// reuses across rules and calls; the zero value is ready to use. Not for
// concurrent use.
type CombineBuffers struct {
	raw        []float64
	normalized []int64
}

// CombineRows writes into out (one per candidate, len(rows)) and returns
// each candidate's weighted mean, in 0..MaxScore, of the normalized scores
// of the rules whose Audit is audit, or returns nil when there is none.
// rows[c][r] is rule r's raw value on candidate c (NaN where the rule
// failed and was ignored: the candidate takes no part in the rule's
// normalization and scores 0 for it), rules[r] the rule. Each rule is
// normalized across all the candidates with NormalizeScoresInto. The score
// plugin combines the nodes of a pod's cycle with it, and the placement
// plugin the placements of a pod group's cycle.
func CombineRows(out []int64, rows [][]float64, rules []WeightedRule, audit bool, b *CombineBuffers) []int64 {
	var (
		combiner   ScoreCombiner
		found      bool
		raw        []float64
		normalized []int64
	)
	for r, rl := range rules {
		if rl.Audit != audit {
			continue
		}
		if !found {
			found = true
			combiner = ScoreCombinerInto(out)
			b.raw = slices.Grow(b.raw[:0], len(rows))[:len(rows)]
			b.normalized = slices.Grow(b.normalized[:0], len(rows))[:len(rows)]
			raw, normalized = b.raw, b.normalized
		}
		for c, row := range rows {
			raw[c] = row[r]
		}
		NormalizeScoresInto(normalized, raw, rl.Normalization)
		combiner.Add(normalized, rl.Weight)
	}
	if !found {
		return nil
	}
	return combiner.Mean()
}

// ScoreCombiner computes CombineScores one rule at a time, so that the
// normalized scores of a rule need not outlive it.
type ScoreCombiner struct {
	sums  []int64
	total int64
}

// NewScoreCombiner returns a combiner for nodes nodes.
func NewScoreCombiner(nodes int) *ScoreCombiner {
	c := ScoreCombinerInto(make([]int64, nodes))
	return &c
}

// ScoreCombinerInto returns a combiner that sums into sums, one per node,
// zeroed first: Mean returns sums.
func ScoreCombinerInto(sums []int64) ScoreCombiner {
	clear(sums)
	return ScoreCombiner{sums: sums}
}

// Add adds a rule's normalized scores, one per node, with its weight.
func (c *ScoreCombiner) Add(normalized []int64, weight int32) {
	for n, v := range normalized {
		c.sums[n] += v * int64(weight)
	}
	c.total += int64(weight)
}

// Mean returns each node's weighted mean of the rules added, in
// 0..MaxScore (0 when their weights sum to 0).
func (c *ScoreCombiner) Mean() []int64 {
	out := c.sums
	for n, sum := range out {
		if c.total == 0 {
			out[n] = 0
			continue
		}
		// Round half up; sum and total are non-negative.
		out[n] = (sum + c.total/2) / c.total
	}
	return out
}

// roundScore is a raw value as a score without normalization: rounded and
// clamped to 0..MaxScore (normalization None).
func roundScore(v float64) int64 { return clampScore(math.Round(v)) }

func clampScore(v float64) int64 {
	switch {
	case math.IsNaN(v), v < 0:
		return 0
	case v > MaxScore:
		return MaxScore
	default:
		return int64(v)
	}
}
