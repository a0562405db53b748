package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=schedulingpolicies,verbs=get;list;watch;patch

// RolloutActionAnnotation asks the rollout controller for an action on a
// policy's rollout. Its value is "<action>/<id>": pause, resume, promote
// (the current wave, now) or abort (every wave back to Audit), and an
// identity of the request (ActionRequest; the CLI writes a UUID). The
// leader applies an action once: it records the id in
// status.rollout.lastAction in the same write that applies it, and then
// removes the annotation; an annotation whose id status already holds is
// only removed. A bare "<action>", written by hand, is first given the id
// "rv-<resourceVersion>" (the policy's version when the leader saw it),
// in a write conditional on that version.
const RolloutActionAnnotation = "scheduling.celsched.io/rollout-action"

// The actions of RolloutActionAnnotation.
const (
	ActionPause   = "pause"
	ActionResume  = "resume"
	ActionPromote = "promote"
	ActionAbort   = "abort"
)

// MaxActionID bounds the id of a RolloutActionAnnotation request, so that
// the whole value fits status.rollout.lastAction.id.
const MaxActionID = 64

// ActionRequest is the value of RolloutActionAnnotation that requests
// action with the identity id.
func ActionRequest(action, id string) string { return action + "/" + id }

// actionRequest is a parsed RolloutActionAnnotation.
type actionRequest struct {
	// value is the annotation's value.
	value  string
	action string
	// id is the request's identity; empty for a bare action.
	id string
}

// parseAction parses the value of RolloutActionAnnotation.
func parseAction(value string) (actionRequest, error) {
	action, id, identified := strings.Cut(value, "/")
	switch action {
	case ActionPause, ActionResume, ActionPromote, ActionAbort:
	default:
		return actionRequest{}, fmt.Errorf("unknown action %q (pause, resume, promote or abort)", action)
	}
	if identified && !validActionID(id) {
		return actionRequest{}, fmt.Errorf("the id %q of %q is not 1 to %d letters, digits, '.', '_' or '-'", id, action, MaxActionID)
	}
	return actionRequest{value: value, action: action, id: id}, nil
}

