// Package score is the kube-scheduler Score plugin of celsched: it ranks
// nodes by the score rules of the SchedulingPolicies that match a pod.
package score

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/metrics"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "CELScore"

const stateKey fwk.StateKey = "celsched.io/score"

// Score ranks nodes: each score rule's raw values are normalized across
// the nodes to 0..100 (MinMax, MinMaxReverse or None), and a node's score
// is the weighted mean of the normalized rule scores of all matching
// enforced policies. The profile's plugin weight then weighs it against
// the built-in score plugins.
type Score struct {
	rt *celplugins.Runtime
	// state is the state PreScore last wrote, for Score to find without
	// reading the CycleState per node.
	state celplugins.LastState[*scoreState]

	// rawBuffers are the raw value tables (*[]float64) of the plugin's
	// finished cycles, for the next ones: a table is nodes x rules floats
	// (tens of KiB on a large cluster), allocated per cycle otherwise.
	// PreScore takes one (rawTable), NormalizeScore returns its cycle's
	// (release); the garbage collector empties the pool.
	rawBuffers sync.Pool
	// normalizeBuffers are NormalizeScore's buffers (*normalizeBuffer) of
	// the plugin's finished cycles, for the next ones: each is a slice
	// over the scored nodes, allocated per cycle otherwise. Taken and
	// returned by NormalizeScore.
	normalizeBuffers sync.Pool

	// tables numbers the cycles' tables of raw values (scoreState.id).
	tables atomic.Uint32
	// mu guards kept, and a NormalizeScore's reading of the tables it
	// combines (which keep may let go of).
	mu sync.Mutex
	// kept are the tables of finished cycles that kube-scheduler's
	// opportunistic batching may still hand back to NormalizeScore (see
	// keep). Bound: the table of the last cycle that scored every
	// candidate, and the one-row tables of the rescoring cycles after it;
	// at most maxKept. Written by NormalizeScore.
	kept []*scoreState
}

// maxKept bounds the tables kept for batching: the rescoring cycles of one
// batch (kube-scheduler ends a batch after 500 ms) fit many times over.
const maxKept = 256

var (
	_ fwk.PreScorePlugin = &Score{}
	_ fwk.ScorePlugin    = &Score{}
	_ fwk.SignPlugin     = &Score{}
)

// New builds the plugin; use celplugins.Factory(rt, New) to register it.
func New(_ context.Context, _ runtime.Object, h fwk.Handle, rt *celplugins.Runtime) (*Score, error) {
	if err := rt.Attach(h); err != nil {
		return nil, err
	}
	return &Score{rt: rt}, nil
}

// Name implements fwk.Plugin.
func (pl *Score) Name() string { return Name }

// SignPod implements fwk.SignPlugin (see celplugins.Inputs.SignPod).
func (pl *Score) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return pl.rt.Inputs.SignPod(ctx, pod)
}

// scoreState holds the raw values of one cycle. Each Score call takes a
// row of its own (next), writes its node's raw values there and returns
// the table's id and the row's number as the node's raw score (rowRef),
// which kube-scheduler hands to NormalizeScore unchanged; NormalizeScore
// turns the rows into the normalized scores. So no per-node map is built
// or read.
//
// kube-scheduler 1.37's opportunistic batching hands NormalizeScore raw
// scores of an earlier cycle too: for the next pod of the same signature
// it rescores only the node the last pod took (PreScore with every
// candidate, Score on that node) and normalizes the earlier raw scores of
// the other candidates with it. A raw score therefore names its table, and
// the plugin keeps the tables batching can still refer to (Score.kept).
type scoreState struct {
	// id is the table's number in rowRef.
	id    uint32
	cycle *celplugins.Cycle
	tally *metrics.Tally
	rules []engine.WeightedRule
	// raw holds a row of len(rules) raw values per node given to
	// PreScore (raw[row*len(rules)+rule]), NaN where the rule failed and
	// was ignored (it takes no part in the rule's normalization, and
	// scores 0 there): one allocation, without pointers.
	raw  []float64
	rows int64
	next atomic.Int64
}

// rawTable returns a zeroed table of n values.
func (pl *Score) rawTable(n int) []float64 {
	if b, ok := pl.rawBuffers.Get().(*[]float64); ok && cap(*b) >= n {
		t := (*b)[:n]
		clear(t)
		return t
	}
	return make([]float64, n)
}

// release returns the state's raw values to rawBuffers; the state reads no
// raw value after.
func (pl *Score) release(s *scoreState) {
	raw := s.raw
	s.raw, s.rows = nil, 0
	if cap(raw) > 0 {
		pl.rawBuffers.Put(&raw)
	}
}

// keptTable returns the kept table id if its rules are those of s (the
// same compiled policies, so the same rules in the same order), or nil.
// The caller holds mu.
func (pl *Score) keptTable(id uint32, s *scoreState) *scoreState {
	for _, t := range pl.kept {
		if t.id == id {
			if !slices.Equal(t.cycle.Scores, s.cycle.Scores) {
				return nil
			}
			return t
		}
	}
	return nil
}

