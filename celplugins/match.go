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
// namespace's version, the policy snapshot and the params objects' version)
// and is never written after it is made, so that the scheduling cycles of
// the pod and the queueing hints share one conversion and one match
// (Inputs.Match).
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
	// Audit are the matching Audit policies, reported on when the pod is
	// bound (ReportAudit).
	Audit []*engine.CompiledPolicy
	// Rejection, when set, rejects the pod on every node: the match
	// decision (Error) of an enforced policy that does not compile or whose
	// match condition failed, with failurePolicy Fail.
	Rejection *engine.Decision

	// matched are the decisions of the policies that apply, and ignored the
	// match results skipped under failurePolicy Ignore: each cycle records
	// them (Reporter.Matched).
	matched []engine.Decision
	ignored []engine.MatchResult
	// wouldReject are the match decisions of Audit policies that would
	// have rejected the pod, for ReportAudit.
	wouldReject []engine.Decision

	key matchKey
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
	// params is the params objects' version (ParamsVersion), 0 without a
	// params store.
	params uint64
}

// ParamsVersion is implemented by a params resolver whose answers can
// change (the ParamsStore): the version changes after every change of what
// Resolve, Namespace or KindError may answer, so that a Match made before
// it is not reused after.
type ParamsVersion interface {
	Version() uint64
}

// matches are the last Match of each pod that had a scheduling cycle, so
// that its next cycle and the queueing hints of the events that may make
// it schedulable reuse it. Key: pod UID (the entry holds the full
// matchKey, checked on every read). Bound: the pods that had a cycle and
// are neither bound nor deleted, the scheduling queue's unschedulable and
// backoff pods, each holding its pod's converted value. Written by Prepare
// (a cycle's match, when complete); entries leave when their pod is bound
// or deleted (Runtime.Attach's pod event handler). Queueing hints only
// read it.
type matches struct {
	byPod sync.Map // ktypes.UID -> *Match
}

// key returns the key a Match of the pod would have now, and false when
// the pod has no version to key it by.
func (in *Inputs) key(pod *corev1.Pod, ns *corev1.Namespace, snapshot *engine.Snapshot) (matchKey, bool) {
	if pod.UID == "" || pod.ResourceVersion == "" {
		return matchKey{}, false
	}
	k := matchKey{uid: pod.UID, resourceVersion: pod.ResourceVersion, snapshot: snapshot}
	if ns != nil {
		k.nsUID, k.nsResourceVersion = ns.UID, ns.ResourceVersion
	}
	if v, ok := in.Params.(ParamsVersion); ok {
		k.params = v.Version()
	}
	return k, true
}

// Match returns the pod's Match: the one kept from an earlier cycle when
// nothing it depends on changed, or a new one, evaluated under ctx and
// not kept. It only reads.
func (in *Inputs) Match(ctx context.Context, pod *corev1.Pod) (*Match, error) {
	m, _, err := in.match(ctx, pod)
	return m, err
}

// match is Match, and says whether the Match returned is new and may be
// kept (its key is complete and its evaluations ran to their end).
func (in *Inputs) match(ctx context.Context, pod *corev1.Pod) (*Match, bool, error) {
	// The key is read before anything the match reads, so that a change
	// that lands meanwhile gives a later key than the Match holds: a kept
	// Match is never newer than its key says, only older (and then missed).
	ns, err := in.podNamespace(pod)
	if err != nil {
		return nil, false, err
	}
	snapshot := in.Policies.Snapshot()
	key, keyed := in.key(pod, ns, snapshot)
	if keyed {
		if v, ok := in.matches.byPod.Load(pod.UID); ok && v.(*Match).key == key {
			return v.(*Match), false, nil
		}
	}
	podIn, err := in.podInput(pod, ns)
	if err != nil {
		return nil, false, err
	}
	m := newMatch(ctx, snapshot, podIn)
	m.key = key
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
	if len(matches) > 0 {
		m.matched = make([]engine.Decision, 0, len(matches))
		// The policies with filters and with scores: one array for both.
		policies := make([]*engine.CompiledPolicy, 0, 2*len(matches))
		m.Filters, m.Scores = policies[:0:len(matches)], policies[len(matches):len(matches)]
	}
	for i := range matches {
		d := matches[i].Decision
		p := d.Policy
		m.matched = append(m.matched, d)
		if !d.Enforced() {
			m.Audit = append(m.Audit, p)
		}
		switch {
		case d.Acts():
			if m.Rejection == nil {
				m.Rejection = &d
			}
			continue
		case d.WouldAct():
			m.wouldReject = append(m.wouldReject, d)
			continue
		}
		if p.HasFilters() {
			m.Filters = append(m.Filters, p)
		}
		if p.HasScores() {
			m.Scores = append(m.Scores, p)
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