func validActionID(id string) bool {
	if id == "" || len(id) > MaxActionID {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Reasons of the rollout's events, on the policy.
const (
	ReasonWaveStarted      = "RolloutWaveStarted"
	ReasonWavePromoted     = "RolloutWavePromoted"
	ReasonWavePaused       = "RolloutWavePaused"
	ReasonRolloutCompleted = "RolloutCompleted"
	ReasonRolloutAction    = "RolloutAction"
)

// DefaultRolloutInterval is how often the rollouts are looked at.
const DefaultRolloutInterval = time.Second

// RolloutController runs the rollouts of spec.rollout: the one writer of
// status.rollout. It runs on the leader, where the scheduler binds pods
// and so collects the evidence (audit.Log.TakeWaves), and keeps time by
// the leader's clock; everything it decides is in status, so a new leader
// continues from there (the evidence collected by the old leader and not
// yet written, at most one Interval's, is lost).
//
// A wave is Pending until the waves before it are Enforced, then Soaking
// from its startTime; after its soak it is promoted (Enforced) when the
// pods it would have held or kept off their node since startTime are at
// most maxWouldReject, and otherwise Paused, with the rollout, until a
// person acts (resume: a new soak with the counts reset; promote; abort:
// every wave audited again). Every decision is an Event on the policy. A
// new spec restarts the rollout from the first wave that is not Enforced
// (waves keep their phase by name).
//
// One step of a policy is one status write (conditional on the version
// read), which holds everything the step decided: the restart for a new
// generation (observedGeneration), the action of the annotation
// (lastAction), the evidence and the waves' phases. What follows the
// write (the Events, the annotation's removal) may be lost to a crash or
// fail; it is never applied twice, because the next step starts from the
// status written.
type RolloutController struct {
	Client   client.Client
	Log      *audit.Log
	Recorder events.EventRecorder
	Interval time.Duration
	// Pending counts, for the gate, a wave's pods that are pending (no
	// bind reports on them) and that the policy, enforced, would hold or
	// leave with no node; nil: only the pods bound during the soak are
	// evidence.
	Pending PendingChecker
	// PendingRecheck is how often the pending pods of a wave paused by its
	// gate are counted again, to promote it once they no longer exceed it
	// (DefaultPendingRecheck when 0).
	PendingRecheck time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// counted is the last count of the pending pods of each wave (policy
	// and index) that soaks or is paused; Step writes it, on one
	// goroutine, and drops the entries of the waves that no longer do.
	counted map[audit.WaveKey]lastCount
}

// lastCount is the last count of a wave's pending pods: when, for which
// generation of the policy, and its error.
type lastCount struct {
	time       time.Time
	generation int64
	err        error
}

// PendingChecker counts the pending pods of a wave of a policy's rollout,
// compiled at generation, that the policy, enforced, would hold or leave
// with no node (verdict.PendingPods answers from the scheduler's
// informers).
type PendingChecker interface {
	WouldStrand(ctx context.Context, policy string, generation int64, wave int) (audit.Stranded, error)
}

// DefaultPendingRecheck is how often a wave paused by its gate has its
// pending pods counted again.
const DefaultPendingRecheck = 30 * time.Second

// maxPendingCount bounds the time of one count of a wave's pending pods;
// a count that does not end decides nothing.
const maxPendingCount = 20 * time.Second

// SetupWithManager adds the controller to the manager.
func (r *RolloutController) SetupWithManager(mgr ctrl.Manager) error {
	return mgr.Add(r)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *RolloutController) NeedLeaderElection() bool { return true }

// Start runs the rollouts every Interval until ctx is done.
func (r *RolloutController) Start(ctx context.Context) error {
	every(ctx, r.Interval, DefaultRolloutInterval, r.Step, false)
	return nil
}

// Step looks at every policy with a rollout once.
func (r *RolloutController) Step(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("rollout")
	evidence := r.Log.TakeWaves()
	var list schedv1alpha1.SchedulingPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		log.Error(err, "Listing the policies")
		for k, d := range evidence {
			r.Log.ReturnWave(k, d)
		}
		return
	}
	live := map[audit.WaveKey]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.Rollout == nil {
			continue
		}
		st, err := r.step(ctx, p, evidence)
		if err != nil {
			// Nothing was written: the evidence is taken again next time.
			log.V(2).Info("Writing a rollout's status failed; retrying", "policy", p.Name, "err", err)
			for k, d := range evidence {
				if k.Policy == p.Name {
					r.Log.ReturnWave(k, d)
				}
			}
			st = p.Status.Rollout
		}
		for i, w := range waves(st) {
			if w.Phase == schedv1alpha1.WaveSoaking || w.Phase == schedv1alpha1.WavePaused {
				live[audit.WaveKey{Policy: p.Name, Wave: i}] = true
			}
		}
	}
	for k := range r.counted {
		if !live[k] {
			delete(r.counted, k)
		}
	}
}

func waves(st *schedv1alpha1.RolloutStatus) []schedv1alpha1.WaveStatus {
	if st == nil {
		return nil
	}
	return st.Waves
}

func (r *RolloutController) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// step advances one policy's rollout, writes its status when it changed,
// and returns the status written. An error means that nothing was
// written; the removal of the annotation that follows the write is
// retried at the next step when it fails.
func (r *RolloutController) step(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, evidence map[audit.WaveKey]*audit.Delta) (*schedv1alpha1.RolloutStatus, error) {
	log := ctrl.LoggerFrom(ctx).WithName("rollout")
	now := metav1.NewTime(r.now())
	value, requested := p.Annotations[RolloutActionAnnotation]
	var req actionRequest
	var invalid error
	if requested {
		req, invalid = parseAction(value)
		if invalid == nil && req.id == "" {
			var err error
			if req, err = r.identify(ctx, p, req); err != nil {
				return nil, err
			}
			value = req.value
		}
	}
	st := restart(p)
	var decided []rolloutEvent
	if requested && invalid == nil {
		if st.LastAction != nil && st.LastAction.ID == req.value {
			log.V(1).Info("Rollout action already applied; removing its annotation", "policy", p.Name, "action", req.value)
		} else {
			decided = append(decided, act(st, req, now)...)
		}
	}
	addEvidence(p, st, evidence)
	decided = append(decided, advance(p, st, now, r.pendingCount(ctx, p, now.Time))...)
	if !apiequality.Semantic.DeepEqual(p.Status.Rollout, st) {
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		p.Status.Rollout = st
		if err := r.Client.Status().Patch(ctx, p, patch); err != nil {
			return nil, err
		}
	}
	r.record(ctx, p, decided)
	if requested {
		if err := r.removeAction(ctx, p, value); err != nil {
			log.Info("Removing a rollout action's annotation failed; retrying at the next step", "policy", p.Name, "action", value, "err", err)
		} else if invalid != nil {
			// Said once the request is gone, not at every step it stays.
			r.record(ctx, p, []rolloutEvent{{corev1.EventTypeWarning, ReasonRolloutAction,
				fmt.Sprintf("%s %q removed, not applied: %v", RolloutActionAnnotation, value, invalid)}})
		}
	}
	return st, nil
}

