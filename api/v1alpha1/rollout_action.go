package v1alpha1

// RolloutActionAnnotation on a SchedulingPolicy asks the leader to act on
// the policy's rollout. Its value is "<action>/<id>": pause, resume,
// promote (the current wave, now) or abort (every wave back to Audit),
// and an identity of the request (RolloutActionRequest; the CLI writes a
// UUID). The leader applies an action once: it records the id in
// status.rollout.lastAction in the same write that applies it, and then
// removes the annotation; an annotation whose id status already holds is
// only removed. A bare "<action>", written by hand, is first given the id
// "rv-<resourceVersion>" (the policy's version when the leader saw it),
// in a write conditional on that version.
const RolloutActionAnnotation = "scheduling.celsched.io/rollout-action"

// The actions of RolloutActionAnnotation.
const (
	RolloutActionPause   = "pause"
	RolloutActionResume  = "resume"
	RolloutActionPromote = "promote"
	RolloutActionAbort   = "abort"
)

// MaxRolloutActionID bounds the id of a RolloutActionAnnotation request,
// so that the whole value fits status.rollout.lastAction.id.
const MaxRolloutActionID = 64

// RolloutActionRequest is the value of RolloutActionAnnotation that
// requests action with the identity id.
func RolloutActionRequest(action, id string) string { return action + "/" + id }
