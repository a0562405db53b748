package celplugins

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	corelisters "k8s.io/client-go/listers/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// PendingPods answers, for the rollout's gate, what a policy would do,
// enforced, to the pending pods of one of its waves: the pods the
// scheduler has not bound (no scheduling cycle reports on them, as
// ReportAudit does at bind) are evaluated with the scheduler's own
// policies, converter and informers, outside any scheduling cycle.
type PendingPods struct {
	Inputs *Inputs
	Pods   corelisters.PodLister
	Nodes  corelisters.NodeLister
	// SchedulerNames are the scheduler's profiles: the pods of other
	// schedulers are left out.
	SchedulerNames []string
	// Budget bounds the evaluation of each pod, as a scheduling cycle's
	// (DefaultEvaluationBudget when 0).
	Budget time.Duration
	// Synced says whether the informers behind Pods and Nodes have synced:
	// until then nothing is counted (an empty list is not evidence).
	Synced func() bool
}

// WouldStrand evaluates the pending pods of wave (an index in
// spec.rollout.waves) of the policy, compiled at generation: the pods of
// the scheduler's profiles without a node, not being deleted, whose
// namespace falls in the wave. A pod counts when the policy, were it
// enforced, would reject it whatever the node (a match condition failing
// under failurePolicy Fail), hold it (a preEnqueue rule) or refuse every
// node that the pod's own node selector, required node affinity and
// tolerations admit (its filters); a pod that no node admits at all is
// not counted: the policy is not what keeps it pending. Each evaluation
// (one per class of pods, see count) has the budget of a scheduling cycle,
// and one cut off counts, as it would reject when enforced. It fails when the informers have not
// synced or the scheduler has not compiled that generation of the policy.
func (pp *PendingPods) WouldStrand(ctx context.Context, policy string, generation int64, wave int) (audit.Stranded, error) {
	var out audit.Stranded
	if pp.Synced != nil && !pp.Synced() {
		return out, fmt.Errorf("the scheduler's informers have not synced yet")
	}
	snapshot := pp.Inputs.Policies.Snapshot()
	if compiled := snapshot.Get(policy); compiled == nil || compiled.Generation != generation {
		return out, fmt.Errorf("the scheduler has not compiled generation %d of SchedulingPolicy %s yet", generation, policy)
	}
	pods, err := pp.Pods.List(labels.Everything())
	if err != nil {
		return out, fmt.Errorf("listing pods: %w", err)
	}
	c := &count{pp: pp, policy: policy, wave: wave, pods: pods, classes: map[string]bool{}, budget: pp.Budget}
	if c.budget <= 0 {
		c.budget = DefaultEvaluationBudget
	}
	for _, pod := range pods {
		if !pp.pending(pod) {
			continue
		}
		if c.nodes == nil {
			if err := c.listNodes(); err != nil {
				return out, err
			}
		}
		stranded, err := c.strands(ctx, snapshot, pod)
		if err != nil {
			if ctx.Err() != nil {
				return out, context.Cause(ctx)
			}
			klog.FromContext(ctx).V(2).Info("Not evaluating a pending pod for a rollout", "pod", klog.KObj(pod), "policy", policy, "err", err)
			continue
		}
		if stranded {
			out.Count++
			out.Pods = append(out.Pods, pod.Namespace+"/"+pod.Name)
		}
	}
	slices.Sort(out.Pods)
	if len(out.Pods) > audit.MaxStrandedNames {
		out.Pods = out.Pods[:audit.MaxStrandedNames]
	}
	return out, ctx.Err()
}

// pending says whether the pod waits for this scheduler.
func (pp *PendingPods) pending(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	name := pod.Spec.SchedulerName
	if name == "" {
		name = corev1.DefaultSchedulerName
	}
	return slices.Contains(pp.SchedulerNames, name)
}

// count is one count of a wave's pending pods: the nodes, converted once,
// and the answer for each class of pods (pods with equal batching
// signatures, engine.Snapshot.Signature: what any policy may read of them,
// their node selector, affinity and tolerations included, is equal, so the
// answer is too).
type count struct {
	pp     *PendingPods
	policy string
	wave   int
	budget time.Duration
	pods   []*corev1.Pod
	nodes  []*corev1.Node
	// inputs are the nodes converted, when first evaluated.
	inputs []*engine.NodeInput
	// infos are the scheduler's view of each node (its pods and their
	// requests), built once when a policy first reads nodeInfo.
	infos   func() map[string]*engine.NodeInfo
	classes map[string]bool
}