// identify gives a bare action of the annotation its identity,
// "<action>/rv-<resourceVersion>", in a write conditional on the version
// read: the action is applied by a later write, which finds the same
// identity after any failure.
func (r *RolloutController) identify(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, req actionRequest) (actionRequest, error) {
	id := "rv-" + p.ResourceVersion
	if !validActionID(id) {
		return req, fmt.Errorf("the resourceVersion %q makes no id for %s %q", p.ResourceVersion, RolloutActionAnnotation, req.value)
	}
	req.id, req.value = id, ActionRequest(req.action, id)
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	p.Annotations[RolloutActionAnnotation] = req.value
	if err := r.Client.Patch(ctx, p, patch); err != nil {
		return req, fmt.Errorf("giving %s %q its id: %w", RolloutActionAnnotation, req.action, err)
	}
	return req, nil
}

// removeAction removes the annotation if it still has the value the step
// acted on: a request written meanwhile stays for the next step.
func (r *RolloutController) removeAction(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, value string) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(RolloutActionAnnotation, "~", "~0"), "/", "~1")
	patch, err := json.Marshal([]map[string]string{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, p, client.RawPatch(types.JSONPatchType, patch))
}

// record makes the decisions Events on the policy and log lines.
func (r *RolloutController) record(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, decided []rolloutEvent) {
	for _, e := range decided {
		if r.Recorder != nil {
			r.Recorder.Eventf(p, nil, e.kind, e.reason, "Rollout", "%s", e.note)
		}
		ctrl.LoggerFrom(ctx).WithName("rollout").Info(e.note, "policy", p.Name, "reason", e.reason)
	}
}

// pendingCount returns the count of a wave's pending pods for advance:
// nil without a PendingChecker. Within PendingRecheck of the wave's last
// count (of this generation) it does not count again for a paused wave
// (nil, nil), nor after a count that failed (its error again): a count
// that cannot end in maxPendingCount is not retried at every step.
func (r *RolloutController) pendingCount(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, now time.Time) pendingCount {
	if r.Pending == nil {
		return nil
	}
	return func(wave int, paused bool) (*audit.Stranded, error) {
		recheck := r.PendingRecheck
		if recheck <= 0 {
			recheck = DefaultPendingRecheck
		}
		key := audit.WaveKey{Policy: p.Name, Wave: wave}
		last, ok := r.counted[key]
		if ok && last.generation == p.Generation && now.Sub(last.time) < recheck && (paused || last.err != nil) {
			return nil, last.err
		}
		ctx, cancel := context.WithTimeout(ctx, maxPendingCount)
		defer cancel()
		s, err := r.Pending.WouldStrand(ctx, p.Name, p.Generation, wave)
		if r.counted == nil {
			r.counted = map[audit.WaveKey]lastCount{}
		}
		r.counted[key] = lastCount{time: now, generation: p.Generation, err: err}
		if err != nil {
			ctrl.LoggerFrom(ctx).WithName("rollout").Info("Counting a wave's pending pods failed; retrying later", "policy", p.Name, "wave", wave, "err", err)
			return nil, err
		}
		return &s, nil
	}
}

// pendingCount counts the pending pods of a wave that the policy,
// enforced, would strand (RolloutController.Pending); paused says the wave
// is paused by its gate. It returns nil and no error when it did not count
// this time.
type pendingCount func(wave int, paused bool) (*audit.Stranded, error)

type rolloutEvent struct {
	kind, reason, note string
}

