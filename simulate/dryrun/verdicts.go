package dryrun

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
)

// Verdicts are what the CEL plugins decided of a pod on every node, in
// the one evaluator's run that gave the pod's verdict (a
// celplugins.Record): each enforced filter policy's decision and rules on
// every node (a node a built-in plugin refused too), and the score rules'
// values on the nodes scored. `celsched analyze` reads them to name
// policies and rules.
type Verdicts struct {
	// Result is the framework's verdict on the pod once released (the
	// run's: Evaluator.RecordReleased).
	Result *verdict.Result
	// Nodes are the cluster's nodes, in name order; the slices below are
	// indexed alike.
	Nodes []*corev1.Node
	// Rejection is the match decision of an enforced policy that rejects
	// the pod on every node (it does not compile, or its match condition
	// failed under failurePolicy Fail).
	Rejection *engine.Decision
	// Filters are the enforced policies with filters that apply to the
	// pod (a parameterized policy once per params object), in name order.
	Filters []PolicyVerdicts
	// Scores are the policies with scores that apply to the pod.
	Scores []ScoreValues
}

// PolicyVerdicts are one policy's filters on every node.
type PolicyVerdicts struct {
	Policy string
	// Params names the params object of a parameterized policy.
	Params string
	// Pass says, per node, whether the policy passes it.
	Pass []bool
	// Reason is, per node it rejects, the decision's message.
	Reason []string
	// Rules are, per rule, whether it is true on each node: 1 true, 0
	// false, -1 an error.
	Rules map[string][]int8
}

// ScoreValues are one policy's score rules on the nodes scored.
type ScoreValues struct {
	Policy string
	// Rules are, per rule, its raw value on each node (NaN: an error, or
	// a node not scored).
	Rules map[string][]float64
}

// Verdicts runs the pod's cycle once released (past any PreEnqueue hold),
// recording what the CEL plugins decide, and arranges the record by
// policy.
func (s *Scheduler) Verdicts(ctx context.Context, pod *corev1.Pod) (*Verdicts, error) {
	rec := &celplugins.Record{Rules: true}
	res, err := s.RecordReleased(ctx, pod, rec)
	if err != nil {
		return nil, err
	}
	infos := s.cluster.NodeInfos()
	v := &Verdicts{Result: res, Rejection: rec.Rejection(), Nodes: make([]*corev1.Node, len(infos))}
	if v.Rejection != nil && !v.Rejection.Acts() {
		v.Rejection = nil
	}
	filters := map[*engine.CompiledPolicy]int{} // index in v.Filters
	scores := map[*engine.CompiledPolicy]int{}  // index in v.Scores
	for n, info := range infos {
		node := info.Node()
		v.Nodes[n] = node
		recorded := rec.Filters(node.Name)
		for k := range recorded {
			o := &recorded[k]
			p := o.Decision.Policy
			if !p.Enforced() {
				continue
			}
			i, ok := filters[p]
			if !ok {
				i = len(v.Filters)
				filters[p] = i
				pv := PolicyVerdicts{Policy: p.Name, Pass: make([]bool, len(infos)), Reason: make([]string, len(infos)), Rules: map[string][]int8{}}
				if params := p.Params(); params != nil {
					pv.Params = params.String()
				}
				for _, name := range p.FilterRuleNames() {
					pv.Rules[name] = make([]int8, len(infos))
				}
				v.Filters = append(v.Filters, pv)
			}
			pv := &v.Filters[i]
			pv.Pass[n] = !o.Refuses()
			if !pv.Pass[n] {
				pv.Reason[n] = o.Decision.String()
			}
			for _, rv := range o.Rules {
				switch {
				case rv.Err != nil:
					pv.Rules[rv.Rule][n] = -1
				case rv.Passed:
					pv.Rules[rv.Rule][n] = 1
				}
			}
		}
		scored := rec.Scores(node.Name)
		for k := range scored {
			o := &scored[k]
			p := o.Decision.Policy
			if p == nil {
				continue // not evaluated: an earlier policy failed the node
			}
			i, ok := scores[p]
			if !ok {
				i = len(v.Scores)
				scores[p] = i
				sv := ScoreValues{Policy: p.Name, Rules: map[string][]float64{}}
				for _, r := range p.ScoreRules() {
					sv.Rules[r.Name] = nans(len(infos))
				}
				v.Scores = append(v.Scores, sv)
			}
			for k, r := range p.ScoreRules() {
				if o.Decision.Verdict == engine.Pass {
					v.Scores[i].Rules[r.Name][n] = o.Raw[k]
				}
			}
		}
	}
	// The cycle's order (by name), whichever node saw a policy first.
	slices.SortStableFunc(v.Filters, func(a, b PolicyVerdicts) int {
		return cmp.Or(strings.Compare(a.Policy, b.Policy), strings.Compare(a.Params, b.Params))
	})
	slices.SortStableFunc(v.Scores, func(a, b ScoreValues) int { return strings.Compare(a.Policy, b.Policy) })
	return v, nil
}

// nans is n NaNs.
func nans(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// Class is a key that pods every policy treats alike share: the
// namespace and the pod fields a policy may read
// (engine.Snapshot.Signature); false for a pod that a policy reading its
// name, its status or nodeInfo.pods may select, which is a class of its
// own.
func (s *Scheduler) Class(pod *corev1.Pod) (string, bool) {
	sig, ok := s.Runtime().Inputs.Policies.Snapshot().Signature(pod)
	if !ok {
		return "", false
	}
	data, err := json.Marshal(sig)
	if err != nil {
		return "", false
	}
	return string(data), true
}
