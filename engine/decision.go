package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
)

// This file is where celsched's semantics are decided, once: what a false
// rule, an error, failurePolicy and enforcement mean. The plugins, the audit
// reporting, the queueing hints and the dry-run only map a Decision to their
// output (as ValidatingAdmissionPolicy's dispatcher maps a PolicyDecision).

// Verdict is what a policy says about a pod (and a node), with its
// failurePolicy applied.
type Verdict int

const (
	// Pass means every rule that evaluated is true. Rules (and match conditions)
	// that failed under failurePolicy Ignore are skipped and listed in
	// Decision.Ignored; the other rules still apply.
	Pass Verdict = iota
	// Reject means a filter is false for the node (or, at PointMatch, never
	// used: match-time problems are Errors).
	Reject
	// Hold means a preEnqueue rule is false: the pod stays out of the queue.
	Hold
	// Error means the policy does not compile, or a rule or match condition
	// failed, and failurePolicy is Fail. At PointPreEnqueue it holds the pod,
	// at PointMatch and PointFilter it rejects (the pod on every node, or the
	// node), at PointScore and PointPlacementScore it fails the scheduling
	// cycle.
	Error
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "Pass"
	case Reject:
		return "Reject"
	case Hold:
		return "Hold"
	case Error:
		return "Error"
	default:
		return fmt.Sprintf("Verdict(%d)", int(v))
	}
}

// Point is where in scheduling a decision is made.
type Point int

const (
	// PointMatch is whether the policy applies to the pod (compile errors and
	// match conditions), once per scheduling cycle.
	PointMatch Point = iota
	// PointPreEnqueue is the preEnqueue rules, before the pod is queued.
	PointPreEnqueue
	// PointFilter is the filters, per node.
	PointFilter
	// PointScore is the score rules, per node.
	PointScore
)

// Decision is one policy's decision for a pod (and a node) at one point.
// The zero Verdict is Pass.
type Decision struct {
	Policy *CompiledPolicy
	Point  Point
	Verdict
	// Rule is the rule (or match condition) that was false or failed; empty
	// for a compile error.
	Rule string
	// Message is the false rule's message (Reject, Hold).
	Message string
	// Err is the compile or evaluation error (Error).
	Err error
	// Ignored are the errors skipped under failurePolicy Ignore, for logs
	// and metrics; they change nothing.
	Ignored []error

	// static is the false rule's message without its messageExpression.
	static string
}

// WithStaticMessage returns the decision with the false rule's static
// message (its message, or the default) in place of its messageExpression's
// result: the same for every node, so kube-scheduler folds it into one line.
func (d Decision) WithStaticMessage() Decision {
	if d.static != "" {
		d.Message = d.static
	}
	return d
}

// Enforced says whether the scheduler acts on the decision: its policy's
// enforcement is Enforce. An Audit policy's decision is only reported.
func (d *Decision) Enforced() bool {
	return d.Policy == nil || d.Policy.Enforced()
}

// Acts says whether the scheduler acts on the decision: an enforced Reject,
// Hold or Error.
func (d *Decision) Acts() bool { return d.Verdict != Pass && d.Enforced() }

// WouldAct says whether an Audit policy would have rejected, held or failed:
// what Audit reporting records.
func (d *Decision) WouldAct() bool { return d.Verdict != Pass && !d.Enforced() }

// MaxMessageLength bounds every message celsched writes for a pod (its
// PodScheduled condition, events): the folded condition of many nodes must
// stay far below etcd's request limit.
const MaxMessageLength = schedv1alpha1.MaxMessageLength

// String is the decision as a pod's owner reads it, on one line and at most
// MaxMessageLength bytes. It does not name the node, so that kube-scheduler
// folds identical rejections of many nodes into one line ("0/3 nodes are
// available: 3 node(s) rejected by SchedulingPolicy p, rule r: msg.").
func (d *Decision) String() string {
	var s string
	switch d.Verdict {
	case Pass:
		return ""
	case Reject:
		return d.Policy.texts.rejection(d)
	case Hold:
		s = fmt.Sprintf("held by SchedulingPolicy %s, rule %s: %s", d.Policy.Name, d.Rule, oneLine(d.Message))
	case Error:
		switch d.Point {
		case PointPreEnqueue:
			s = "held: " + podErrorMessage(d.Err)
		case PointFilter:
			s = "node(s) rejected: " + podErrorMessage(d.Err)
		default:
			s = podErrorMessage(d.Err)
		}
	}
	return Truncate(s, MaxMessageLength)
}

// rejectionTexts are a policy version's formatted rejections, by rule and
// message: a rejection is formatted once, not once per scheduling cycle.
// Bound: maxRejectionTexts (messageExpressions can make a message per
// node); past it, rejections are formatted each time.
type rejectionTexts struct {
	m sync.Map // rejectionKey -> string
	n atomic.Int32
}

