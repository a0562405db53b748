package celplugins

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
)

// StateKey is the CycleState key under which the policies matching the pod
// and the converted pod are kept for the cycle. The filter plugin's
// PreFilter writes it; the score plugin's PreScore reads it, or writes it
// when no filter plugin runs.
const StateKey fwk.StateKey = "celsched.io/cycle"

// Cycle is what one scheduling cycle of a pod needs from the policies:
// computed once in PreFilter, read by Filter on every node, and by PreScore.
// It is immutable.
type Cycle struct {
	Pod *engine.PodInput
	// Filters and Scores are the matching policies with filters and with
	// scores, in name order (Audit ones included).
	Filters []*engine.CompiledPolicy
	Scores  []*engine.CompiledPolicy
	// Audit are the matching Audit policies, reported on when the pod is
	// bound (ReportAudit).
	Audit []*engine.CompiledPolicy
	// Rejection, when not empty, rejects the pod on every node: an enforced
	// policy with failurePolicy Fail did not compile, or one of its match
	// conditions failed.
	Rejection string

	// audit collects what the Audit filters would reject, per node; nil
	// when no Audit policy with filters matches.
	audit *auditDenials
}

// Clone implements fwk.StateData; a Cycle is immutable but for the Audit
// denials, which clones share (they are the same evaluations).
func (c *Cycle) Clone() fwk.StateData { return c }

// Prepare matches the current policies against a pod: once per cycle.
func (rt *Runtime) Prepare(ctx context.Context, pod *corev1.Pod) (*Cycle, error) {
	in, err := rt.PodInput(pod)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	c := &Cycle{Pod: in}
	for _, m := range rt.Registry.Snapshot().Match(ctx, in) {
		p := m.Policy
		if m.Err != nil {
			if !p.FailClosed() {
				logger.V(4).Info("Ignoring a policy that failed to match (failurePolicy Ignore)", "pod", klog.KObj(pod), "policy", p.Name, "err", m.Err)
				continue
			}
			if p.Audit() {
				logger.V(2).Info("SchedulingPolicy would reject the pod (Audit)", "pod", klog.KObj(pod), "policy", p.Name, "err", m.Err)
				continue
			}
			if c.Rejection == "" {
				c.Rejection = ErrorMessage(m.Err)
			}
			continue
		}
		if p.Audit() {
			c.Audit = append(c.Audit, p)
			if p.HasFilters() && c.audit == nil {
				c.audit = &auditDenials{byNode: map[string][]denial{}}
			}
		}
		if p.HasFilters() {
			c.Filters = append(c.Filters, p)
		}
		if p.HasScores() {
			c.Scores = append(c.Scores, p)
		}
	}
	return c, nil
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

// RejectionMessage is the status message of a rule that is false. It does
// not name the node, so that kube-scheduler folds identical rejections into
// one line: "0/3 nodes are available: 3 node(s) rejected by SchedulingPolicy
// ml-on-gpu-nodes, rule gpu-node: node has no GPU."
func RejectionMessage(r *engine.Rejection) string {
	return fmt.Sprintf("node(s) rejected by SchedulingPolicy %s, rule %s: %s", r.Policy, r.Rule, oneLine(r.Message))
}

// HoldMessage is the message of a pod held by a preEnqueue rule.
func HoldMessage(r *engine.Rejection) string {
	return fmt.Sprintf("held by SchedulingPolicy %s, rule %s: %s", r.Policy, r.Rule, oneLine(r.Message))
}

// ErrorMessage is the message of a compile or evaluation error that
// rejects (failurePolicy Fail), on one line: the first compile error with
// its field path and CEL position, or the evaluation error.
func ErrorMessage(err error) string {
	var ce *engine.CompileError
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
