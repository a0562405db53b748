package metrics

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/celsched/celsched/engine"
)

// Tally counts the Filter or Score decisions of one scheduling cycle for
// the policies that apply to the pod (a nil Tally counts nothing), and adds them to
// celsched_policy_evaluations_total once the cycle's evaluations are done
// (Flush): per (pod, node) it costs one atomic addition when every policy
// passes, and no Prometheus call. Decisions with errors are rare and are
// counted at once (Counters.Count).
type Tally struct {
	counters *Counters
	policies []tallied
	// timed: this cycle is sampled for CycleDuration (Timed).
	timed bool
	// durations observe each policy's CEL time of a timed cycle, once.
	durations []prometheus.Observer
	observed  atomic.Bool
}

// CycleDuration is the CEL evaluation time of each policy in a scheduling
// cycle, at Filter or Score, over the nodes it was evaluated on (a
// remembered outcome costs no evaluation); one cycle in TimingSample per
// extension point is timed, so that the others read no clock.
var CycleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "celsched_policy_cycle_duration_seconds",
	Help: "CEL evaluation time of a SchedulingPolicy's filters or scores in one scheduling cycle, summed over the nodes " +
		"evaluated (remembered results cost none), by policy and point (filter, score); sampled: one cycle in 16 per point.",
	Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10), // 1 us to 0.26 s
}, []string{"policy", "point"})

// TimingSample is how many cycles per extension point make one timed
// cycle (CycleDuration).
const TimingSample = 16

type tallied struct {
	// rules are the counters of the policy's filters or scores.
	rules []ruleCounters
	// passFrom[i] - passTo[i], summed over the policies up to i, is how
	// many nodes policy i passed: a run of policies that pass on a node is
	// one addition to passFrom at its first, and one to passTo after its
	// last unless that is the end of the list.
	passFrom, passTo atomic.Int64
	// denied[r] counts the nodes where rule r was false.
	denied []atomic.Int64
	// nanos is the policy's CEL time in a timed cycle.
	nanos atomic.Int64
}

// Timed says whether the cycle's evaluations are to be timed (Time): one
// cycle in TimingSample.
func (t *Tally) Timed() bool { return t != nil && t.timed }

// Time adds the CEL time of an evaluation of policy i, in a timed cycle.
func (t *Tally) Time(i int, d time.Duration) {
	if t != nil {
		t.policies[i].nanos.Add(int64(d))
	}
}

// Tally returns a tally of the decisions at point (PointFilter or
// PointScore) of the given policies, in the order the plugin evaluates
// them.
func (c *Counters) Tally(point engine.Point, policies []*engine.CompiledPolicy) *Tally {
	t := &Tally{counters: c, policies: make([]tallied, len(policies))}
	if c.cycles[int(point)%len(c.cycles)].Add(1)%TimingSample == 0 {
		t.timed = true
		t.durations = make([]prometheus.Observer, len(policies))
		label := "filter"
		if point == engine.PointScore {
			label = "score"
		}
		for i, p := range policies {
			t.durations[i] = CycleDuration.WithLabelValues(p.Name, label)
		}
	}
	rules := 0
	for i, p := range policies {
		pc := c.of(p)
		if point == engine.PointScore {
			t.policies[i].rules = pc.scores
		} else {
			t.policies[i].rules = pc.filters
			rules += len(pc.filters)
		}
	}
	if rules > 0 { // one array for every policy's denied counts
		denied := make([]atomic.Int64, rules)
		for i := range t.policies {
			n := len(t.policies[i].rules)
			t.policies[i].denied, denied = denied[:n:n], denied[n:]
		}
	}
	return t
}

// Plain says whether a decision is a pass with no error ignored: the ones
// Passed counts.
func Plain(d *engine.Decision) bool { return d.Verdict == engine.Pass && len(d.Ignored) == 0 }

// Passed counts one node on which the policies from..to-1 all passed
// plainly (Plain).
func (t *Tally) Passed(from, to int) { t.PassedN(from, to, 1) }

// PassedN counts n nodes on which the policies from..to-1 all passed
// plainly.
func (t *Tally) PassedN(from, to int, n int64) {
	if t == nil || from >= to {
		return
	}
	t.policies[from].passFrom.Add(n)
	if to < len(t.policies) {
		t.policies[to].passTo.Add(n)
	}
}

// Add counts a decision of policy i that is not Plain.
func (t *Tally) Add(i int, d *engine.Decision) { t.AddN(i, d, 1) }

// AddN counts n nodes with the same decision of policy i, not Plain.
func (t *Tally) AddN(i int, d *engine.Decision, n int64) {
	if t == nil {
		return
	}
	p := &t.policies[i]
	if d.Verdict == engine.Reject && len(d.Ignored) == 0 && p.denied != nil {
		if r := slices.IndexFunc(p.rules, func(r ruleCounters) bool { return r.name == d.Rule }); r >= 0 {
			p.denied[r].Add(n)
			return
		}
	}
	for range n {
		t.counters.Count(d)
	}
}

// Flush adds the counts so far to celsched_policy_evaluations_total and
// starts over. Call it when the cycle's evaluations are done: a run of
// passes counted half before and half after a Flush would be counted
// wrong in both.
func (t *Tally) Flush() {
	if t == nil {
		return
	}
	if t.timed && t.observed.CompareAndSwap(false, true) {
		for i := range t.policies {
			t.durations[i].Observe(time.Duration(t.policies[i].nanos.Load()).Seconds())
		}
	}
	var passing int64
	for i := range t.policies {
		p := &t.policies[i]
		passing += p.passFrom.Swap(0) - p.passTo.Swap(0)
		rules := p.rules
		for r := range rules {
			if passing > 0 {
				rules[r].allow.Add(float64(passing))
			}
		}
		for r := range p.denied {
			n := p.denied[r].Swap(0)
			if n == 0 {
				continue
			}
			// The rules before the false one passed.
			for before := range r {
				rules[before].allow.Add(float64(n))
			}
			if rules[r].deny != nil {
				rules[r].deny.Add(float64(n))
			}
		}
	}
}
