package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/score"
	"github.com/celsched/celsched/engine"
)

// Placement is a bound pod's verdict on its own node once evicted and
// created again (Evaluator.Reschedule): whether the node still admits it,
// and its rank among the feasible nodes.
type Placement struct {
	// PreEnqueue is set when a PreEnqueue plugin holds the pod, PreFilter
	// when a PreFilter plugin rejects it; its node is not evaluated then.
	PreEnqueue *Rejection
	PreFilter  *Rejection
	// Node is the verdict on the pod's node, with its total score when
	// feasible (PluginScores may be unset); nil when not evaluated.
	Node *NodeResult
	// Feasible counts the feasible nodes.
	Feasible int
	// Rank is 1 + the number of feasible nodes that score higher than
	// the pod's node, when its node is feasible.
	Rank int
}

// Placement is the verdict of a Reschedule on the pod's node.
func (r *Result) Placement(node string) Placement {
	p := Placement{PreEnqueue: r.PreEnqueue, PreFilter: r.PreFilter, Node: r.Node(node), Feasible: len(r.Feasible)}
	if p.Node != nil && p.Node.Feasible {
		p.Rank = 1
		for _, other := range r.Ranking {
			if other.Score > p.Node.Score {
				p.Rank++
			}
		}
	}
	return p
}

// ClassVerdict is the framework's verdict on a class of pods (pods that
// differ only in their identity, status and node: see Class): one whole
// cycle, PreEnqueue to Score, of an unbound pod of the class. Every
// pending pod of the class has its Result; a bound pod of the class is
// answered from it by evaluating its own node only (Reschedule). It holds
// the cycle's state: keep only the classes being evaluated.
type ClassVerdict struct {
	e  *Evaluator
	fw framework.Framework
	// profile is the pod's profile (its schedulerName; the framework's
	// own name ends with DryRunProfileSuffix).
	profile string
	pod     *corev1.Pod // the pod evaluated: defaulted, unbound
	// result is the cycle's; nodes in name order, as the cluster's.
	result *Result
	// state is the cycle's after Score; nil when the pod was held or
	// rejected at PreFilter.
	state fwk.CycleState
	// totals are the feasible nodes' total scores, ascending.
	totals  []int64
	plugins *schedulerconfig.Plugins
	// fallbacks counts the bound pods evaluated by a whole cycle of
	// their own (Reschedule says when).
	fallbacks atomic.Int64
}

// EvaluateClass evaluates a pod of a class as Schedule does, unbound (as
// Reschedule evaluates a bound one), and keeps what the other pods of the
// class are answered from. The pods asked about later must be of the
// pod's class (Class).
func (e *Evaluator) EvaluateClass(ctx context.Context, pod *corev1.Pod) (*ClassVerdict, error) {
	pod = Default(pod)
	pod.Spec.NodeName = ""
	profile, err := e.SchedulerName(pod)
	if err != nil {
		return nil, err
	}
	fw := e.frameworks[profile]
	pod.Spec.SchedulerName = profile
	c := &ClassVerdict{e: e, fw: fw, profile: profile, pod: pod, result: &Result{}, plugins: fw.ListPlugins()}
	e.sweeps.Add(1)
	if c.state, err = c.result.schedule(ctx, fw, pod, e.cluster.nodeInfos, nil, scoredTotals, e.groups.Known(pod), nil); err != nil {
		return nil, err
	}
	for _, n := range c.result.Ranking {
		c.totals = append(c.totals, n.Score)
	}
	slices.Sort(c.totals)
	return c, nil
}

// Result is the class's verdict: a pending pod's of the class. Its nodes'
// PluginScores are not set (their totals are).
func (c *ClassVerdict) Result() *Result { return c.result }

// Fallbacks counts the bound pods Reschedule evaluated with a whole cycle.
func (c *ClassVerdict) Fallbacks() int64 { return c.fallbacks.Load() }

