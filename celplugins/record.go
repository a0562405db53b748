package celplugins

import (
	"context"
	"slices"
	"sync"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
)

// RecordKey is the CycleState key of a cycle's Record. A dry run writes a
// Record there before PreFilter; the scheduler never does, and its cycles
// record nothing.
const RecordKey fwk.StateKey = "celsched.io/record"

// Record is what the CEL plugins decided in one cycle, node by node: every
// filter policy's decision on each node CELFilter saw (not only up to the
// first that refuses), with each rule's verdict and the false rules'
// sub-expressions when asked, and every score policy's raw values on each
// node CELScore scored. It is how the dry runs learn why a node was
// refused, and by which policy, rule, params object and enforcement: from
// the run that decided, not from a second evaluation. The plugins write
// it (CELFilter's Filter, CELScore's Score), concurrently for different
// nodes; readers read it once the cycle is over.
type Record struct {
	// Rules asks for every filter rule's verdict on each node
	// (FilterOutcome.Rules), not only the deciding rule's.
	Rules bool
	// Why, when set, explains the false or failed filter rules
	// (FilterOutcome.Why; Rules is then implied).
	Why *engine.Why

	mu sync.Mutex
	// rejection is the cycle's Match rejection (Match.Rejection).
	rejection *engine.Decision
	// matched says PreFilter ran and saw the policies.
	matched bool
	filters map[string][]FilterOutcome
	scores  map[string][]ScoreOutcome
}

// Clone implements fwk.StateData: a cycle's clones (nominated pods,
// preemption) record into the same Record.
func (r *Record) Clone() fwk.StateData { return r }

// ReadRecord returns the Record a dry run wrote in a CycleState, or nil.
func ReadRecord(state fwk.CycleState) *Record {
	data, err := state.Read(RecordKey)
	if err != nil {
		return nil
	}
	r, _ := data.(*Record)
	return r
}

// FilterOutcome is one filter policy's decision on a node. The policy,
// its params object and its enforcement for the pod (and where that
// enforcement comes from) are Decision.Policy's; the rule and message
// are the decision's.
type FilterOutcome struct {
	Decision engine.Decision
	// Rules are every filter rule's verdict (Record.Rules); nil when not
	// asked or when the policy does not compile.
	Rules []engine.RuleVerdict
	// Why are, per rule that is false or failed, its sub-expressions'
	// values (Record.Why).
	Why map[string][]engine.Step
}

// Refuses says whether the scheduler refuses the node for this decision.
func (o *FilterOutcome) Refuses() bool { return o.Decision.Acts() }

// ScoreOutcome is one score policy's raw values on a node.
type ScoreOutcome struct {
	Decision engine.Decision
	// Raw are the policy's score rules' raw values (NaN: the rule failed).
	Raw []float64
}

// Rejection is the decision that rejected the pod on every node at
// PreFilter (an enforced policy that does not compile, or whose match
// condition or params lookup failed), or nil.
func (r *Record) Rejection() *engine.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejection
}

// Matched says whether the cycle's PreFilter ran (a pod held at
// PreEnqueue or rejected by another PreFilter plugin first has no match
// recorded).
func (r *Record) Matched() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.matched
}

// Filters returns every filter policy's decision on the node, in the
// cycle's order (Match.Filters: by name, Audit ones included); nil when
// CELFilter did not evaluate the node.
func (r *Record) Filters(node string) []FilterOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.filters[node]
}

// Scores returns every score policy's raw values on the node, in the
// cycle's order (Match.Scores); nil when CELScore did not score it.
func (r *Record) Scores(node string) []ScoreOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scores[node]
}

// matchedCycle records what PreFilter's match made of the pod.
func (r *Record) matchedCycle(c *Cycle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.matched, r.rejection = true, c.Rejection
}

// Attach records the cycle's match and keeps the Record with the cycle,
// for its Filter and Score calls: CELFilter's PreFilter and CELScore's
// PreScore (when it prepares its own cycle) call it with the state's
// Record, nil outside a dry run.
func (c *Cycle) Attach(r *Record) {
	if r == nil {
		return
	}
	c.Record = r
	r.matchedCycle(c)
}

// FilterNode evaluates every filter policy of the cycle on a node, not
// only up to the first that refuses, and records the decisions (with each
// rule and the false rules' sub-expressions when the Record asks). This is
// CELFilter's evaluation when the cycle records; the caller maps the
// decisions to the node's status (the first that acts) as Filter does.
func (c *Cycle) FilterNode(ctx context.Context, in *engine.NodeInput) []FilterOutcome {
	out := make([]FilterOutcome, len(c.Filters))
	for i, p := range c.Filters {
		o := &out[i]
		o.Decision = p.Filter(c.Ctx, c.Pod, in)
		if c.Record == nil || (!c.Record.Rules && c.Record.Why == nil) {
			continue
		}
		rules, err := p.FilterRules(c.Ctx, c.Pod, in)
		if err != nil {
			continue // it does not compile: the decision says so
		}
		o.Rules = rules
		if c.Record.Why == nil {
			continue
		}
		for _, rv := range rules {
			if rv.Passed {
				continue
			}
			steps, err := c.Record.Why.Filter(ctx, p, c.Pod, in, rv.Rule)
			if err != nil || len(steps) == 0 {
				continue
			}
			if o.Why == nil {
				o.Why = map[string][]engine.Step{}
			}
			o.Why[rv.Rule] = steps
		}
	}
	if c.Record != nil {
		c.Record.mu.Lock()
		if c.Record.filters == nil {
			c.Record.filters = map[string][]FilterOutcome{}
		}
		c.Record.filters[in.Node.Name] = out
		c.Record.mu.Unlock()
	}
	return out
}

// RecordScores records the score policies' decisions and raw values on a
// node (raw: every rule's, in the cycle's order of Scores); CELScore calls
// it when the cycle records.
func (c *Cycle) RecordScores(node string, decisions []engine.Decision, raw []float64) {
	if c.Record == nil {
		return
	}
	out := make([]ScoreOutcome, len(c.Scores))
	offset := 0
	for i, p := range c.Scores {
		n := p.NumScoreRules()
		out[i] = ScoreOutcome{Decision: decisions[i], Raw: slices.Clone(raw[offset : offset+n])}
		offset += n
	}
	c.Record.mu.Lock()
	defer c.Record.mu.Unlock()
	if c.Record.scores == nil {
		c.Record.scores = map[string][]ScoreOutcome{}
	}
	c.Record.scores[node] = out
}
