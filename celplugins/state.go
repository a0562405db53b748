package celplugins

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/metrics"
)

// StateKey is the CycleState key under which the policies matching the pod
// and the converted pod are kept for the cycle, so that matching runs once
// per cycle. The filter plugin's PreFilter writes it; the score plugin's
// PreScore reads it, or prepares its own Cycle when no filter plugin runs.
// Each plugin keeps its own state under its own key (the score plugin's raw
// values, for instance).
const StateKey fwk.StateKey = "celsched.io/cycle"

// Cycle is one scheduling cycle of a pod: its Match (shared with the
// pod's other cycles and the queueing hints while nothing it depends on
// changes), the cycle's time budget, and what the cycle observes: the
// filter tally, the rejection messages and the Audit denials. Prepare
// makes it in PreFilter; Filter reads it on every node, and PreScore.
type Cycle struct {
	*Match
	// Ctx carries the cycle's CEL time budget (Args.EvaluationBudget) as
	// its deadline, with engine.ErrTimeBudgetExceeded as the cause: the
	// evaluations of the cycle run with it. It ends at the end of Prepare
	// when nothing is evaluated after (no policy with filters or scores
	// applies), and otherwise by itself at the deadline (kube-scheduler has
	// no end-of-cycle hook to cancel it earlier); it is one timer per
	// cycle, not per node.
	Ctx context.Context
	// Budget is the cycle's time budget, for messages.
	Budget time.Duration
	// FilterTally counts the filter decisions of the cycle (nil when no
	// policy with filters applies).
	FilterTally *metrics.Tally

	// release ends Ctx before its deadline, when the cycle could not be
	// prepared.
	release context.CancelFunc
	// messages are the distinct rejection messages of the cycle so far:
	// the first distinct of them, at most maxDistinctMessages (see
	// Message). Read and written only when a policy's slot in texts does
	// not hold the message.
	mu       sync.Mutex
	messages [maxDistinctMessages]string
	distinct int
	// explained: a RejectionDetail event was recorded in this cycle
	// (Args.ExplainRejections).
	explained atomic.Bool
	// texts are the message of each filter policy's last rejection in the
	// cycle (Message), by index in Filters.
	texts []atomic.Pointer[rejectionText]

	// audit collects what the Audit policies would have rejected: at match
	// time, and per node; nil when no Audit policy matches.
	audit *auditDenials

	// Record, when a dry run asked for one (RecordKey), receives what the
	// plugins decide on each node; nil in the scheduler.
	Record *Record
}

// ExplainOnce says whether the caller is the first of the cycle to ask.
func (c *Cycle) ExplainOnce() bool { return c.explained.CompareAndSwap(false, true) }

// Clone implements fwk.StateData; a Cycle is immutable but for the Audit
// denials, which clones share (they are the same evaluations).
func (c *Cycle) Clone() fwk.StateData { return c }

// Prepare starts a scheduling cycle of a pod: its Match (the one kept from
// the pod's last cycle when nothing it depends on changed, or a new one,
// then kept), under the cycle's time budget, which the cycle's evaluations
// share; what matching saw (errors, Audit would-be rejections) is
// reported, and the cycle's filter tally started.
func (rt *Runtime) Prepare(ctx context.Context, pod *corev1.Pod, budget time.Duration) (*Cycle, error) {
	if budget <= 0 {
		budget = DefaultEvaluationBudget
	}
	cycleCtx, release := context.WithTimeoutCause(ctx, budget, rt.budgetCause(budget))
	groups := rt.Inputs.CycleGroups
	if groups == nil {
		groups = rt.Inputs.PodGroups
	}
	m, fresh, err := rt.Inputs.match(cycleCtx, pod, groups)
	if err != nil {
		release()
		return nil, err
	}
	if fresh {
		rt.Inputs.keep(m)
	}
	c := &Cycle{Match: m, Ctx: cycleCtx, Budget: budget, release: release}
	if len(m.Filters) > 0 {
		c.texts = make([]atomic.Pointer[rejectionText], len(m.Filters))
	}
	if len(m.Audit) > 0 {
		c.audit = &auditDenials{match: slices.Clip(m.wouldReject)}
	}
	for _, p := range c.Audit {
		// What the Audit policy's preEnqueue rules would have done, for
		// PostBind to report: evaluated here, once per cycle, under the
		// cycle's budget and snapshot.
		if p.HasPreEnqueue() {
			if d := p.PreEnqueue(cycleCtx, c.Pod); d.WouldAct() {
				c.audit.match = append(c.audit.match, d)
			}
		}
	}
	rt.Report.Matched(cycleCtx, c, pod)
	if len(c.Filters) > 0 {
		c.FilterTally = rt.Report.Tally(engine.PointFilter, c.Filters)
	}
	if len(c.Filters) == 0 && len(c.Scores) == 0 {
		// Nothing is evaluated after this (the plugins skip Filter and
		// Score): the timer stops now, rather than fire at the deadline for
		// a cycle long over (a pod no policy applies to, most of them).
		release()
	}
	return c, nil
}