// Reschedule is Evaluator.Reschedule's verdict on a bound pod of the
// class, on its node. The framework runs PreFilter for the pod and Filter
// on its node without it; every other node's verdict and score is the
// class's. That holds when removing the pod from its node changes nothing
// but that node: no PreFilter plugin that tracks removed pods
// (PreFilterExtensions) runs for it; its node was feasible for the class
// and still is, or is refused now (then no node is scored); and every
// score plugin that normalizes across nodes (ScoreExtensions) gives the
// node the same score without the pod as with it (the CEL score plugin:
// no policy it evaluates reads nodeInfo), so that the others' normalized
// scores do not move. The node's total then changes by what the other
// score plugins give it, by their weights. Otherwise, and when the CEL
// filter's cycle has run out of distinct messages (a node's message would
// depend on the nodes before it), the pod gets a whole cycle of its own.
func (c *ClassVerdict) Reschedule(ctx context.Context, bound *corev1.Pod) (Placement, error) {
	if r := c.result; r.PreEnqueue != nil || r.PreFilter != nil {
		return Placement{PreEnqueue: r.PreEnqueue, PreFilter: r.PreFilter}, nil
	}
	p, ok, err := c.onItsNode(ctx, bound)
	if err != nil || ok {
		return p, err
	}
	c.fallbacks.Add(1)
	r, err := c.e.Reschedule(ctx, bound)
	if err != nil {
		return Placement{}, err
	}
	return r.Placement(bound.Spec.NodeName), nil
}

// onItsNode is Reschedule's verdict from the pod's node alone; false when
// it cannot be had that way.
func (c *ClassVerdict) onItsNode(ctx context.Context, bound *corev1.Pod) (Placement, bool, error) {
	if c.state == nil {
		return Placement{}, false, nil
	}
	if cycle := celplugins.ReadCycle(c.state); cycle != nil && cycle.MessagesFull() {
		return Placement{}, false, nil
	}
	infos := c.e.cluster.nodeInfos
	i, found := slices.BinarySearchFunc(infos, bound.Spec.NodeName, func(ni fwk.NodeInfo, name string) int { return strings.Compare(ni.Node().Name, name) })
	if !found {
		return Placement{}, false, nil // Reschedule says why
	}
	pod := Default(bound)
	pod.Spec.NodeName = ""
	pod.Spec.SchedulerName = c.profile
	state := framework.NewCycleState()
	result, st, _ := c.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() && !st.IsSkip() {
		return Placement{}, false, nil
	}
	if c.tracksRemovals(state) {
		return Placement{}, false, nil
	}
	ni, _, err := withoutPod(ctx, infos[i], bound)
	if err != nil {
		return Placement{}, false, err
	}
	n := &NodeResult{}
	filterNode(ctx, c.fw, state, pod, result, ni, n, nil)
	was := c.result.Nodes[i]
	if !n.Feasible {
		feasible := len(c.result.Feasible)
		if was.Feasible {
			feasible--
		}
		return Placement{Node: n, Feasible: feasible}, true, nil
	}
	if !was.Feasible {
		return Placement{}, false, nil
	}
	delta, ok := c.scoreChange(ctx, infos[i], ni)
	if !ok {
		return Placement{}, false, nil
	}
	n.Score = was.Score + delta
	higher := len(c.totals) - sortSearchAbove(c.totals, n.Score)
	if was.Score > n.Score {
		higher-- // the node itself, as it was
	}
	return Placement{Node: n, Feasible: len(c.result.Feasible), Rank: 1 + higher}, true, nil
}

// sortSearchAbove returns the index of the first total above x.
func sortSearchAbove(totals []int64, x int64) int {
	i, _ := slices.BinarySearchFunc(totals, x, func(t, x int64) int {
		if t <= x {
			return -1
		}
		return 1
	})
	return i
}

// tracksRemovals says whether a PreFilter plugin that updates its state
// for a removed pod (PreFilterExtensions) runs for the pod: the framework
// would call it when the pod is evicted (evict), which may change the
// verdict on other nodes.
func (c *ClassVerdict) tracksRemovals(state fwk.CycleState) bool {
	skipped := state.GetSkipFilterPlugins()
	for _, p := range c.plugins.PreFilter.Enabled {
		pl, ok := c.e.plugins[c.profile][p.Name].(fwk.PreFilterPlugin)
		if !ok || (pl.PreFilterExtensions() != nil && !skipped.Has(p.Name)) {
			return true
		}
	}
	return false
}

