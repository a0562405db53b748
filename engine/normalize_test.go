package engine

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

func TestNormalizeScores(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		raw  []float64
		n    schedv1alpha1.ScoreNormalization
		want []int64
	}{
		"minmax":             {raw: []float64{10, 20, 30}, n: schedv1alpha1.MinMax, want: []int64{0, 50, 100}},
		"minmax reverse":     {raw: []float64{10, 20, 30}, n: schedv1alpha1.MinMaxReverse, want: []int64{100, 50, 0}},
		"minmax negative":    {raw: []float64{-5, 5}, n: schedv1alpha1.MinMax, want: []int64{0, 100}},
		"minmax rounds":      {raw: []float64{0, 1, 3}, n: schedv1alpha1.MinMax, want: []int64{0, 33, 100}},
		"minmax all equal":   {raw: []float64{7, 7}, n: schedv1alpha1.MinMax, want: []int64{100, 100}},
		"reverse all equal":  {raw: []float64{7, 7}, n: schedv1alpha1.MinMaxReverse, want: []int64{100, 100}},
		"none clamps":        {raw: []float64{-3, 42.4, 42.6, 250}, n: schedv1alpha1.None, want: []int64{0, 42, 43, 100}},
		"single node":        {raw: []float64{3}, n: schedv1alpha1.MinMax, want: []int64{100}},
		"no nodes":           {raw: nil, n: schedv1alpha1.MinMax, want: []int64{}},
		"empty means minmax": {raw: []float64{1, 2}, n: "", want: []int64{0, 100}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, NormalizeScores(tc.raw, tc.n)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCombineScores(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		normalized [][]int64
		weights    []int32
		want       []int64
	}{
		"weighted mean":      {normalized: [][]int64{{100, 0}, {0, 100}}, weights: []int32{3, 1}, want: []int64{75, 25}},
		"rounds half up":     {normalized: [][]int64{{100, 0}, {0, 0}, {0, 0}}, weights: []int32{1, 1, 1}, want: []int64{33, 0}},
		"one rule":           {normalized: [][]int64{{10, 90}}, weights: []int32{5}, want: []int64{10, 90}},
		"no rules":           {normalized: nil, weights: nil, want: nil},
		"max stays in range": {normalized: [][]int64{{100}, {100}}, weights: []int32{100, 100}, want: []int64{100}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, CombineScores(tc.normalized, tc.weights)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCombineRows: each rule is normalized across the candidates (a NaN
// candidate takes no part and scores 0 for it) and the rules of one kind
// (enforced or Audit) are combined by weight; buffers that held another
// call's values do not show, and no rule of the kind gives nil.
func TestCombineRows(t *testing.T) {
	t.Parallel()
	// Rules 0 (None, weight 3) and 1 (MinMaxReverse, weight 1) are
	// enforced, rule 2 (MinMax) Audit; rules 0 and 1 failed on candidate 2.
	nan := math.NaN()
	rows := [][]float64{{100, 4, 1}, {0, 2, 9}, {nan, nan, 5}}
	rules := []WeightedRule{
		{Weight: 3, Normalization: schedv1alpha1.None},
		{Weight: 1, Normalization: schedv1alpha1.MinMaxReverse},
		{Weight: 1, Normalization: schedv1alpha1.MinMax, Audit: true},
	}
	b := &CombineBuffers{raw: []float64{7, 7, 7, 7}, normalized: []int64{9, 9, 9, 9}}
	for range 2 {
		// Candidate 0: (100*3 + 0*1)/4 = 75; 1: (0*3 + 100*1)/4 = 25;
		// 2: failed, 0.
		if diff := cmp.Diff([]int64{75, 25, 0}, CombineRows([]int64{5, 5, 5}, rows, rules, false, b)); diff != "" {
			t.Errorf("enforced (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{0, 100, 50}, CombineRows(make([]int64, 3), rows, rules, true, b)); diff != "" {
			t.Errorf("audit (-want +got):\n%s", diff)
		}
	}
	if got := CombineRows(make([]int64, 3), rows, rules[2:], false, b); got != nil {
		t.Errorf("no enforced rules: %v, want nil", got)
	}
}
