package score

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

func TestCombine(t *testing.T) {
	// Policy 0 has two rules (spot: None, weight 3; pods: MinMaxReverse,
	// weight 1); policy 1 (Audit) one rule. Both rules of policy 0 failed on
	// node 2 (failurePolicy Ignore): NaN.
	nan := math.NaN()
	s := &scoreState{
		cycle: &celplugins.Cycle{Scores: make([]*engine.CompiledPolicy, 2)},
		rules: []rule{
			{weight: 3, normalization: schedv1alpha1.None},
			{weight: 1, normalization: schedv1alpha1.MinMaxReverse},
			{weight: 1, normalization: schedv1alpha1.MinMax, audit: true},
		},
		raw: [][]float64{{100, 4, 1}, {0, 2, 9}, {nan, nan, 5}},
	}
	rows := []int{0, 1, 2}
	// Node 0: (100*3 + 0*1)/4 = 75; node 1: (0*3 + 100*1)/4 = 25;
	// node 2: failed, 0.
	if diff := cmp.Diff([]int64{75, 25, 0}, s.combine(rows, false)); diff != "" {
		t.Errorf("enforced (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0, 100, 50}, s.combine(rows, true)); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	s.rules = s.rules[2:]
	if got := s.combine(rows, false); got != nil {
		t.Errorf("no enforced rules: %v, want nil", got)
	}
}
