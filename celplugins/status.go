package celplugins

import (
	"errors"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
)

// Status is the framework status of a policy's decision, with message as
// its text: the one table from (point, verdict, enforcement) to
// kube-scheduler's codes that the plugins use.
//
//	decision                          | status
//	----------------------------------+-------------------------------------
//	Pass, or Audit (any verdict)      | nil: success (Audit is only reported)
//	match Error (PreFilter)           | UnschedulableAndUnresolvable: no node, and no preemption, can help
//	preEnqueue Hold or Error          | UnschedulableAndUnresolvable: the pod stays out of the queue
//	filter Reject or Error            | Unschedulable when the policy reads nodeInfo (evicting pods may
//	                                  | change its verdict, so preemption may help); otherwise
//	                                  | UnschedulableAndUnresolvable
//	score Error                       | Error: the cycle fails and the pod is retried with backoff
//	placement score Error             | Error: the group's cycle fails and it is retried with backoff
func Status(d *engine.Decision, message string) *fwk.Status {
	if !d.Acts() {
		return nil
	}
	switch d.Point {
	case engine.PointFilter:
		if d.Policy.UsesNodeInfo() {
			return fwk.NewStatus(fwk.Unschedulable, message)
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, message)
	case engine.PointScore, engine.PointPlacementScore:
		return fwk.AsStatus(errors.New(message))
	default: // PointMatch, PointPreEnqueue
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, message)
	}
}
