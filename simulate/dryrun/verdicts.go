package dryrun

import (
	"context"
	"encoding/json"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/verdict"
)

// Verdicts are what the policies say of a pod on every node of the
// cluster, policy by policy and rule by rule, apart from the scheduler's
// other plugins: the engine's detail that `celsched analyze` reads to
// name policies and rules (which nodes the pod may have is the one
// evaluator's answer, verdict.Evaluator).
type Verdicts struct {
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

// ScoreValues are one policy's score rules on every node.
type ScoreValues struct {
	Policy string
	// Rules are, per rule, its raw value on each node (NaN: an error).
	Rules map[string][]float64
}

// Verdicts evaluates the pod's policies on every node, as a scheduling
// cycle would (match, params, filters and scores), but every rule of every
// policy on every node.
func (s *Scheduler) Verdicts(ctx context.Context, pod *corev1.Pod) (*Verdicts, error) {
	pod = verdict.Default(pod)
	c, err := s.Runtime().Prepare(ctx, pod, s.cluster.EvaluationBudget)
	if err != nil {
		return nil, err
	}
	infos := s.cluster.NodeInfos()
	v := &Verdicts{Rejection: c.Rejection, Nodes: make([]*corev1.Node, len(infos))}
	for _, p := range c.Filters {
		if !p.Enforced() {
			continue
		}
		pv := PolicyVerdicts{Policy: p.Name, Pass: make([]bool, len(infos)), Reason: make([]string, len(infos)), Rules: map[string][]int8{}}
		if params := p.Params(); params != nil {
			pv.Params = params.String()
		}
		for _, name := range p.FilterRuleNames() {
			pv.Rules[name] = make([]int8, len(infos))
		}
		v.Filters = append(v.Filters, pv)
	}
	for _, p := range c.Scores {
		sv := ScoreValues{Policy: p.Name, Rules: map[string][]float64{}}
		for _, r := range p.ScoreRules() {
			sv.Rules[r.Name] = make([]float64, len(infos))
		}
		v.Scores = append(v.Scores, sv)
	}
	// One buffer per score policy for every node's raw rule values, and
	// its rules' columns, taken once.
	raws := make([][]float64, len(c.Scores))
	columns := make([][][]float64, len(c.Scores))
	for j, p := range c.Scores {
		raws[j] = make([]float64, p.NumScoreRules())
		for _, r := range p.ScoreRules() {
			columns[j] = append(columns[j], v.Scores[j].Rules[r.Name])
		}
	}
	for n, info := range infos {
		v.Nodes[n] = info.Node()
		in, err := s.Runtime().Inputs.Converter.NodeInput(info.Node(), info.GetGeneration(), info, celplugins.NodeInfoFrom)
		if err != nil {
			return nil, err
		}
		i := 0
		for _, p := range c.Filters {
			if !p.Enforced() {
				continue
			}
			pv := &v.Filters[i]
			i++
			d := p.Filter(c.Ctx, c.Pod, &in)
			pv.Pass[n] = d.Verdict == engine.Pass
			if !pv.Pass[n] {
				pv.Reason[n] = d.String()
			}
			rules, err := p.FilterRules(c.Ctx, c.Pod, &in)
			if err != nil {
				continue
			}
			for _, rv := range rules {
				switch {
				case rv.Err != nil:
					pv.Rules[rv.Rule][n] = -1
				case rv.Passed:
					pv.Rules[rv.Rule][n] = 1
				}
			}
		}
		for j, p := range c.Scores {
			raw := raws[j]
			clear(raw)
			d := p.Score(c.Ctx, c.Pod, &in, raw)
			for k, column := range columns[j] {
				if d.Verdict != engine.Pass {
					raw[k] = math.NaN()
				}
				column[n] = raw[k]
			}
		}
	}
	return v, nil
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
