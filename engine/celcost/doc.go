// Package celcost is the cost layer of celsched's CEL: the limits
// (limits.go: the per-expression and per-policy budgets and the object
// sizes they are derived from), the compile-time estimator (estimate.go:
// how large what a variable reaches can be, and what growing calls cost),
// the runtime cost tracking (cost.go: every call priced from its
// arguments before it runs) and the programs built on them (program.go:
// Bounded, run untracked when the estimate proves them cheap, and
// Tracked, stopped at their limit; both interruptible by a context).
//
// It knows nothing of policies: package engine compiles policies into
// these programs and evaluates them.
package celcost