// restart returns the rollout status for the policy's spec: a copy of the
// status when it was computed for this generation, otherwise a new one
// whose waves keep the Enforced phase (and times) of the waves of the
// same name. The last action is kept either way. A Paused status without
// a pauseReason (the API refuses one now, but one may be stored) is
// paused by request: it waits for a person.
func restart(p *schedv1alpha1.SchedulingPolicy) *schedv1alpha1.RolloutStatus {
	old := p.Status.Rollout
	if old != nil && old.ObservedGeneration == p.Generation && len(old.Waves) == len(p.Spec.Rollout.Waves) {
		st := old.DeepCopy()
		if st.Phase == schedv1alpha1.RolloutPaused && st.PauseReason == "" {
			st.PauseReason = schedv1alpha1.PauseByRequest
		}
		return st
	}
	st := &schedv1alpha1.RolloutStatus{ObservedGeneration: p.Generation, Phase: schedv1alpha1.RolloutProgressing}
	if old != nil {
		st.LastAction = old.LastAction.DeepCopy()
		if old.Phase == schedv1alpha1.RolloutAborted {
			st.Phase, st.Message = old.Phase, old.Message // an aborted rollout stays aborted until resumed
		}
	}
	for _, w := range p.Spec.Rollout.Waves {
		ws := schedv1alpha1.WaveStatus{Name: w.Name, Phase: schedv1alpha1.WavePending}
		if old != nil {
			if i := slices.IndexFunc(old.Waves, func(o schedv1alpha1.WaveStatus) bool { return o.Name == w.Name }); i >= 0 &&
				old.Waves[i].Phase == schedv1alpha1.WaveEnforced {
				ws = old.Waves[i]
			}
		}
		st.Waves = append(st.Waves, ws)
	}
	return st
}

// current is the index of the first wave that is not Enforced, or
// len(waves).
func current(st *schedv1alpha1.RolloutStatus) int {
	for i, w := range st.Waves {
		if w.Phase != schedv1alpha1.WaveEnforced {
			return i
		}
	}
	return len(st.Waves)
}

// setPhase sets the rollout's phase, with its pause reason (empty unless
// Paused) and message.
func setPhase(st *schedv1alpha1.RolloutStatus, phase schedv1alpha1.RolloutPhase, reason schedv1alpha1.RolloutPauseReason, message string) {
	st.Phase, st.PauseReason, st.Message = phase, reason, message
}

// act applies a person's action, and records it as the last action.
func act(st *schedv1alpha1.RolloutStatus, req actionRequest, now metav1.Time) []rolloutEvent {
	events, applied := apply(st, req.action, now)
	outcome := schedv1alpha1.ActionNoOp
	if applied {
		outcome = schedv1alpha1.ActionApplied
	} else {
		events = []rolloutEvent{{corev1.EventTypeNormal, ReasonRolloutAction, fmt.Sprintf("%s: nothing to do in phase %s", req.action, st.Phase)}}
	}
	st.LastAction = &schedv1alpha1.RolloutActionRecord{ID: req.value, Action: req.action, Outcome: outcome, Time: now}
	return events
}

