// Package impact says what a change of SchedulingPolicies does to a whole
// cluster before it is applied: every pending pod of the scheduler's
// profiles, and every bound one, is evaluated with the live policies and
// with the drafted ones, side by side, with kube-scheduler's framework (the
// dry run's), and the pods whose outcome changes are reported. `celsched
// impact` is built on it.
package impact

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/pool"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/simulate/verdict"
)

// Input is the cluster and the change: source.Input's policies and params
// objects in force (Policies, Params) and drafted (Drafts, which replace
// the policies of their name or are added; ParamsDrafts, which replace the
// objects of their kind, namespace and name or are added), and the
// cluster's Nodes, Namespaces, Pods (of every scheduler: bound pods take
// room on their nodes), Objects and Config (the pods of its profiles are
// evaluated). Its Notes are said first in the report.
type Input struct {
	source.Input
	// Deletions name live policies to remove; ParamsDeletions live params
	// objects. A change of params is a change as a policy's is.
	Deletions       []string
	ParamsDeletions []dryrun.ParamsKey
	// Parallelism is how many pods are evaluated at once; 0 means
	// GOMAXPROCS.
	Parallelism int
	// Why explains, for a pod the draft holds or whose node it refuses,
	// the false rules and their sub-expressions' values (PodImpact.Why).
	Why bool
}

// Change is what the draft does to a pod.
type Change string

// The changes, for pending pods and then for bound pods.
const (
	// Placed: a pending pod held or unschedulable now is schedulable with
	// the draft.
	Placed Change = "placed"
	// Stranded: a pending pod schedulable now is unschedulable with the
	// draft.
	Stranded Change = "stranded"
	// Held: a pending pod not held now is held at PreEnqueue with the
	// draft.
	Held Change = "held"
	// Released: a pending pod held now is not held with the draft, but no
	// node is feasible.
	Released Change = "released"
	// Moved: a pending pod schedulable both ways goes to other nodes with
	// the draft (its best nodes now and with the draft have none in common).
	Moved Change = "moved"
	// EvictedWouldNotReturn: a bound pod whose node is accepted now would
	// be refused with the draft (a filter, or a hold at PreEnqueue): after
	// an eviction or a rollout it does not come back to that node.
	EvictedWouldNotReturn Change = "evicted-would-not-return"
	// Readmitted: a bound pod whose node is refused now would be accepted
	// with the draft.
	Readmitted Change = "readmitted"
	// RankChanged: a bound pod's node is accepted both ways, but its rank
	// among the feasible nodes changes.
	RankChanged Change = "rank-changed"
	// PreemptionChanged: a pending pod no node fits either way, whose
	// preemption would go otherwise with the draft: other victims, another
	// node, or none (Outcome.Preemption says what, both ways).
	PreemptionChanged Change = "preemption-changed"
	// Unchanged: nothing of the above.
	Unchanged Change = "unchanged"
)

// Changes are all changes, in the order reports list them.
var Changes = []Change{Placed, Stranded, Held, Released, Moved, PreemptionChanged, EvictedWouldNotReturn, Readmitted, RankChanged, Unchanged}

// State is a pod's outcome.
type State string

// States: of a pending pod, and of a bound pod's node.
const (
	StateHeld          State = "held"
	StateUnschedulable State = "unschedulable"
	StateSchedulable   State = "schedulable"
	StateAccepted      State = "accepted"
	StateRefused       State = "refused"
)

// Report is what a change does.
type Report struct {
	// Policies are the policies the draft adds, changes or deletes (and
	// drafts equal to the live policy, as unchanged).
	Policies []dryrun.PolicyChange `json:"policies"`
	// Params are the params objects the draft adds, changes or deletes
	// (and drafts equal to the live object, as unchanged), with the
	// policies that read each.
	Params  []dryrun.ParamsChange `json:"params,omitempty"`
	Notes   []string              `json:"notes,omitempty"`
	Summary Summary               `json:"summary"`
	// Pods are the pods whose outcome changes, by change and then by name.
	Pods []PodImpact `json:"pods"`
	// Groups are the pod groups whose outcome changes, by change and then
	// by name.
	Groups []GroupImpact `json:"groups,omitempty"`
}

