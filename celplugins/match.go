package celplugins

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/celsched/celsched/engine"
)

// Match is what the policies in force make of a pod: the pod converted for
// the engine, and the policies that apply to it sorted by what they do. It
// depends on nothing but its key (matchKey: the pod's version, its
// namespace's version, the policy snapshot, its group's value when a
// policy reads it) and the versions of what its
// pod's params bindings read of the params store (params: the param kinds,
// and the object named or the namespace's objects that each paramRef
// looked up), and is never written after it is made, so that the pod's
// preEnqueue rules (Runtime.Queued), its scheduling cycles and the queueing
// hints share one conversion and one match (Inputs.Match).
type Match struct {
	Pod *engine.PodInput
	// Filters and Scores are the matching policies with filters and with
	// scores, in name order (Audit ones included).
	Filters []*engine.CompiledPolicy
	Scores  []*engine.CompiledPolicy
	// FilterList and ScoreList are Filters and Scores as the snapshot's
	// interned lists (engine.PolicyList): their outcome on a node may be
	// kept with the node.
	FilterList, ScoreList *engine.PolicyList
	// Preemption are the matching policies with victim rules, in name
	// order (Audit ones included): whom the pod may preempt
	// (celplugins/preemption).
	Preemption []*engine.CompiledPolicy
	// Importance are the enforced matching policies with
	// spec.preemption.importance, in name order: how much the pod is
	// worth keeping as a candidate victim (celplugins/preemption).
	Importance []*engine.CompiledPolicy
	// Audit are the matching Audit policies, reported on when the pod is
	// bound (ReportAudit).
	Audit []*engine.CompiledPolicy
	// Rejection, when set, rejects the pod on every node: the match
	// decision (Error) of an enforced policy that does not compile or whose
	// match condition failed, with failurePolicy Fail.
	Rejection *engine.Decision

	// matched are the match results of the policies that apply, and
	// ignored those skipped under failurePolicy Ignore: each cycle records
	// them (Reporter.Matched).
	matched []engine.MatchResult
	ignored []engine.MatchResult
	// wouldReject are the match decisions of Audit policies that would
	// have rejected the pod, for ReportAudit.
	wouldReject []engine.Decision

	key matchKey
	// params are the versions of the parts of the params store that the
	// bindings read (none without a store, or without a parameterized
	// policy that selects the pod): a params object written elsewhere
	// leaves the Match in place.
	params paramsReads
}

// ByPolicy calls f with each policy that applies to the pod and the
// results of its match (engine.ByPolicy), until f returns false.
func (m *Match) ByPolicy(f func(p *engine.CompiledPolicy, results []engine.MatchResult) bool) {
	engine.ByPolicy(m.matched, f)
}

// matchKey is everything a Match depends on. A pod without a
// resourceVersion (a dry run's, a test's) has no key: its match is not
// kept.
type matchKey struct {
	uid             ktypes.UID
	resourceVersion string
	// namespace is the pod's namespace as the plugins saw it: its UID and
	// resourceVersion, empty when it was not known.
	nsUID             ktypes.UID
	nsResourceVersion string
	snapshot          *engine.Snapshot
	// group is the pod's group's value (engine.PodGroup.Key), empty when
	// no policy reads it.
	group string
}

// versionedParams is a params resolver whose answers change (the
// ParamsStore): resolve and namespace are Resolve and Namespace that
// record in reads the version of each part of the resolver they read,
// loaded before they read it, so that a Match knows when it is out of date
// (paramsReads.current).
type versionedParams interface {
	engine.ParamsResolver
	resolve(spec *engine.ParamSpec, pod *corev1.Pod, reads *paramsReads) ([]*engine.Params, error)
	namespace(spec *engine.ParamSpec, pod *corev1.Pod, reads *paramsReads) string
}

// recordingParams is the params resolver of a Match being made: the
// resolver's answers, with the versions of what they read recorded for the
// Match. Bound reads nothing a Match depends on (a bound copy is one per
// policy and params object version).
type recordingParams struct {
	versionedParams
	reads *paramsReads
}

func (r *recordingParams) Resolve(spec *engine.ParamSpec, pod *corev1.Pod) ([]*engine.Params, error) {
	return r.resolve(spec, pod, r.reads)
}

func (r *recordingParams) Namespace(spec *engine.ParamSpec, pod *corev1.Pod) string {
	return r.namespace(spec, pod, r.reads)
}

// matches are the last Match of each pod that was queued or had a
// scheduling cycle, so that its next cycle and the queueing hints of the
// events that may make it schedulable reuse it. Key: pod UID (the entry
// holds the full matchKey and the versions of the params it read, checked
// on every read). Bound: the pods that were queued and are neither bound
// nor deleted (the scheduling queue's pods, and those the preEnqueue rules
// hold), each holding its pod's converted value. Written by Runtime.Queued
// (when the queue adds a pod and a policy has preEnqueue rules) and by
// Prepare (a cycle's match), when the match is complete; entries leave
// when their pod is bound or deleted (Runtime.Attach's pod event handler).
// Queueing hints only read it.
type matches struct {
	byPod sync.Map // ktypes.UID -> *Match
}