// apply changes the rollout as the action asks, and says whether it did.
func apply(st *schedv1alpha1.RolloutStatus, action string, now metav1.Time) ([]rolloutEvent, bool) {
	i := current(st)
	note := func(format string, args ...any) ([]rolloutEvent, bool) {
		return []rolloutEvent{{corev1.EventTypeNormal, ReasonRolloutAction, fmt.Sprintf(format, args...)}}, true
	}
	switch action {
	case ActionPause:
		if st.Phase == schedv1alpha1.RolloutProgressing && i < len(st.Waves) {
			setPhase(st, schedv1alpha1.RolloutPaused, schedv1alpha1.PauseByRequest, fmt.Sprintf("paused by request at wave %s", st.Waves[i].Name))
			st.Waves[i].Phase = schedv1alpha1.WavePaused
			return note("rollout paused at wave %s (annotation)", st.Waves[i].Name)
		}
	case ActionResume:
		if st.Phase == schedv1alpha1.RolloutPaused || st.Phase == schedv1alpha1.RolloutAborted {
			setPhase(st, schedv1alpha1.RolloutProgressing, "", "")
			if i < len(st.Waves) {
				// A new soak, with the counts of the new one only.
				st.Waves[i] = schedv1alpha1.WaveStatus{Name: st.Waves[i].Name, Phase: schedv1alpha1.WavePending}
			}
			return note("rollout resumed (annotation): wave %s soaks again", waveName(st, i))
		}
	case ActionPromote:
		if i < len(st.Waves) && st.Phase != schedv1alpha1.RolloutAborted {
			promote(st, i, now)
			setPhase(st, schedv1alpha1.RolloutProgressing, "", "")
			return note("wave %s promoted to Enforce (annotation), with %d pod(s) it would have rejected", st.Waves[i].Name, st.Waves[i].WouldReject)
		}
	case ActionAbort:
		if st.Phase != schedv1alpha1.RolloutAborted {
			var enforced []string
			for j, w := range st.Waves {
				if w.Phase == schedv1alpha1.WaveEnforced {
					enforced = append(enforced, w.Name)
				}
				// Back to where the rollout started: no wave enforced,
				// none soaking.
				st.Waves[j] = schedv1alpha1.WaveStatus{Name: w.Name, Phase: schedv1alpha1.WavePending}
			}
			was := "no wave was enforced"
			if len(enforced) > 0 {
				was = "enforced before: " + strings.Join(enforced, ", ")
			}
			setPhase(st, schedv1alpha1.RolloutAborted, "", truncate(fmt.Sprintf("aborted by request: every wave is audited (%s); resume starts again from wave %s", was, waveName(st, 0))))
			return []rolloutEvent{{corev1.EventTypeWarning, ReasonRolloutAction, fmt.Sprintf("rollout aborted (annotation): every wave is audited again (%s)", was)}}, true
		}
	}
	return nil, false
}

func waveName(st *schedv1alpha1.RolloutStatus, i int) string {
	if i < len(st.Waves) {
		return st.Waves[i].Name
	}
	return "(none)"
}

func promote(st *schedv1alpha1.RolloutStatus, i int, now metav1.Time) {
	st.Waves[i].Phase = schedv1alpha1.WaveEnforced
	st.Waves[i].PromotedTime = &now
}

// addEvidence adds the evidence collected since the last step to the
// waves that soak (or are paused on it).
func addEvidence(p *schedv1alpha1.SchedulingPolicy, st *schedv1alpha1.RolloutStatus, evidence map[audit.WaveKey]*audit.Delta) {
	for k, d := range evidence {
		if k.Policy != p.Name || d.Generation != p.Generation || k.Wave >= len(st.Waves) {
			continue
		}
		w := &st.Waves[k.Wave]
		if w.Phase != schedv1alpha1.WaveSoaking && w.Phase != schedv1alpha1.WavePaused {
			continue
		}
		w.Evaluated += d.Evaluated
		w.WouldReject += d.WouldReject
		var pods []string
		for _, v := range d.Violations {
			pods = append(pods, v.Pod)
		}
		w.LastViolations = append(pods, w.LastViolations...)
		if len(w.LastViolations) > schedv1alpha1.MaxAuditViolations {
			w.LastViolations = w.LastViolations[:schedv1alpha1.MaxAuditViolations]
		}
	}
}