// Summary counts pods.
type Summary struct {
	// Pending and Bound count the pods of the profiles evaluated.
	Pending int `json:"pending"`
	Bound   int `json:"bound"`
	// NotAffected counts the pods (of Pending and Bound) that no added,
	// changed or deleted policy applies to, now or with the draft: their
	// outcome cannot change, and they are not evaluated.
	NotAffected int `json:"notAffected"`
	// GroupMembers counts the pending pods (of Pending) evaluated with
	// their pod group (Groups), not one by one.
	GroupMembers int `json:"groupMembers,omitempty"`
	// OtherSchedulers counts the pods of schedulers that are not profiles
	// of the configuration: not evaluated.
	OtherSchedulers int `json:"otherSchedulers"`
	// ByChange counts every evaluated pod by change, unchanged included.
	ByChange map[Change]int `json:"byChange"`
	// ByNamespace and ByPolicy count the changed pods (not unchanged) per
	// namespace, and per policy of the draft that applies to them.
	ByNamespace map[string]map[Change]int `json:"byNamespace"`
	ByPolicy    map[string]map[Change]int `json:"byPolicy"`
	// ByParams counts the changed pods per changed params object that a
	// policy applying to them reads (Report.Params' Object).
	ByParams map[string]map[Change]int `json:"byParams,omitempty"`
	// Groups counts the pod groups with pending members; nil when there
	// are none.
	Groups *GroupSummary `json:"groups,omitempty"`
}

// PodImpact is what the draft does to one pod.
type PodImpact struct {
	Pod string `json:"pod"`
	// Node is a bound pod's node.
	Node   string  `json:"node,omitempty"`
	Change Change  `json:"change"`
	Now    Outcome `json:"now"`
	Draft  Outcome `json:"draft"`
	// Policies are the added, changed or deleted policies that apply to
	// the pod now or with the draft, and those that read a changed params
	// object for it.
	Policies []string `json:"policies"`
	// Params are the changed params objects that these policies read for
	// the pod, now or with the draft.
	Params []string `json:"params,omitempty"`
	// Why are, when asked for (Input.Why), the policies whose rules hold
	// the pod or refuse its node with the draft, with the false rules and
	// their sub-expressions' values; for the changes held and
	// evicted-would-not-return.
	Why []*dryrun.PolicyResult `json:"why,omitempty"`
	// Remediation is, for a pod evicted-would-not-return (the draft
	// would make it drift), what the draft's spec.remediation of a policy
	// that refuses its node would do to it; nil when none has one.
	Remediation *dryrun.Remediation `json:"remediation,omitempty"`
}

// Outcome is a pod's outcome with one set of policies.
type Outcome struct {
	State State `json:"state"`
	// Nodes are a schedulable pending pod's best nodes: the scheduler
	// picks one of them.
	Nodes []string `json:"nodes,omitempty"`
	// Rank is an accepted bound pod's node's rank among the feasible
	// nodes: 1 + the number of nodes that score higher.
	Rank int `json:"rank,omitempty"`
	// Feasible counts the feasible nodes.
	Feasible int `json:"feasible"`
	// Reason says why the pod is held or unschedulable, or its node
	// refused: the plugin and its message.
	Reason string `json:"reason,omitempty"`
	// Preemption is, for a pending pod no node fits either way, what
	// kube-scheduler's preemption would do (the node and victims, or why
	// not, and the victims the rules protected); set when it differs
	// between now and the draft (PreemptionChanged).
	Preemption *dryrun.PreemptionResult `json:"preemption,omitempty"`
}