// keep keeps a finished cycle's table for batching, which may hand its
// raw scores to a later NormalizeScore. A cycle that read no earlier
// table (earlier false) scored its candidates afresh: batching can refer
// to no table before it any more, and those go back to rawBuffers. A
// rescoring cycle's table keeps only its used rows (one). The caller
// holds mu.
func (pl *Score) keep(s *scoreState, earlier bool) {
	if !earlier {
		for _, t := range pl.kept {
			pl.release(t)
		}
		pl.kept = pl.kept[:0]
	}
	if used := int(s.next.Load()) * len(s.rules); used < len(s.raw)/2 {
		raw := slices.Clone(s.raw[:used])
		pl.release(s)
		s.raw = raw
	}
	if len(pl.kept) == maxKept {
		pl.release(pl.kept[0])
		pl.kept = slices.Delete(pl.kept, 0, 1)
	}
	pl.kept = append(pl.kept, s)
}

// row returns the raw values of a row.
func (s *scoreState) row(i int64) []float64 {
	n := int64(len(s.rules))
	return s.raw[i*n : (i+1)*n : (i+1)*n]
}

// Clone implements fwk.StateData. The state is only read after Score.
func (s *scoreState) Clone() fwk.StateData { return s }

// PreScore reads the policies matched in PreFilter (or matches them, when
// the filter plugin is not enabled) and prepares the table of raw values.
// Pods that no policy with scores matches skip Score.
func (pl *Score) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	c := celplugins.ReadCycle(state)
	if c == nil {
		var err error
		if c, err = pl.rt.Prepare(ctx, pod, celplugins.DefaultEvaluationBudget); err != nil {
			return fwk.AsStatus(err)
		}
		c.Attach(celplugins.ReadRecord(state))
	}
	if len(c.Scores) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	s := &scoreState{id: pl.tables.Add(1) & maxTableID, cycle: c, tally: pl.rt.Report.Tally(engine.PointScore, c.Scores)}
	for _, p := range c.Scores {
		for _, r := range p.ScoreRules() {
			s.rules = append(s.rules, engine.WeightedRule{Weight: r.Weight, Normalization: r.Normalization, Audit: !p.Enforced()})
		}
	}
	s.raw, s.rows = pl.rawTable(len(nodes)*len(s.rules)), int64(len(nodes))
	state.Write(stateKey, s)
	pl.state.Remember(state, s)
	return nil
}

// Score evaluates the score rules on one node and keeps their raw values;
// the node's score is computed in NormalizeScore, which sees all nodes.
// A rule that fails under failurePolicy Ignore (or in an Audit policy)
// scores 0 on the node and takes no part in that rule's normalization;
// under Fail an enforced policy's error fails the cycle.
func (pl *Score) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := pl.stateOf(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	row := s.next.Add(1) - 1
	if row >= s.rows {
		return 0, fwk.AsStatus(fmt.Errorf("node %s: more nodes scored than PreScore was given (%d)", node.Name, s.rows))
	}
	in, err := pl.rt.Inputs.Converter.NodeInput(node, nodeInfo.GetGeneration(), nodeInfo, celplugins.NodeInfoFrom)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	raw := s.row(row)
	// decisions are the policies' decisions on the node, for a cycle that
	// records them (a dry run's); nil in the scheduler.
	var decisions []engine.Decision
	if s.cycle.Record != nil {
		decisions = make([]engine.Decision, len(s.cycle.Scores))
		defer func() { s.cycle.RecordScores(node.Name, decisions, raw) }()
	} else if o := s.cycle.ScoreList.Cached(s.cycle.Pod, &in); o != nil {
		// Another pod that the same policies apply to, and that reads the
		// same of the pod, was scored on this node version (and NodeInfo
		// generation): its raw values are this pod's.
		copy(raw, o.Raw)
		s.tally.Passed(0, len(s.cycle.Scores))
		return rowRef(s.id, row), nil
	}
	// clean: every decision passed plainly, so the raw values are the
	// same for every pod that reads the same (when the list is memoized)
	// and are kept with the node.
	clean := true
	offset := 0
	// passing is the first of the policies that scored plainly on the
	// node since the last that did not: they are counted as a run.
	passing := 0
	timed := s.tally.Timed()
	var start time.Time
	for i, p := range s.cycle.Scores {
		values := raw[offset : offset+p.NumScoreRules()]
		offset += len(values)
		if timed {
			start = time.Now()
		}
		d := p.Score(s.cycle.Ctx, s.cycle.Pod, &in, values)
		if timed {
			s.tally.Time(i, time.Since(start))
		}
		if decisions != nil {
			decisions[i] = d
		}
		if metrics.Plain(&d) {
			continue
		}
		s.tally.Passed(passing, i)
		s.tally.Add(i, &d)
		passing = i + 1
		clean = false
		pl.rt.Report.NoteErrors(ctx, s.cycle.Budget, &d, pod, node.Name)
		if d.Acts() {
			return 0, celplugins.Status(&d, d.String())
		}
		if d.Verdict == engine.Error || len(d.Ignored) > 0 {
			// An Audit policy's error, or errors under Ignore: the rules
			// without a value take no part.
			if v := klog.FromContext(ctx).V(4); v.Enabled() {
				v.Info("Score rules failed and score 0 on the node", "pod", klog.KObj(pod), "node", klog.KObj(node), "policy", p.Name, "decision", d.String(), "ignored", d.Ignored)
			}
			if d.Verdict == engine.Error {
				for i := range values {
					values[i] = math.NaN()
				}
			}
		}
	}
	s.tally.Passed(passing, len(s.cycle.Scores))
	if clean {
		s.cycle.ScoreList.Remember(s.cycle.Pod, &in, engine.ListOutcome{Raw: raw})
	}
	return rowRef(s.id, row), nil
}

