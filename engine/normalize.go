package engine

import (
	"math"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// MaxScore is the highest normalized score, as kube-scheduler's
// framework.MaxNodeScore.
const MaxScore = 100

// NormalizeScores maps one score rule's raw values across the candidate
// nodes to 0..MaxScore:
//   - MinMax: the lowest value maps to 0 and the highest to MaxScore,
//     linearly; when all values are equal, every node gets MaxScore.
//   - MinMaxReverse: the lowest maps to MaxScore and the highest to 0; when
//     all are equal, every node gets MaxScore.
//   - None: the raw value, rounded and clamped to 0..MaxScore.
//
// Raw values are finite (the engine rejects NaN and infinities).
func NormalizeScores(raw []float64, normalization schedv1alpha1.ScoreNormalization) []int64 {
	out := make([]int64, len(raw))
	if len(raw) == 0 {
		return out
	}
	if normalization == schedv1alpha1.None {
		for i, v := range raw {
			out[i] = clampScore(math.Round(v))
		}
		return out
	}
	lo, hi := raw[0], raw[0]
	for _, v := range raw[1:] {
		lo = math.Min(lo, v)
		hi = math.Max(hi, v)
	}
	for i, v := range raw {
		if hi == lo {
			out[i] = MaxScore
			continue
		}
		frac := (v - lo) / (hi - lo)
		if normalization == schedv1alpha1.MinMaxReverse {
			frac = 1 - frac
		}
		out[i] = clampScore(math.Round(frac * MaxScore))
	}
	return out
}

// CombineScores returns each node's weighted mean of the normalized rule
// scores: normalized[r][n] is rule r's score of node n, weights[r] its
// weight. The result is in 0..MaxScore. With no rules, every node scores 0.
func CombineScores(normalized [][]int64, weights []int32) []int64 {
	if len(normalized) == 0 {
		return nil
	}
	nodes := len(normalized[0])
	out := make([]int64, nodes)
	var total int64
	for _, w := range weights {
		total += int64(w)
	}
	if total == 0 {
		return out
	}
	for n := range nodes {
		var sum int64
		for r, scores := range normalized {
			sum += scores[n] * int64(weights[r])
		}
		// Round half up; sum and total are non-negative.
		out[n] = (sum + total/2) / total
	}
	return out
}

func clampScore(v float64) int64 {
	switch {
	case v < 0:
		return 0
	case v > MaxScore:
		return MaxScore
	default:
		return int64(v)
	}
}