type rejectionKey struct{ rule, message string }

const maxRejectionTexts = 64

// rejection is Decision.String of a Reject.
func (t *rejectionTexts) rejection(d *Decision) string {
	if t == nil {
		return formatRejection(d)
	}
	key := rejectionKey{d.Rule, d.Message}
	if s, ok := t.m.Load(key); ok {
		return s.(string)
	}
	s := formatRejection(d)
	if t.n.Add(1) <= maxRejectionTexts {
		t.m.Store(key, s)
	}
	return s
}

func formatRejection(d *Decision) string {
	return Truncate(fmt.Sprintf("node(s) rejected by SchedulingPolicy %s, rule %s: %s", d.Policy.Name, d.Rule, oneLine(d.Message)), MaxMessageLength)
}

// podErrorMessage is ErrorMessage for a message a pod's owner reads: an
// evaluation error's text is shown only when it is one of CEL's own
// (a missing key or field, no matching overload, a cost or time limit, a
// result of the wrong type), which name parts of the expression; any other
// (the errors of ip(), cidr(), semver(), url(), quantity(), ... repeat their
// argument, e.g. a node annotation) is replaced by a pointer to where an
// admin finds it. Compile errors quote the policy's own expressions.
func podErrorMessage(err error) string {
	var ee *EvalError
	if !errors.As(err, &ee) || podVisible(ee.Err) {
		return ErrorMessage(err)
	}
	hidden := *ee
	hidden.Err = errHidden
	return ErrorMessage(&hidden)
}

// errHidden stands for an evaluation error whose text is not shown to pods.
var errHidden = errors.New("evaluation failed; the error is in the scheduler's log and the policy's EvaluationError condition")

// podVisibleErrors are the beginnings of CEL errors that name parts of the
// expression, not the data it read.
var podVisibleErrors = []string{
	"no such key", "no such attribute", "no such overload", "no matching overload", "division by zero", "modulus by zero",
	"index out of range", "evaluated to", "evaluation cancelled", "not evaluated", "operation cancelled", "actual cost limit exceeded",
	"policy evaluation exceeded", "the pod's namespace", "nodeInfo is not available", "internal error",
}

func podVisible(err error) bool {
	msg := err.Error()
	for _, p := range podVisibleErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return errors.Is(err, ErrCostBudgetExceeded) || errors.Is(err, celcost.ErrCostLimitExceeded) || errors.Is(err, ErrTimeBudgetExceeded)
}

// RuleLabel names the decision's rule as metrics, events and status.audit
// do: preEnqueue/NAME, filters/NAME, scores/NAME, placement.filters/NAME,
// placement.scores/NAME, or match/NAME for a match condition ("-" for a
// compile error).
func (d *Decision) RuleLabel() string {
	if d.Rule == "" {
		return "-"
	}
	switch d.Point {
	case PointPreEnqueue:
		return "preEnqueue/" + d.Rule
	case PointFilter:
		return "filters/" + d.Rule
	case PointScore:
		return "scores/" + d.Rule
	case PointPlacement:
		return "placement.filters/" + d.Rule
	case PointPlacementScore:
		return "placement.scores/" + d.Rule
	default:
		return "match/" + d.Rule
	}
}

// fail applies failurePolicy to an error: Fail decides Error, Ignore
// records the error and lets evaluation go on.
func (d *Decision) fail(rule string, err error) (stop bool) {
	if d.Policy.FailurePolicy == schedv1alpha1.Ignore {
		d.Ignored = append(d.Ignored, err)
		return false
	}
	d.Verdict, d.Rule, d.Err = Error, rule, err
	return true
}

// ErrorMessage is the message of a compile or evaluation error that
// rejects (failurePolicy Fail), on one line: the first compile error with
// its field path and CEL position, or the evaluation error.
func ErrorMessage(err error) string {
	var ce *CompileError
	if errors.As(err, &ce) && len(ce.Errors) > 0 {
		first := ce.Errors[0]
		msg := fmt.Sprintf("SchedulingPolicy %s does not compile (failurePolicy Fail): %s: %s", ce.Policy, first.Field, oneLine(first.Detail))
		if n := len(ce.Errors) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more, see the policy's Ready condition)", n)
		}
		return msg
	}
	return oneLine(err.Error()) + " (failurePolicy Fail)"
}

// oneLine keeps the first line of a message: CEL errors add the expression
// and a caret on further lines, which do not fit a pod condition.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// Truncate shortens s to at most n bytes, ending with "..." when cut, and
// never in the middle of a UTF-8 character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n-3) + "..."
}
