package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	case schedv1alpha1.RolloutActionPause, schedv1alpha1.RolloutActionResume, schedv1alpha1.RolloutActionPromote, schedv1alpha1.RolloutActionAbort:
	default:
		return actionRequest{}, fmt.Errorf("unknown action %q (pause, resume, promote or abort)", action)
	}
	if identified && !validActionID(id) {
		return actionRequest{}, fmt.Errorf("the id %q of %q is not 1 to %d letters, digits, '.', '_' or '-'", id, action, schedv1alpha1.MaxRolloutActionID)
	}
	return actionRequest{value: value, action: action, id: id}, nil
}

func validActionID(id string) bool {
	if id == "" || len(id) > schedv1alpha1.MaxRolloutActionID {
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

// RolloutController runs the rollouts of spec.rollout: the one writer of
// status.rollout. It is a reconciler of policies: a policy's rollout is
// looked at on the policy's events (a spec change, an action's
// annotation, a status write), when the evidence of its waves grows
// (audit.Log.Waves signals it) and at its next deadline (RequeueAfter:
// the end of the current wave's soak, the next count of its pending pods,
// the next write of evidence held back); no policy is looked at on a
// timer. It runs on the leader, where the scheduler binds pods and so
// collects the evidence, and keeps time by the leader's clock; everything
// it decides is in status, so a new leader continues from there.
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
// status written. The evidence is taken from the cache (audit.Log.Waves)
// only once a write holding it succeeded. A step that would only add
// evidence to the waves' counts is held back until WriteInterval has
// passed since the policy's last write: at most one such write per policy
// per WriteInterval.
type RolloutController struct {
	Client client.Client
	// Reader, when set, confirms that a policy missing from the cache is
	// gone before what is kept of it is dropped (the manager's API
	// reader).
	Reader   client.Reader
	Log      *audit.Log
	Recorder events.EventRecorder
	// WriteInterval is the least time between two writes of a policy's
	// status.rollout that only add evidence (DefaultAuditStatusInterval
	// when 0); decisions are written at once.
	WriteInterval time.Duration
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

	mu sync.Mutex
	// memory is what the controller keeps of each policy with a rollout
	// between its steps. Key: policy name. Bound: the policies with a
	// rollout; an entry leaves when its policy is deleted or loses its
	// rollout, and a count when its wave no longer soaks nor is paused.
	// Written by Reconcile only (one step of a policy at a time).
	memory map[string]*rolloutMemory
}

// rolloutMemory is what a RolloutController keeps of one policy: when its
// status was last written, and the last count of the pending pods of each
// wave (by index) that soaks or is paused.
type rolloutMemory struct {
	lastWrite time.Time
	counted   map[int]lastCount
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
// with no node (PendingPods answers from the scheduler's
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

// SetupWithManager registers the controller, which runs on the leader:
// on the policies' events, and on the policies whose waves gained
// evidence; and its flush of the evidence when the leader stops.
func (r *RolloutController) SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&schedv1alpha1.SchedulingPolicy{}).
		WatchesRawSource(evidenceSource(&r.Log.Waves)).
		Named("schedulingpolicy-rollout").
		Complete(r); err != nil {
		return err
	}
	return mgr.Add(flushOnStop(r.Flush))
}

// Reconcile advances one policy's rollout: one step, and the time of the
// next one.
func (r *RolloutController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.reconcile(ctx, req.Name, false)
}

// Flush steps every policy whose waves have evidence not written yet, and
// writes it whenever the last write was: when the leader stops.
func (r *RolloutController) Flush(ctx context.Context) {
	for _, name := range r.Log.Waves.Policies() {
		if _, err := r.reconcile(ctx, name, true); err != nil {
			ctrl.LoggerFrom(ctx).WithName("rollout").Info("Writing a rollout's evidence failed", "policy", name, "err", err)
		}
	}
}

// reconcile steps the rollout of the policy name; force writes its
// evidence even within WriteInterval of the last write.
func (r *RolloutController) reconcile(ctx context.Context, name string, force bool) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithName("rollout")
	p, err := livePolicy(ctx, r.Client, r.Reader, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p == nil || p.Spec.Rollout == nil {
		r.forget(name)
		return ctrl.Result{}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memory == nil {
		r.memory = map[string]*rolloutMemory{}
	}
	mem := r.memory[p.Name]
	if mem == nil {
		mem = &rolloutMemory{}
		r.memory[p.Name] = mem
	}
	st, next, err := r.step(ctx, p, mem, force)
	if err != nil {
		if apierrors.IsConflict(err) {
			// A newer version exists (often this controller's own last
			// write, not yet in the cache): its event brings the policy
			// back; nothing was written.
			log.V(1).Info("SchedulingPolicy changed while its rollout was written; looking again", "policy", p.Name)
			return ctrl.Result{RequeueAfter: registryLag}, nil
		}
		return ctrl.Result{}, err
	}
	// The counts of the waves that no longer soak nor are paused go.
	for i := range mem.counted {
		if i >= len(st.Waves) || (st.Waves[i].Phase != schedv1alpha1.WaveSoaking && st.Waves[i].Phase != schedv1alpha1.WavePaused) {
			delete(mem.counted, i)
		}
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// forget drops what the controller keeps of a policy, and its evidence:
// the policy is gone, or has no rollout.
func (r *RolloutController) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.memory, name)
	r.Log.Waves.Drop(name)
}

func (r *RolloutController) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *RolloutController) writeInterval() time.Duration {
	if r.WriteInterval > 0 {
		return r.WriteInterval
	}
	return DefaultAuditStatusInterval
}

func (r *RolloutController) pendingRecheck() time.Duration {
	if r.PendingRecheck > 0 {
		return r.PendingRecheck
	}
	return DefaultPendingRecheck
}

// step advances one policy's rollout, writes its status when it changed
// (or, when only evidence was added, once WriteInterval has passed since
// the last write, unless force), and returns the status it stands on and how soon to
// step again (0: on events only). An error means that the status was not
// written, or that the removal of the annotation after the write failed
// (retried at the next step, which removes it only).
func (r *RolloutController) step(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *rolloutMemory, force bool) (*schedv1alpha1.RolloutStatus, time.Duration, error) {
	log := ctrl.LoggerFrom(ctx).WithName("rollout")
	now := metav1.NewTime(r.now())
	value, requested := p.Annotations[schedv1alpha1.RolloutActionAnnotation]
	var req actionRequest
	var invalid error
	if requested {
		req, invalid = parseAction(value)
		if invalid == nil && req.id == "" {
			var err error
			if req, err = r.identify(ctx, p, req); err != nil {
				return nil, 0, err
			}
			value = req.value
		}
	}
	evidence := r.Log.Waves.Unwritten(p.Name)
	ahead := false
	for wave, d := range evidence {
		if d.Generation > p.Generation {
			// The scheduler saw a newer spec than this cache yet: kept
			// for the step of that generation.
			delete(evidence, wave)
			ahead = true
		}
	}
	st := restart(p)
	// unchanged is the status as it would be with nothing decided: the
	// stored one with the new evidence added.
	unchanged := st.DeepCopy()
	addEvidence(p, unchanged, evidence)
	restarted := !apiequality.Semantic.DeepEqual(p.Status.Rollout, st)
	var decided []rolloutEvent
	if requested && invalid == nil {
		if st.LastAction != nil && st.LastAction.ID == req.value {
			log.V(1).Info("Rollout action already applied; removing its annotation", "policy", p.Name, "action", req.value)
		} else {
			decided = append(decided, act(st, req, now)...)
		}
	}
	addEvidence(p, st, evidence)
	decided = append(decided, advance(p, st, now, r.pendingCount(ctx, p, mem, now.Time))...)
	next := r.next(p, st, mem, now.Time)
	if ahead {
		next = shortest(next, registryLag)
	}
	if !apiequality.Semantic.DeepEqual(p.Status.Rollout, st) {
		if !force && !requested && !restarted && apiequality.Semantic.DeepEqual(unchanged, st) {
			// Only evidence was added: written once WriteInterval has
			// passed since the last write.
			if wait := untilNextWrite(mem.lastWrite, r.writeInterval(), now.Time); wait > 0 {
				return p.Status.Rollout, shortest(next, wait), nil
			}
		}
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		p.Status.Rollout = st
		if err := r.Client.Status().Patch(ctx, p, patch); err != nil {
			return nil, 0, err
		}
		mem.lastWrite = now.Time
	}
	// Written (or nothing of it applies to a wave that soaks): the
	// evidence leaves the cache.
	if r.Log.Waves.Written(p.Name, evidence) {
		next = shortest(next, r.writeInterval())
	}
	r.record(ctx, p, decided)
	if requested {
		if err := r.removeAction(ctx, p, value); err != nil {
			// Retried with the queue's backoff; the next step finds the
			// action in lastAction and only removes it.
			log.Info("Removing a rollout action's annotation failed; retrying at the next step", "policy", p.Name, "action", value, "err", err)
			return st, next, fmt.Errorf("removing the rollout action %q: %w", value, err)
		} else if invalid != nil {
			// Said once the request is gone, not at every step it stays.
			r.record(ctx, p, []rolloutEvent{{corev1.EventTypeWarning, ReasonRolloutAction,
				fmt.Sprintf("%s %q removed, not applied: %v", schedv1alpha1.RolloutActionAnnotation, value, invalid)}})
		}
	}
	return st, next, nil
}

// next is how soon a rollout in status st has a step due by the clock: the
// end of the current wave's soak, or the next count of its pending pods
// (a soak over whose count failed, a wave paused by its gate); 0 when
// only an event moves it.
func (r *RolloutController) next(p *schedv1alpha1.SchedulingPolicy, st *schedv1alpha1.RolloutStatus, mem *rolloutMemory, now time.Time) time.Duration {
	i := current(st)
	if i == len(st.Waves) || i >= len(p.Spec.Rollout.Waves) {
		return 0
	}
	w := &st.Waves[i]
	recount := func() time.Duration {
		if r.Pending == nil {
			return 0
		}
		last, ok := mem.counted[i]
		if !ok || last.generation != p.Generation {
			return time.Second
		}
		return max(last.time.Add(r.pendingRecheck()).Sub(now), time.Second)
	}
	switch {
	case st.Phase == schedv1alpha1.RolloutProgressing && w.Phase == schedv1alpha1.WaveSoaking && w.StartTime != nil:
		if end := w.StartTime.Add(p.Spec.Rollout.Waves[i].Soak.Duration); end.After(now) {
			return end.Sub(now)
		}
		return recount()
	case st.Phase == schedv1alpha1.RolloutPaused && st.PauseReason == schedv1alpha1.PauseGateExceeded:
		return recount()
	}
	return 0
}

// shortest is the sooner of two delays, 0 meaning none.
func shortest(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// identify gives a bare action of the annotation its identity,
// "<action>/rv-<resourceVersion>", in a write conditional on the version
// read: the action is applied by a later write, which finds the same
// identity after any failure.
func (r *RolloutController) identify(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, req actionRequest) (actionRequest, error) {
	id := "rv-" + p.ResourceVersion
	if !validActionID(id) {
		return req, fmt.Errorf("the resourceVersion %q makes no id for %s %q", p.ResourceVersion, schedv1alpha1.RolloutActionAnnotation, req.value)
	}
	req.id, req.value = id, schedv1alpha1.RolloutActionRequest(req.action, id)
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	p.Annotations[schedv1alpha1.RolloutActionAnnotation] = req.value
	if err := r.Client.Patch(ctx, p, patch); err != nil {
		return req, fmt.Errorf("giving %s %q its id: %w", schedv1alpha1.RolloutActionAnnotation, req.action, err)
	}
	return req, nil
}

// removeAction removes the annotation if it still has the value the step
// acted on: a request written meanwhile stays for the next step.
func (r *RolloutController) removeAction(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, value string) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(schedv1alpha1.RolloutActionAnnotation, "~", "~0"), "/", "~1")
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
func (r *RolloutController) pendingCount(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *rolloutMemory, now time.Time) pendingCount {
	if r.Pending == nil {
		return nil
	}
	return func(wave int, paused bool) (*audit.Stranded, error) {
		last, ok := mem.counted[wave]
		if ok && last.generation == p.Generation && now.Sub(last.time) < r.pendingRecheck() && (paused || last.err != nil) {
			return nil, last.err
		}
		ctx, cancel := context.WithTimeout(ctx, maxPendingCount)
		defer cancel()
		s, err := r.Pending.WouldStrand(ctx, p.Name, p.Generation, wave)
		if mem.counted == nil {
			mem.counted = map[int]lastCount{}
		}
		mem.counted[wave] = lastCount{time: now, generation: p.Generation, err: err}
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
	case schedv1alpha1.RolloutActionPause:
		if st.Phase == schedv1alpha1.RolloutProgressing && i < len(st.Waves) {
			setPhase(st, schedv1alpha1.RolloutPaused, schedv1alpha1.PauseByRequest, fmt.Sprintf("paused by request at wave %s", st.Waves[i].Name))
			st.Waves[i].Phase = schedv1alpha1.WavePaused
			return note("rollout paused at wave %s (annotation)", st.Waves[i].Name)
		}
	case schedv1alpha1.RolloutActionResume:
		if st.Phase == schedv1alpha1.RolloutPaused || st.Phase == schedv1alpha1.RolloutAborted {
			setPhase(st, schedv1alpha1.RolloutProgressing, "", "")
			if i < len(st.Waves) {
				// A new soak, with the counts of the new one only.
				st.Waves[i] = schedv1alpha1.WaveStatus{Name: st.Waves[i].Name, Phase: schedv1alpha1.WavePending}
			}
			return note("rollout resumed (annotation): wave %s soaks again", waveName(st, i))
		}
	case schedv1alpha1.RolloutActionPromote:
		if i < len(st.Waves) && st.Phase != schedv1alpha1.RolloutAborted {
			promote(st, i, now)
			setPhase(st, schedv1alpha1.RolloutProgressing, "", "")
			return note("wave %s promoted to Enforce (annotation), with %d pod(s) it would have rejected", st.Waves[i].Name, st.Waves[i].WouldReject)
		}
	case schedv1alpha1.RolloutActionAbort:
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

// addEvidence adds a policy's evidence not yet written, by wave, to the
// waves that soak (or are paused on it); the evidence of other waves, or
// of another generation, is not theirs.
func addEvidence(p *schedv1alpha1.SchedulingPolicy, st *schedv1alpha1.RolloutStatus, evidence map[int]audit.Delta) {
	for _, wave := range slices.Sorted(maps.Keys(evidence)) {
		d := evidence[wave]
		if d.Generation != p.Generation || wave >= len(st.Waves) {
			continue
		}
		w := &st.Waves[wave]
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