// EvaluationBudget is the CEL time budget of one pod's evaluation
// (dryrun.Cluster.EvaluationBudget): impact evaluates every node, one after
// the other, for several pods at once. It is a guard against a stall, not
// a limit the scheduler would apply; the cost limits apply as in the
// scheduler.
const EvaluationBudget = time.Minute

// Run evaluates the change.
func Run(ctx context.Context, in Input) (*Report, error) {
	draft, changes, err := dryrun.ApplyDrafts(in.Policies, in.Drafts, in.Deletions)
	if err != nil {
		return nil, err
	}
	draftParams, paramsChanges, err := dryrun.ApplyParamsDrafts(in.Params, in.ParamsDrafts, in.ParamsDeletions)
	if err != nil {
		return nil, err
	}
	r := &Report{Policies: changes, Params: paramsChanges, Pods: []PodImpact{}, Notes: slices.Clone(in.Notes), Summary: Summary{
		ByChange: map[Change]int{}, ByNamespace: map[string]map[Change]int{}, ByPolicy: map[string]map[Change]int{},
	}}
	var c change
	c.policies = sets.New[string]()
	for _, pc := range changes {
		if pc.Change != dryrun.PolicyUnchanged {
			c.policies.Insert(pc.Name)
		}
	}
	c.params = map[dryrun.ParamsKey]string{}
	for i := range paramsChanges {
		if pc := &paramsChanges[i]; pc.Change != dryrun.PolicyUnchanged {
			c.params[pc.Key] = pc.Object
		}
	}
	if len(c.params) > 0 {
		r.Summary.ByParams = map[string]map[Change]int{}
	}

	evaluate, bound := r.podsToEvaluate(in)
	evaluate, members := r.groupMembers(in.PodGroups, evaluate)
	// The pods of a namespace one after the other: a rule's remembered
	// results on a node are kept per namespace (and the pod fields it
	// reads), a few at a time, so that pods taken in turn from many
	// namespaces would miss them every time.
	slices.SortStableFunc(evaluate, func(a, b *corev1.Pod) int { return strings.Compare(a.Namespace, b.Namespace) })
	namespaces := dryrun.WithNamespaces(in.Namespaces, evaluate...)
	if n := len(namespaces) - len(in.Namespaces); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d namespace(s) of pods are not in the input; assumed with only their name label", n))
	}

	cluster := dryrun.NewCluster(namespaces, in.Nodes, bound, in.Objects).WithPodGroups(in.PodGroups)
	cluster.EvaluationBudget = EvaluationBudget
	if c.now, err = cluster.Scheduler(ctx, in.Policies, in.Params, in.Config); err != nil {
		return nil, err
	}
	defer c.now.Close()
	if c.next, err = cluster.Scheduler(ctx, draft, draftParams, in.Config); err != nil {
		return nil, err
	}
	defer c.next.Close()
	for _, p := range c.next.Policies() {
		if c.policies.Has(p.Name) && p.Err() != nil {
			first, _, _ := strings.Cut(p.Err().Error(), "\n")
			r.Notes = append(r.Notes, "draft "+first+" (celsched validate shows every error)")
		}
	}
	for i := range r.Params {
		r.Params[i].Policies = c.readers(&r.Params[i])
	}

	results := make([]*PodImpact, len(evaluate))
	classes := c.classes(evaluate)
	// A class at a time on each worker: its pods share one evaluation per
	// policy set, kept only while the class is evaluated.
	err = pool.Run(ctx, in.Parallelism, len(classes), func(ctx context.Context, i int) error {
		pods := classes[i]
		out, err := c.evaluateClass(ctx, evaluate, pods)
		if err != nil {
			return err
		}
		for j, k := range pods {
			results[k] = out[j]
			if err := c.preemption(ctx, evaluate[k], results[k]); err != nil {
				return err
			}
			if results[k] != nil && results[k].Change == EvictedWouldNotReturn {
				if results[k].Remediation, err = c.next.Remediation(ctx, draft, evaluate[k], in.Owners, time.Now()); err != nil {
					return err
				}
			}
			if !in.Why || results[k] == nil {
				continue
			}
			switch results[k].Change {
			case Held:
				results[k].Why, err = c.next.Why(ctx, evaluate[k], "")
			case EvictedWouldNotReturn:
				results[k].Why, err = c.next.Why(ctx, evaluate[k], evaluate[k].Spec.NodeName)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.add(results)
	if err := r.groups(ctx, &c, members); err != nil {
		return nil, err
	}
	return r, nil
}

// preemption compares, for a pending pod that no node fits now nor with
// the draft, what preemption would do both ways (a victim rule, or a
// filter that changes which nodes preemption could help on): when it
// differs, the pod's change is PreemptionChanged. Each pod is asked on its
// own (its priority is its own, not its class's).
func (c *change) preemption(ctx context.Context, pod *corev1.Pod, res *PodImpact) error {
	if res == nil || res.Change != Unchanged || pod.Spec.NodeName != "" ||
		res.Now.State != StateUnschedulable || res.Draft.State != StateUnschedulable {
		return nil
	}
	_, now, err := c.now.Preempt(ctx, pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, next, err := c.next.Preempt(ctx, pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if reflect.DeepEqual(now, next) {
		return nil
	}
	res.Change, res.Now.Preemption, res.Draft.Preemption = PreemptionChanged, now, next
	return nil
}

// podsToEvaluate sorts the input's pods (source.Input.ProfilePods): those
// of the profiles to evaluate, and the bound ones, which take room on
// their nodes. It counts them in the summary.
func (r *Report) podsToEvaluate(in Input) (evaluate, bound []*corev1.Pod) {
	pods := in.ProfilePods()
	r.Summary.Pending, r.Summary.Bound, r.Summary.OtherSchedulers = pods.Pending, pods.Bound, pods.OtherSchedulers
	r.Notes = append(r.Notes, pods.Notes()...)
	return pods.Placed, pods.OnNodes
}

// add counts the pods' results (nil: not affected) and lists the changed
// pods, by change and then by name.
func (r *Report) add(results []*PodImpact) {
	for _, res := range results {
		if res == nil {
			r.Summary.NotAffected++
			r.Summary.ByChange[Unchanged]++
			continue
		}
		r.Summary.ByChange[res.Change]++
		if res.Change == Unchanged {
			continue
		}
		r.Pods = append(r.Pods, *res)
		namespace, _, _ := strings.Cut(res.Pod, "/")
		count(r.Summary.ByNamespace, namespace, res.Change)
		for _, p := range res.Policies {
			count(r.Summary.ByPolicy, p, res.Change)
		}
		for _, p := range res.Params {
			count(r.Summary.ByParams, p, res.Change)
		}
	}
	sort.SliceStable(r.Pods, func(i, j int) bool {
		a, b := slices.Index(Changes, r.Pods[i].Change), slices.Index(Changes, r.Pods[j].Change)
		if a != b {
			return a < b
		}
		return r.Pods[i].Pod < r.Pods[j].Pod
	})
}

// change is the change evaluated: the schedulers with the live and with
// the drafted policies and params, and what differs between them.
type change struct {
	now, next *dryrun.Scheduler
	// policies are the names of the added, changed and deleted policies.
	policies sets.Set[string]
	// params are the added, changed and deleted params objects, with
	// their names in the report.
	params map[dryrun.ParamsKey]string
}

// readers names the policies, live or drafted, whose paramRef may select
// the params object.
func (c *change) readers(pc *dryrun.ParamsChange) []string {
	out := sets.New[string]()
	for _, s := range []*dryrun.Scheduler{c.now, c.next} {
		for _, p := range s.Policies() {
			if dryrun.Reads(p.ParamSpec(), pc.Key, pc.Labels...) {
				out.Insert(p.Name)
			}
		}
	}
	return sets.List(out)
}

func count(m map[string]map[Change]int, key string, c Change) {
	if m[key] == nil {
		m[key] = map[Change]int{}
	}
	m[key][c]++
}

// classes groups the pods (their indexes) by class (verdict.Class,
// with the live and with the drafted policies), in the order of their
// first pod: pods that differ only in their identity, status and node
// have one verdict of the framework per policy set. A pod that no class
// holds is a class of its own.
func (c *change) classes(pods []*corev1.Pod) [][]int {
	byKey := map[string]int{}
	var out [][]int
	now, next := c.now.Runtime().Inputs.Policies.Snapshot(), c.next.Runtime().Inputs.Policies.Snapshot()
	for i, pod := range pods {
		// The key is the same with either policy set; whether the pod
		// has a class depends on both (engine.Snapshot.Signature).
		key, ok := verdict.Class(now, pod)
		if _, okNext := next.Signature(pod); !ok || !okNext {
			out = append(out, []int{i})
			continue
		}
		j, seen := byKey[key]
		if !seen {
			j = len(out)
			byKey[key] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// evaluateClass evaluates the pods of a class (indexes in pods) with both
// policy sets; nil for the pods the change cannot touch: no changed policy
// applies to them either way, and no policy that applies reads a changed
// params object for them. Which policies apply, and which params they
// read, is the same for every pod of the class (verdict.Class holds what
// matching reads).
func (c *change) evaluateClass(ctx context.Context, pods []*corev1.Pod, class []int) ([]*PodImpact, error) {
	out := make([]*PodImpact, len(class))
	relevant, params, err := c.relevant(ctx, pods[class[0]])
	if err != nil || len(relevant) == 0 {
		return out, err
	}
	var pending, bound []int // indexes in class
	for j, k := range class {
		if pods[k].Spec.NodeName == "" {
			pending = append(pending, j)
		} else {
			bound = append(bound, j)
		}
	}
	for _, side := range []struct {
		s    *dryrun.Scheduler
		pick func(*PodImpact) *Outcome
	}{{c.now, func(p *PodImpact) *Outcome { return &p.Now }}, {c.next, func(p *PodImpact) *Outcome { return &p.Draft }}} {
		if len(pending) == 0 && len(bound) == 1 {
			// One bound pod: a whole cycle of its own costs no more than
			// the class's.
			pod := pods[class[bound[0]]]
			r, err := side.s.Evaluator.Reschedule(ctx, pod)
			if err != nil {
				return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			if out[bound[0]] == nil {
				out[bound[0]] = newImpact(pod, relevant, params)
			}
			*side.pick(out[bound[0]]) = onNode(r.Placement(pod.Spec.NodeName))
			continue
		}
		first := pods[class[0]]
		cv, err := side.s.EvaluateClass(ctx, first)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", first.Namespace, first.Name, err)
		}
		if len(pending) > 0 {
			// One outcome for the class's pending pods (its Nodes shared).
			outcome := pendingOutcome(cv.Result())
			for _, j := range pending {
				if out[j] == nil {
					out[j] = newImpact(pods[class[j]], relevant, params)
				}
				*side.pick(out[j]) = outcome
			}
		}
		for _, j := range bound {
			pod := pods[class[j]]
			p, err := cv.Reschedule(ctx, pod)
			if err != nil {
				return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			if out[j] == nil {
				out[j] = newImpact(pod, relevant, params)
			}
			*side.pick(out[j]) = onNode(p)
		}
	}
	for _, res := range out {
		res.Change = classify(res.Now, res.Draft)
	}
	return out, nil
}

func newImpact(pod *corev1.Pod, relevant sets.Set[string], params sets.Set[string]) *PodImpact {
	res := &PodImpact{Pod: pod.Namespace + "/" + pod.Name, Node: pod.Spec.NodeName, Policies: sets.List(relevant)}
	if params.Len() > 0 {
		res.Params = sets.List(params)
	}
	return res
}

// relevant names the changed policies that apply to the pod now or with
// the draft, or that read a changed params object for it, and those
// params objects.
func (c *change) relevant(ctx context.Context, pod *corev1.Pod) (relevant, params sets.Set[string], err error) {
	before, err := c.now.Applies(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	after, err := c.next.Applies(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	relevant = c.policies.Intersection(sets.New(before...).Insert(after...))
	params = sets.New[string]()
	if len(c.params) > 0 {
		for _, side := range []struct {
			s        *dryrun.Scheduler
			policies []string
		}{{c.now, before}, {c.next, after}} {
			for _, policy := range side.policies {
				keys, err := side.s.ParamsRead(pod, policy)
				if err != nil {
					return nil, nil, err
				}
				for _, k := range keys {
					if name, ok := c.params[k]; ok {
						relevant.Insert(policy)
						params.Insert(name)
					}
				}
			}
		}
	}
	return relevant, params, nil
}

// pendingOutcome is a pending pod's outcome.
func pendingOutcome(r *verdict.Result) Outcome {
	o := Outcome{Feasible: len(r.Feasible)}
	switch {
	case r.PreEnqueue != nil:
		o.State, o.Reason = StateHeld, r.PreEnqueue.Plugin+": "+r.PreEnqueue.Message
	case len(r.Feasible) == 0:
		o.State, o.Reason = StateUnschedulable, unschedulable(r)
	default:
		o.State = StateSchedulable
		for _, n := range r.Ranking {
			if n.Score == r.Ranking[0].Score {
				o.Nodes = append(o.Nodes, n.Node)
			}
		}
	}
	return o
}

// onNode is a bound pod's outcome on its node.
func onNode(p verdict.Placement) Outcome {
	o := Outcome{Feasible: p.Feasible}
	switch n := p.Node; {
	case p.PreEnqueue != nil:
		o.State, o.Reason = StateRefused, "held by "+p.PreEnqueue.Plugin+": "+p.PreEnqueue.Message
	case p.PreFilter != nil:
		o.State, o.Reason = StateRefused, p.PreFilter.Plugin+": "+p.PreFilter.Message
	case n == nil || !n.Feasible:
		o.State, o.Reason = StateRefused, "refused"
		if n != nil && n.RejectedBy != nil {
			o.Reason = n.RejectedBy.Plugin + ": " + n.RejectedBy.Message
		}
	default:
		o.State, o.Rank = StateAccepted, p.Rank
	}
	return o
}

// unschedulable says why no node is feasible, as the scheduler's
// condition does: "0/3 nodes are available: 2 <message>, 1 <message>."
func unschedulable(r *verdict.Result) string {
	if r.PreFilter != nil {
		return r.PreFilter.Plugin + ": " + r.PreFilter.Message
	}
	counts := map[verdict.Rejection]int{} // by value: nothing built per node
	for _, n := range r.Nodes {
		if n.RejectedBy != nil {
			counts[*n.RejectedBy]++
		}
	}
	reasons := make([]string, 0, len(counts))
	for rej, c := range counts {
		reasons = append(reasons, fmt.Sprintf("%d %s: %s", c, rej.Plugin, rej.Message))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("0/%d nodes are available: %s.", len(r.Nodes), strings.Join(reasons, ", "))
}

// classify names the change from one outcome to the other.
func classify(now, draft Outcome) Change {
	switch {
	case now.State == draft.State:
		switch {
		case now.State == StateSchedulable && !slices.ContainsFunc(now.Nodes, func(n string) bool { return slices.Contains(draft.Nodes, n) }):
			return Moved
		case now.State == StateAccepted && now.Rank != draft.Rank:
			return RankChanged
		}
		return Unchanged
	case now.State == StateAccepted:
		return EvictedWouldNotReturn
	case now.State == StateRefused:
		return Readmitted
	case draft.State == StateHeld:
		return Held
	case draft.State == StateSchedulable:
		return Placed
	case now.State == StateSchedulable:
		return Stranded
	default: // held now, unschedulable with the draft
		return Released
	}
}