// Queued returns the Match of a pod the scheduling queue is adding
// (CELPreEnqueue): the one kept when nothing it depends on changed, or a
// new one, kept for the pod's cycle, which then neither converts nor
// matches it again. It is made under a time budget (QueuedBudget), and is
// nil when it does not end within it (or ctx ends first). Nothing is
// reported: the cycle reports its Match (Prepare).
func (rt *Runtime) Queued(ctx context.Context, pod *corev1.Pod) (*Match, error) {
	budget := rt.QueuedBudget
	switch {
	case budget < 0:
		return nil, nil
	case budget == 0:
		budget = DefaultEvaluationBudget
	}
	ctx, release := context.WithTimeoutCause(ctx, budget, rt.budgetCause(budget))
	defer release()
	m, fresh, err := rt.Inputs.match(ctx, pod, rt.Inputs.PodGroups)
	if err != nil || ctx.Err() != nil {
		return nil, err
	}
	// A bound pod (the CLI's and the rollout gate's evaluations of running
	// pods) has no cycle to come, and its Match would stay: the pods' event
	// handler drops kept Matches at binding.
	if fresh && pod.Spec.NodeName == "" {
		rt.Inputs.keep(m)
	}
	return m, nil
}

// budgetError is the error a context with a time budget ends with at its
// deadline (budgetCause), with its budget.
type budgetError struct {
	budget time.Duration
	err    error
}

// budgetCause returns the error a context with the budget ends with at its
// deadline.
func budgetCause(budget time.Duration) error {
	return fmt.Errorf("%w (%s)", engine.ErrTimeBudgetExceeded, budget)
}

// budgetCause is the package's budgetCause, kept for the last budget
// (Runtime.lastCause): the budget hardly ever changes, so every cycle
// shares one error.
func (rt *Runtime) budgetCause(budget time.Duration) error {
	if last := rt.lastCause.Load(); last != nil && last.budget == budget {
		return last.err
	}
	err := budgetCause(budget)
	rt.lastCause.Store(&budgetError{budget: budget, err: err})
	return err
}

// maxDistinctMessages bounds the distinct per-node rejection messages of
// one cycle. kube-scheduler folds the nodes' messages by identical text into
// the pod's PodScheduled condition, which it does not truncate: a
// messageExpression that differs per node (naming the node, or echoing an
// annotation) would otherwise make a condition of nodes x 1 KiB, over
// etcd's request limit on a large cluster, and the pod's status would not be
// written at all.
const maxDistinctMessages = 16

// Message is the status message of a decision of the cycle's i-th filter
// policy that acts on a node: its String, unless the cycle already has
// maxDistinctMessages distinct ones, in which case the rule's static
// message replaces its messageExpression's result. The message of the
// policy's last rejection is kept in its slot: a rejection with the same
// rule and message (a static message, or a remembered outcome) reads it
// there, without a lock or a hash.
func (c *Cycle) Message(i int, d *engine.Decision) string {
	if d.Verdict != engine.Reject || i >= len(c.texts) {
		return c.message(d)
	}
	slot := &c.texts[i]
	if t := slot.Load(); t != nil && t.rule == d.Rule && t.message == d.Message {
		return t.text
	}
	text := c.message(d)
	slot.Store(&rejectionText{rule: d.Rule, message: d.Message, text: text})
	return text
}

// rejectionText is the status message of a rejection.
type rejectionText struct {
	rule, message, text string
}