// listNodes lists the nodes, in name order.
func (c *count) listNodes() error {
	nodes, err := c.pp.Nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	c.nodes = nodes
	c.inputs = make([]*engine.NodeInput, len(nodes))
	c.infos = sync.OnceValue(func() map[string]*engine.NodeInfo { return nodeInfos(nodes, c.pods) })
	return nil
}

// input returns node i converted, once per count.
func (c *count) input(i int) (*engine.NodeInput, error) {
	if c.inputs[i] == nil {
		in, err := c.pp.Inputs.Converter.NodeInput(c.nodes[i], 0, c.nodes[i].Name, c.info)
		if err != nil {
			return nil, err
		}
		c.inputs[i] = &in
	}
	return c.inputs[i], nil
}

// info is the engine.NodeInfoSource of the count's nodes (source: the
// node's name).
func (c *count) info(source any) *engine.NodeInfo { return c.infos()[source.(string)] }

// strands says whether the policy's copy for the wave, enforced, would
// hold the pod or leave it with no node: the answer of its class when an
// earlier pod of the class had a complete one.
func (c *count) strands(ctx context.Context, snapshot *engine.Snapshot, pod *corev1.Pod) (bool, error) {
	var class string
	if sig, ok := snapshot.Signature(pod); ok {
		if b, err := json.Marshal(sig); err == nil {
			class = string(b)
			if stranded, ok := c.classes[class]; ok {
				return stranded, nil
			}
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.budget, budgetCause(c.budget))
	defer cancel()
	stranded, err := c.evaluate(ctx, pod)
	if err == nil && class != "" && ctx.Err() == nil {
		c.classes[class] = stranded
	}
	return stranded, err
}

// evaluate is strands for one pod, under its budget.
func (c *count) evaluate(ctx context.Context, pod *corev1.Pod) (bool, error) {
	m, err := c.pp.Inputs.Match(ctx, pod)
	if err != nil {
		return false, err
	}
	// The policy's decisions for the pod: one, or one per params object
	// of a parameterized policy (each binding applies).
	var bindings []*engine.CompiledPolicy
	for _, d := range m.matched {
		if d.Policy.Name != c.policy {
			continue
		}
		if d.Policy.Wave() != c.wave {
			return false, nil // another wave's (or an override's) namespace
		}
		if d.Verdict != engine.Pass {
			return true, nil // rejected whatever the node
		}
		if d.Policy.HasPreEnqueue() {
			if d := d.Policy.PreEnqueue(ctx, m.Pod); d.Verdict != engine.Pass {
				return true, nil
			}
		}
		if d.Policy.HasFilters() {
			bindings = append(bindings, d.Policy)
		}
	}
	if len(bindings) == 0 {
		return false, nil
	}
	admitted := false
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	for i, node := range c.nodes {
		if !admits(pod, affinity, node) {
			continue
		}
		admitted = true
		in, err := c.input(i)
		if err != nil {
			return false, err
		}
		if slices.IndexFunc(bindings, func(p *engine.CompiledPolicy) bool { return p.Filter(ctx, m.Pod, in).Verdict != engine.Pass }) < 0 {
			return false, nil // every binding accepts the node
		}
	}
	return admitted, nil
}

// admits says whether the pod's own constraints allow the node: its node
// selector and required node affinity (affinity, the pod's), and its
// tolerations of the node's NoSchedule and NoExecute taints and of a
// cordon (what kube-scheduler's NodeAffinity, TaintToleration and
// NodeUnschedulable filters check with the same helpers).
func admits(pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity, node *corev1.Node) bool {
	if ok, err := affinity.Match(node); err != nil || !ok {
		return false
	}
	comparisons := utilfeature.DefaultFeatureGate.Enabled(features.TaintTolerationComparisonOperators)
	taints := node.Spec.Taints
	if node.Spec.Unschedulable {
		taints = append(slices.Clip(taints), corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, comparisons)
	return !untolerated
}

// nodeInfos builds the scheduler's view of each node from the bound pods,
// with kube-scheduler's NodeInfo.
func nodeInfos(nodes []*corev1.Node, pods []*corev1.Pod) map[string]*engine.NodeInfo {
	byNode := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			byNode[pod.Spec.NodeName] = append(byNode[pod.Spec.NodeName], pod)
		}
	}
	out := make(map[string]*engine.NodeInfo, len(nodes))
	for _, node := range nodes {
		ni := framework.NewNodeInfo(byNode[node.Name]...)
		ni.SetNode(node)
		out[node.Name] = NodeInfo(ni)
	}
	return out
}