// key returns the key a Match of the pod would have now, and false when
// the pod has no version to key it by.
func (in *Inputs) key(pod *corev1.Pod, ns *corev1.Namespace, snapshot *engine.Snapshot, group *engine.PodGroup) (matchKey, bool) {
	if pod.UID == "" || pod.ResourceVersion == "" {
		return matchKey{}, false
	}
	k := matchKey{uid: pod.UID, resourceVersion: pod.ResourceVersion, snapshot: snapshot, group: group.Key()}
	if ns != nil {
		k.nsUID, k.nsResourceVersion = ns.UID, ns.ResourceVersion
	}
	return k, true
}

// Match returns the pod's Match: the one kept from an earlier cycle when
// nothing it depends on changed, or a new one, evaluated under ctx and
// not kept. It only reads.
func (in *Inputs) Match(ctx context.Context, pod *corev1.Pod) (*Match, error) {
	m, _, err := in.match(ctx, pod, in.PodGroups)
	return m, err
}

// match is Match with the pod's group found by groups (the live state's,
// or a scheduling cycle's), and says whether the Match returned is new and
// may be kept (its key is complete and its evaluations ran to their end).
func (in *Inputs) match(ctx context.Context, pod *corev1.Pod, groups engine.PodGroupResolver) (*Match, bool, error) {
	// The key is read before anything the match reads, and the version of
	// each part of the params store before that part (paramsReads), so
	// that a change that lands meanwhile gives a later key or version than
	// the Match holds: a kept Match is never newer than its key and
	// versions say, only older (and then missed).
	ns, err := in.podNamespace(pod)
	if err != nil {
		return nil, false, err
	}
	snapshot := in.Policies.Snapshot()
	group := in.podGroup(snapshot, pod, groups)
	key, keyed := in.key(pod, ns, snapshot, group)
	if keyed {
		if v, ok := in.matches.byPod.Load(pod.UID); ok && v.(*Match).key == key && v.(*Match).params.current() {
			return v.(*Match), false, nil
		}
	}
	podIn, err := in.podInput(pod, ns, group)
	if err != nil {
		return nil, false, err
	}
	// The bindings made while matching record what they read; then the
	// Match's PodInput resolves as the Inputs do, recording nothing (it is
	// read concurrently once the Match is out).
	var reads paramsReads
	if versioned, ok := in.Params.(versionedParams); ok {
		podIn.Params = &recordingParams{versionedParams: versioned, reads: &reads}
	}
	m := newMatch(ctx, snapshot, podIn)
	podIn.Params = in.Params
	m.key, m.params = key, reads
	return m, keyed && ctx.Err() == nil, nil
}

// keep records a cycle's new Match for the pod's next cycle and hints.
func (in *Inputs) keep(m *Match) {
	in.matches.byPod.Store(m.key.uid, m)
}

// forgetPod drops a pod's kept Match: it was bound or deleted.
func (in *Inputs) forgetPod(uid ktypes.UID) {
	in.matches.byPod.Delete(uid)
}

// newMatch matches the snapshot's policies against a converted pod, under
// ctx. It records nothing, logs nothing and starts no timer.
func newMatch(ctx context.Context, snapshot *engine.Snapshot, podIn *engine.PodInput) *Match {
	m := &Match{Pod: podIn}
	matches := snapshot.Match(ctx, podIn, func(r engine.MatchResult) { m.ignored = append(m.ignored, r) })
	// The slice is the match's own (Snapshot.Match allocates it).
	m.matched = matches
	if len(matches) > 0 {
		// The policies with filters and with scores: one array for both.
		policies := make([]*engine.CompiledPolicy, 0, 2*len(matches))
		m.Filters, m.Scores = policies[:0:len(matches)], policies[len(matches):len(matches)]
	}
	for i := range matches {
		d := &matches[i].Decision
		p := d.Policy
		if !d.Enforced() {
			m.Audit = append(m.Audit, p)
		}
		switch {
		case d.Acts():
			if m.Rejection == nil {
				m.Rejection = d
			}
			continue
		case d.WouldAct():
			m.wouldReject = append(m.wouldReject, *d)
			continue
		}
		if p.HasFilters() {
			m.Filters = append(m.Filters, p)
		}
		if p.HasScores() {
			m.Scores = append(m.Scores, p)
		}
		if p.HasVictimRules() {
			m.Preemption = append(m.Preemption, p)
		}
		if p.HasImportance() && d.Enforced() {
			m.Importance = append(m.Importance, p)
		}
	}
	if len(m.Filters) > 0 {
		m.FilterList = snapshot.List(engine.PointFilter, m.Filters)
	}
	if len(m.Scores) > 0 {
		m.ScoreList = snapshot.List(engine.PointScore, m.Scores)
	}
	return m
}