func (c *Cycle) message(d *engine.Decision) string {
	msg := d.String()
	c.mu.Lock()
	if slices.Contains(c.messages[:c.distinct], msg) {
		c.mu.Unlock()
		return msg
	}
	if c.distinct < maxDistinctMessages {
		c.messages[c.distinct] = msg
		c.distinct++
		c.mu.Unlock()
		return msg
	}
	c.mu.Unlock()
	static := d.WithStaticMessage()
	return static.String()
}

// MessagesFull says whether the cycle holds maxDistinctMessages distinct
// rejection messages: a new one is replaced by its rule's static message
// from then on.
func (c *Cycle) MessagesFull() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distinct >= maxDistinctMessages
}

// ReadCycle returns the Cycle of a CycleState, or nil when none was written.
func ReadCycle(state fwk.CycleState) *Cycle {
	data, err := state.Read(StateKey)
	if err != nil {
		return nil
	}
	c, _ := data.(*Cycle)
	return c
}

// StateReader is what ReadState reads: a pod's CycleState, or a pod
// group's or a placement's cycle state.
type StateReader interface {
	Read(key fwk.StateKey) (fwk.StateData, error)
}

// ReadState returns the data of type T that a plugin wrote at key, or an
// error naming the key when there is none or it is of another type.
func ReadState[T fwk.StateData](state StateReader, key fwk.StateKey) (T, error) {
	var zero T
	data, err := state.Read(key)
	if err != nil {
		return zero, fmt.Errorf("reading %s: %w", key, err)
	}
	t, ok := data.(T)
	if !ok {
		return zero, fmt.Errorf("%s holds %T", key, data)
	}
	return t, nil
}

// LastState is what a plugin last wrote in a CycleState, kept beside the
// state, so that the per-node calls of the cycle (Filter, Score) find it
// without CycleState.Read: a sync.Map lookup that hashes the key, per node
// and plugin. A state it does not know (a clone made for nominated pods or
// preemption, or another cycle's in a dry run that runs several at once)
// is read as before. Holding the state keeps it alive, so its address is
// not reused by another cycle's state while it is here.
type LastState[T any] struct {
	last atomic.Pointer[stateData[T]]
}

type stateData[T any] struct {
	state fwk.CycleState
	data  T
}

// Remember records what was written in a state.
func (l *LastState[T]) Remember(state fwk.CycleState, data T) {
	l.last.Store(&stateData[T]{state: state, data: data})
}

// Get returns what was written in state, if it is the state remembered.
func (l *LastState[T]) Get(state fwk.CycleState) (T, bool) {
	if last := l.last.Load(); last != nil && last.state == state {
		return last.data, true
	}
	var zero T
	return zero, false
}

// NodeInfo is the engine's view of a scheduler NodeInfo: allocatable and
// requested resources (cpu in millicores, the rest in base units) and the
// pods on the node.
func NodeInfo(ni fwk.NodeInfo) *engine.NodeInfo {
	pods := ni.GetPods()
	out := &engine.NodeInfo{
		Allocatable: resourceInts(ni.GetAllocatable()),
		Requested:   resourceInts(ni.GetRequested()),
		Pods:        make([]engine.PodRef, len(pods)),
	}
	out.Requested[string(corev1.ResourcePods)] = int64(len(pods))
	for i, p := range pods {
		pod := p.GetPod()
		out.Pods[i] = engine.PodRef{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels}
	}
	return out
}

// NodeInfoFrom is NodeInfo as an engine.NodeInfoSource: the plugins give
// the engine the framework's NodeInfo and this function, which builds the
// engine's view only when a policy reads nodeInfo, without a closure.
func NodeInfoFrom(source any) *engine.NodeInfo {
	ni, ok := source.(fwk.NodeInfo)
	if !ok {
		return nil
	}
	return NodeInfo(ni)
}

func resourceInts(r fwk.Resource) map[string]int64 {
	scalar := r.GetScalarResources()
	out := make(map[string]int64, 4+len(scalar))
	out[string(corev1.ResourceCPU)] = r.GetMilliCPU()
	out[string(corev1.ResourceMemory)] = r.GetMemory()
	out[string(corev1.ResourceEphemeralStorage)] = r.GetEphemeralStorage()
	out[string(corev1.ResourcePods)] = int64(r.GetAllowedPodNumber())
	for name, v := range scalar {
		out[string(name)] = v
	}
	return out
}
