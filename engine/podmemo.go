package engine

import (
	"strconv"
	"strings"
)

// This file is the memo of the expressions evaluated without a node: match
// conditions, preEnqueue rules and their messages, and the variables they
// read. Their result is a function of what they read of the pod (and its
// namespace and group) and of the params object, so, like a filter's per
// node version (memo.go), each is evaluated once per distinct input: the
// replicas of a workload share one result, and a pod whose conditions and
// rules are all remembered is not converted to a CEL value at all.

// podMemo keeps an expression's results per pod key (what spec names of
// the pod: PodInput.key) and params object, in memoPlaces: one result,
// then a bucket of memoWays, then memoBuckets buckets, the oldest of a
// bucket replaced first. Reads take no lock and allocate nothing. The
// expression owns it: a new policy version is new expressions, with
// memos of their own.
type podMemo struct {
	spec   *podKeySpec
	places memoPlaces
	order  memoOrder
}

// newPodMemo returns the memo of an expression with these references, or
// nil when its results are not kept: when it reads what a pod key does not
// hold (node, nodeInfo, the whole pod, its status), or the pod's name,
// which would key a result no other pod reads. vars is what the policy's
// variables that read no node read of the pod, for an expression that
// reads variables. The spec is shared with every expression of the
// environment that reads the same (numbers.podSpec), so that a pod's key
// for it is computed once, however many policies read it.
func newPodMemo(numbers *memoNumbers, refs *references, vars *podKeySpec) *podMemo {
	if refs.reads&^(readsPod|readsNamespace|readsPodGroup|readsParams) != 0 || refs.memo() == notMemoized {
		return nil
	}
	var spec podKeySpec
	spec.add(refs)
	if refs.readsVariables {
		spec.merge(vars)
	}
	if spec.reads&(podReadsUnkeyable|podNameRead) != 0 {
		return nil
	}
	return &podMemo{spec: numbers.podSpec(spec)}
}

// id returns what e's result depends on for the pod: its key and the
// params object's; false when the pod has no key (a PodInput not made by
// a Converter).
func (m *podMemo) id(p *CompiledPolicy, pod *PodInput, e *expr) (memoID, bool) {
	key, ok := pod.key(m.spec)
	if !ok {
		return memoID{}, false
	}
	id := memoID{key: key}
	if e.readsParams && p.params != nil {
		id.params = p.params.id
	}
	return id, true
}

// load returns e's result for the pod, or nil.
func (m *podMemo) load(p *CompiledPolicy, pod *PodInput, e *expr) *memoResult {
	if m == nil {
		return nil
	}
	id, ok := m.id(p, pod, e)
	if !ok {
		return nil
	}
	return m.places.load(e, id)
}

// podSpecs is how many distinct key specs memoNumbers.podSpec keeps.
const podSpecs = 4096

// podSpec returns the environment's spec equal to s (the first one seen,
// kept while it is among the podSpecs most recently asked for). A spec
// that drops out stays right for the expressions that hold it; a later
// equal one is only no longer the same, and keys its own.
func (n *memoNumbers) podSpec(s podKeySpec) *podKeySpec {
	form := s.form()
	if v, ok := n.specs.Get(form); ok {
		return v.(*podKeySpec)
	}
	kept := &s
	n.specs.Add(form, kept)
	return kept
}

// form is the spec as a string, equal for equal specs.
func (s *podKeySpec) form() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(uint64(s.reads), 16))
	if s.labelsWhole {
		b.WriteString(" *")
	}
	for _, k := range s.labels {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(k))
	}
	return b.String()
}