// advance starts, promotes or pauses the current wave by the clock and
// the evidence: the pods bound during the soak and, when the soak is over,
// the pending ones (pending, when not nil). A wave paused by its gate is
// promoted when its evidence no longer exceeds the gate: when its pending
// pods (counted again every PendingRecheck) no longer strand.
func advance(p *schedv1alpha1.SchedulingPolicy, st *schedv1alpha1.RolloutStatus, now metav1.Time, pending pendingCount) []rolloutEvent {
	var out []rolloutEvent
	if st.Phase == schedv1alpha1.RolloutPaused && st.PauseReason == schedv1alpha1.PauseGateExceeded {
		i := current(st)
		if i == len(st.Waves) || st.Waves[i].Phase != schedv1alpha1.WavePaused {
			return nil
		}
		w, spec := &st.Waves[i], &p.Spec.Rollout.Waves[i]
		counted, err := countPending(w, i, pending, true)
		if err != nil || !counted {
			return nil
		}
		if w.WouldReject+w.PendingWouldReject > spec.Gate() {
			st.Message = gateMessage(w, spec.Gate())
			return nil
		}
		promote(st, i, now)
		setPhase(st, schedv1alpha1.RolloutProgressing, "", "")
		out = append(out, rolloutEvent{corev1.EventTypeNormal, ReasonWavePromoted, fmt.Sprintf("wave %s promoted to Enforce: its evidence cleared, %d pod(s) rejected during the soak and %d pending pod(s) it would strand now (at most %d allowed)",
			w.Name, w.WouldReject, w.PendingWouldReject, spec.Gate())})
	}
	if st.Phase != schedv1alpha1.RolloutProgressing {
		return out
	}
	for {
		i := current(st)
		if i == len(st.Waves) {
			setPhase(st, schedv1alpha1.RolloutCompleted, "", "")
			return append(out, rolloutEvent{corev1.EventTypeNormal, ReasonRolloutCompleted, "rollout completed: the policy is enforced in every wave"})
		}
		w, spec := &st.Waves[i], &p.Spec.Rollout.Waves[i]
		switch w.Phase {
		case schedv1alpha1.WavePending:
			w.Phase, w.StartTime = schedv1alpha1.WaveSoaking, &now
			w.Evaluated, w.WouldReject, w.LastViolations = 0, 0, nil
			w.PendingWouldReject, w.PendingViolations = 0, nil
			return append(out, rolloutEvent{corev1.EventTypeNormal, ReasonWaveStarted, fmt.Sprintf("wave %s soaks in Audit for %s", w.Name, spec.Soak.Duration)})
		case schedv1alpha1.WaveSoaking:
			if now.Time.Before(w.StartTime.Add(spec.Soak.Duration)) {
				return out
			}
			if _, err := countPending(w, i, pending, false); err != nil {
				// Decided at a later step, when the count ends.
				st.Message = truncate(fmt.Sprintf("wave %s: the soak is over; counting its pending pods: %v", w.Name, err))
				return out
			}
			st.Message = ""
			limit := spec.Gate()
			if w.WouldReject+w.PendingWouldReject > limit {
				w.Phase = schedv1alpha1.WavePaused
				setPhase(st, schedv1alpha1.RolloutPaused, schedv1alpha1.PauseGateExceeded, gateMessage(w, limit))
				return append(out, rolloutEvent{corev1.EventTypeWarning, ReasonWavePaused, st.Message})
			}
			promote(st, i, now)
			out = append(out, rolloutEvent{corev1.EventTypeNormal, ReasonWavePromoted, fmt.Sprintf("wave %s promoted to Enforce: %d pod(s) evaluated during the soak, %d would have been rejected, %d pending it would strand (at most %d allowed)",
				w.Name, w.Evaluated, w.WouldReject, w.PendingWouldReject, limit)})
		default:
			return out
		}
	}
}

// countPending counts the wave's pending pods into its status, and says
// whether it did.
func countPending(w *schedv1alpha1.WaveStatus, wave int, pending pendingCount, paused bool) (bool, error) {
	if pending == nil {
		return false, nil
	}
	s, err := pending(wave, paused)
	if err != nil || s == nil {
		return false, err
	}
	w.PendingWouldReject, w.PendingViolations = s.Count, s.Pods
	return true, nil
}

// gateMessage says why a wave is paused by its gate.
func gateMessage(w *schedv1alpha1.WaveStatus, limit int64) string {
	msg := fmt.Sprintf("wave %s: %d pod(s) of its namespaces would have been held or kept off their node during the soak", w.Name, w.WouldReject)
	if w.PendingWouldReject > 0 {
		msg += fmt.Sprintf(" and %d pending pod(s) would be held or left with no node", w.PendingWouldReject)
	}
	msg += fmt.Sprintf(" (at most %d allowed)", limit)
	if len(w.LastViolations) > 0 {
		msg += ", the last: " + strings.Join(w.LastViolations, ", ")
	}
	if len(w.PendingViolations) > 0 {
		msg += "; pending: " + strings.Join(w.PendingViolations, ", ")
	}
	return truncate(msg)
}

// truncate bounds a status message to what the API accepts.
func truncate(msg string) string {
	return engine.Truncate(msg, schedv1alpha1.MaxRolloutMessage)
}