// scoreChange is how much the node's total score changes without the pod
// (was: with it; now: without), when no normalized score changes; false
// otherwise.
func (c *ClassVerdict) scoreChange(ctx context.Context, was, now fwk.NodeInfo) (int64, bool) {
	skipped := c.state.GetSkipScorePlugins()
	var delta int64
	for _, sp := range c.plugins.Score.Enabled {
		if skipped.Has(sp.Name) {
			continue
		}
		if sp.Name == score.Name {
			// Its Score keeps raw values in the cycle's state and
			// NormalizeScore scores: its rules read the node object,
			// which is the same, unless they read nodeInfo.
			cycle := celplugins.ReadCycle(c.state)
			if cycle == nil {
				return 0, false
			}
			for _, p := range cycle.Scores {
				if p.UsesNodeInfo() {
					return 0, false
				}
			}
			continue
		}
		pl, ok := c.e.plugins[c.profile][sp.Name].(fwk.ScorePlugin)
		if !ok {
			return 0, false
		}
		before, st := pl.Score(ctx, c.state, c.pod, was)
		if !st.IsSuccess() {
			return 0, false
		}
		after, st := pl.Score(ctx, c.state, c.pod, now)
		if !st.IsSuccess() {
			return 0, false
		}
		if pl.ScoreExtensions() != nil {
			if before != after {
				return 0, false
			}
			continue
		}
		if after < fwk.MinNodeScore || after > fwk.MaxNodeScore {
			return 0, false // the framework fails the cycle: Reschedule says so
		}
		delta += (after - before) * int64(sp.Weight)
	}
	return delta, true
}

// withoutPod returns a copy of the node's NodeInfo without the bound pod,
// as preemption removes a victim.
func withoutPod(ctx context.Context, ni fwk.NodeInfo, bound *corev1.Pod) (fwk.NodeInfo, fwk.PodInfo, error) {
	ni = ni.Snapshot()
	var victim fwk.PodInfo
	for _, p := range ni.GetPods() {
		if p.GetPod().UID == bound.UID {
			victim = p
		}
	}
	if victim == nil {
		return nil, nil, fmt.Errorf("pod %s/%s is not on node %s of the scheduler's snapshot", bound.Namespace, bound.Name, bound.Spec.NodeName)
	}
	if err := ni.RemovePod(klog.FromContext(ctx), victim.GetPod()); err != nil {
		return nil, nil, fmt.Errorf("removing pod %s/%s from its node: %w", bound.Namespace, bound.Name, err)
	}
	return ni, victim, nil
}

// Class is a key that pods an evaluation treats alike share: equal in
// everything but their identity (name, UID, version, status) and the node
// they are on: the replicas of a workload, or the members of a pod group
// (the group's name is in the spec, and podGroup's labels and minCount
// are the group's). False for a pod that a policy reading its name, its
// status, nodeInfo.pods or podGroup.assignedNodes may select
// (engine.Snapshot.Signature), which is a class of its own.
func Class(snapshot *engine.Snapshot, pod *corev1.Pod) (string, bool) {
	if _, ok := snapshot.Signature(pod); !ok {
		return "", false
	}
	spec := pod.Spec.DeepCopy()
	spec.NodeName = ""
	key := struct {
		Namespace       string                  `json:"namespace"`
		SchedulerName   string                  `json:"schedulerName"`
		Labels          map[string]string       `json:"labels,omitempty"`
		Annotations     map[string]string       `json:"annotations,omitempty"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
		Spec            *corev1.PodSpec         `json:"spec"`
	}{pod.Namespace, pod.Spec.SchedulerName, pod.Labels, pod.Annotations, pod.OwnerReferences, spec}
	data, err := json.Marshal(key)
	if err != nil {
		return "", false
	}
	return string(data), true
}
