package engine

import "slices"

// This file is how a policy evaluation is charged for its expressions
// (celcost.PolicyEvaluationCostBudget), so that the charge is the same whether an
// expression was computed or its result read from the memo: a remembered
// result costs what it cost, and no verdict depends on which pod came
// before.
//
// Each rule is charged its own program's cost and, once per policy
// evaluation, the cost of every variable it read (directly or through
// other variables): what a fresh evaluation, which evaluates each variable
// once, spends. The budget is checked after each rule, in the same place
// whether the rule ran or was remembered.

// costRecord is what computing an expression on one input cost: its own
// program's cost (the measured cost when tracked, the estimated worst case
// otherwise) and the variables it read, each with its own program's cost.
// A memo entry keeps it with the result (memoResult.cost).
type costRecord struct {
	own  uint64
	vars []varCost
}

// varCost is a variable an expression read, and its own program's cost.
type varCost struct {
	index int32
	cost  uint64
}

// distinctReads returns the variables of reads once each, in a slice of
// their own (nil when none): reads is a region of evaluation.reads, which
// is reused.
func distinctReads(reads []varCost) []varCost {
	if len(reads) == 0 {
		return nil
	}
	out := make([]varCost, 0, len(reads))
	for _, r := range reads {
		if !slices.ContainsFunc(out, func(o varCost) bool { return o.index == r.index }) {
			out = append(out, r)
		}
	}
	return out
}

// account is what one policy evaluation (a pod's match or preEnqueue, or
// a pod on a node at Filter or Score) has been charged: each rule's own
// cost, and each variable's once.
type account struct {
	spent uint64
	// charged has bit i set once variable i was charged; more holds the
	// bits of variables 64 and up (a policy from a file in a dry run may
	// have more than the API's 64).
	charged uint64
	more    []uint64
}

// charge adds what a rule cost, and returns the total spent.
func (a *account) charge(c *costRecord) uint64 {
	a.spent += c.own
	for _, v := range c.vars {
		if a.firstCharge(v.index) {
			a.spent += v.cost
		}
	}
	return a.spent
}

// firstCharge marks variable i charged, and says whether it was not yet.
func (a *account) firstCharge(i int32) bool {
	word, bit := &a.charged, uint64(1)<<(i%64)
	if i >= 64 {
		w := int(i/64) - 1
		if w >= len(a.more) {
			a.more = append(a.more, make([]uint64, w+1-len(a.more))...)
		}
		word = &a.more[w]
	}
	if *word&bit != 0 {
		return false
	}
	*word |= bit
	return true
}