// maxTableID is the largest table id: a rowRef is never negative.
const maxTableID = 1<<31 - 1

// rowRef is a node's raw score as Score returns it: the table's id and
// the row of the node's raw values in it.
func rowRef(table uint32, row int64) int64 { return int64(table)<<32 | row }

// splitRowRef is rowRef's table and row.
func splitRowRef(v int64) (table uint32, row int64) { return uint32(v >> 32), v & (1<<32 - 1) }

// ScoreExtensions implements fwk.ScorePlugin.
func (pl *Score) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore normalizes each rule across the nodes and combines the
// enforced rules by weight. Audit rules are combined too, and the node they
// would have preferred is logged, but they change no score.
func (pl *Score) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	s, err := pl.stateOf(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	s.tally.Flush()
	b, _ := pl.normalizeBuffers.Get().(*normalizeBuffer)
	if b == nil {
		b = &normalizeBuffer{}
	}
	defer pl.normalizeBuffers.Put(b)
	rows, seen := sized(&b.rows, len(scores)), sized(&b.seen, int(s.next.Load()))
	earlier := false
	// found is the earlier table last looked up: a batch's raw scores are
	// mostly of one table, looked up once.
	var found *scoreState
	pl.mu.Lock()
	for i, ns := range scores {
		// The row Score wrote the node's raw values in: this cycle's, or,
		// when batching rescored one node, an earlier cycle's.
		id, row := splitRowRef(ns.Score)
		t := s
		if id != s.id {
			if found == nil || found.id != id {
				found = pl.keptTable(id, s)
			}
			t = found
			earlier = true
		}
		switch {
		case t == nil:
			pl.mu.Unlock()
			return fwk.AsStatus(fmt.Errorf("node %s: its raw score (table %d) is not of this cycle or of a cycle kept for batching", ns.Name, id))
		case t == s && (row >= int64(len(seen)) || seen[row]):
			pl.mu.Unlock()
			return fwk.AsStatus(fmt.Errorf("node %s was not scored (row %d of %d)", ns.Name, row, len(seen)))
		case row >= t.next.Load():
			pl.mu.Unlock()
			return fwk.AsStatus(fmt.Errorf("node %s was not scored (row %d of table %d)", ns.Name, row, id))
		}
		if t == s {
			seen[row] = true
		}
		rows[i] = t.row(row)
	}
	// The rows are combined before the cycle's table is kept, and under
	// mu: keep lets go of this table's unused part and of the tables kept
	// before it, which the next cycles' PreScore takes for theirs, and
	// another cycle's NormalizeScore may let go of the tables kept so far,
	// this one's among them. (Cycles of one scheduler do not overlap, but
	// the dry run's evaluations of several classes at once do.)
	enforced := engine.CombineRows(sized(&b.enforced, len(rows)), rows, s.rules, false, &b.combine)
	audit := engine.CombineRows(sized(&b.audit, len(rows)), rows, s.rules, true, &b.combine)
	pl.keep(s, earlier)
	pl.mu.Unlock()
	for i := range scores {
		scores[i].Score = 0
		if enforced != nil {
			scores[i].Score = enforced[i]
		}
	}
	if audit != nil {
		if logger := klog.FromContext(ctx).V(2); logger.Enabled() {
			best := 0
			for i, v := range audit {
				if v > audit[best] {
					best = i
				}
			}
			logger.Info("Audit score rules would prefer a node", "pod", klog.KObj(pod), "node", scores[best].Name, "score", audit[best])
		}
	}
	return nil
}

// normalizeBuffer is what NormalizeScore needs per node.
type normalizeBuffer struct {
	rows            [][]float64
	seen            []bool
	combine         engine.CombineBuffers
	enforced, audit []int64
}

// sized returns *buf with n zero values, reusing its array when it is
// large enough (and keeping a new one in *buf).
func sized[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
		return *buf
	}
	*buf = (*buf)[:n]
	clear(*buf)
	return *buf
}

// stateOf returns the cycle's score state: the one PreScore last wrote,
// when state is its CycleState, or else read from state.
func (pl *Score) stateOf(state fwk.CycleState) (*scoreState, error) {
	if s, ok := pl.state.Get(state); ok {
		return s, nil
	}
	return celplugins.ReadState[*scoreState](state, stateKey)
}
