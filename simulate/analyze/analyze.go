// Package analyze checks the policy set as a whole against a cluster:
// policies that together leave a class of pods no node, filters that are
// true or false on every node, scores that are the same everywhere,
// policies that select nothing, params that fit no node or are missing,
// pods running where the policies in force refuse them, classes of pods
// with few feasible nodes, the inputs of the policies that a tenant
// writes, and pod groups the policies keep from a placement. `celsched
// analyze` is built on it.
package analyze

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/pool"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/simulate/verdict"
)

// Input is the cluster and its policies (source.Input's Nodes,
// Namespaces, Pods, Policies, Params, Objects and Config: the pods of the
// configuration's profiles are analyzed).
type Input struct {
	source.Input
	// MinFeasible is the number of feasible nodes under which a class of
	// pods is reported (capacity); 0 means 1.
	MinFeasible int
}

// Kind is a kind of finding.
type Kind string

// The kinds of findings, in the order reports list them.
const (
	NoFeasibleNode     Kind = "no-feasible-node"
	ParamsMismatch     Kind = "params-mismatch"
	RunningInViolation Kind = "running-in-violation"
	AlwaysFalse        Kind = "always-false"
	AlwaysTrue         Kind = "always-true"
	ConstantScore      Kind = "constant-score"
	MatchesNothing     Kind = "matches-nothing"
	UnusedOverride     Kind = "unused-override"
	Capacity           Kind = "capacity"
	// NoNodeFits: pods that no node fits even without any policy (too
	// big, or selecting and tolerating no node): about the pods and the
	// cluster, not the policies, so it names none.
	NoNodeFits Kind = "no-node-fits"
	// PreemptionRefused: pods no node has room for, which preemption
	// would place without the policies and their victim rules keep
	// pending (the victims they protect).
	PreemptionRefused Kind = "preemption-refused"
	// GroupUnplaceable: a pod group that the policies keep from being
	// placed, which kube-scheduler places without them: held by a
	// preEnqueue rule, or left no placement by placement filters or
	// filters. It names the policies and rules.
	GroupUnplaceable Kind = "group-unplaceable"
	// GroupNoPlacement: a pod group that kube-scheduler places neither
	// with the policies nor without any: about the group and the
	// cluster, so it names no policy.
	GroupNoPlacement Kind = "group-no-placement"
	// TenantWritableInput: an input a tenant writes that moves a fence:
	// a params object that subjects bound in its namespace may write
	// (live only), or a rule that a pod's author can widen by setting
	// pod fields.
	TenantWritableInput Kind = "tenant-writable-input"
	// CrossTenantPreemption: a namespace whose pods may preempt pods of
	// other namespaces, no enforced victim rule applying to them
	// (preemption.go).
	CrossTenantPreemption Kind = "cross-tenant-preemption"
)

// Kinds are all kinds, in report order.
var Kinds = []Kind{NoFeasibleNode, ParamsMismatch, GroupUnplaceable, RunningInViolation, AlwaysFalse, AlwaysTrue, ConstantScore, MatchesNothing, UnusedOverride, Capacity, NoNodeFits, PreemptionRefused, GroupNoPlacement, TenantWritableInput, CrossTenantPreemption}

// Finding is one thing the policy set gets wrong, or may.
type Finding struct {
	Kind Kind `json:"kind"`
	// Policies and Rules involved: policy/rule for a filter or score
	// rule; for a pod group, the rule's field too
	// (policy/placement.filters/rule, policy/preEnqueue/rule,
	// policy/filters/rule).
	Policies []string `json:"policies"`
	Rules    []string `json:"rules,omitempty"`
	// Subject is what the finding is about: a class of pods (a namespace
	// and an example pod), a namespace, a params object, a pod group.
	Subject string `json:"subject,omitempty"`
	// Pods counts the pods concerned.
	Pods int `json:"pods,omitempty"`
	// Writers (tenant-writable-input) are the RBAC subjects bound in a
	// params object's namespace that may write it: User alice, Group
	// devs, ServiceAccount team-a/ci.
	Writers []string `json:"writers,omitempty"`
	// PodFields (tenant-writable-input) are the pod fields by which the
	// pod's author widens a rule, as CEL reads them:
	// pod.metadata.labels['tier'].
	PodFields []string `json:"podFields,omitempty"`
	// WouldEvict and NotEvicted (running-in-violation, when the policy
	// has spec.remediation) are the pods its remediation would evict, and
	// those it would not with the reason (namespace/name: NoController,
	// TooYoung, NoFeasibleNode); Budget is its budget.
	WouldEvict []string `json:"wouldEvict,omitempty"`
	NotEvicted []string `json:"notEvicted,omitempty"`
	Budget     string   `json:"budget,omitempty"`
	// GroupState (group-unplaceable, group-no-placement) is what
	// kube-scheduler does with the pod group: with the policies
	// (group-unplaceable), without any (group-no-placement). Placement
	// (group-unplaceable) is the topology domain it gets without the
	// policies, and Refused the candidate placements the policies'
	// placement filters refused, each with the policy and rule.
	GroupState verdict.GroupState            `json:"groupState,omitempty"`
	Placement  string                        `json:"placement,omitempty"`
	Refused    []celplugins.RefusedPlacement `json:"refused,omitempty"`
	Evidence   string                        `json:"evidence"`
	Suggestion string                        `json:"suggestion"`
}

// Report is what analyze found.
type Report struct {
	Summary  Summary   `json:"summary"`
	Findings []Finding `json:"findings"`
	Notes    []string  `json:"notes,omitempty"`
}

// Summary says what was analyzed.
type Summary struct {
	Nodes    int `json:"nodes"`
	Pods     int `json:"pods"`
	Policies int `json:"policies"`
	// Classes counts the classes of pods evaluated: pods every policy
	// treats alike, and each namespace's plain pod that a policy applies
	// to.
	Classes int `json:"classes"`
	// Groups counts the pod groups with pending members that
	// kube-scheduler placed, as groups (GenericWorkload on).
	Groups int          `json:"groups,omitempty"`
	ByKind map[Kind]int `json:"byKind"`
}

// EvaluationBudget is the CEL time budget of one class's evaluation: a
// guard against a stall, as in impact.
const EvaluationBudget = time.Minute

// Run analyzes the policy set.
func Run(ctx context.Context, in Input) (*Report, error) {
	r := &Report{Findings: []Finding{}, Summary: Summary{Nodes: len(in.Nodes), Policies: len(in.Policies), ByKind: map[Kind]int{}}}
	profilePods := in.ProfilePods()
	pods, bound := profilePods.Placed, profilePods.OnNodes
	r.Summary.Pods = len(pods)
	r.Notes = append(r.Notes, profilePods.Notes()...)
	namespaces := dryrun.WithNamespaces(in.Namespaces, pods...)
	cluster := dryrun.NewCluster(namespaces, in.Nodes, bound, in.Objects).WithPodGroups(in.PodGroups)
	cluster.EvaluationBudget = EvaluationBudget
	s, err := cluster.Scheduler(ctx, in.Policies, in.Params, in.Config)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// The same profiles without any policy: which nodes the built-in
	// plugins alone admit, so that a finding names a policy only when
	// removing it would change the answer.
	base, err := cluster.Scheduler(ctx, nil, nil, in.Config)
	if err != nil {
		return nil, err
	}
	defer base.Close()
	for _, p := range s.Policies() {
		if p.Err() != nil {
			first, _, _ := strings.Cut(p.Err().Error(), "\n")
			r.Notes = append(r.Notes, first+" (it rejects or holds every pod it matches; celsched validate shows every error)")
		}
	}

	classes, err := classify(ctx, s, pods, plainPods(namespaces, pods, in.Config))
	if err != nil {
		return nil, err
	}
	r.Summary.Classes = len(classes)
	a := &analysis{in: in, rules: map[string]*ruleStats{}, scores: map[string]*scoreStats{}, applied: sets.New[string](),
		violations: map[[2]string]*violation{}}
	// The classes are evaluated one per CPU, and their verdicts taken in
	// order as soon as each is ready (a class's verdicts hold a value per
	// node and policy: only a window of them is kept at once). A worker
	// does not wait for the others' classes to finish, only for the
	// window to move.
	workers := runtime.GOMAXPROCS(0)
	w := &window{size: 2 * workers, done: make([]*classVerdicts, len(classes))}
	w.moved = sync.NewCond(&w.mu)
	err = pool.Run(ctx, workers, len(classes), func(ctx context.Context, i int) error {
		if !w.wait(i) {
			return nil // another class failed: its error is Run's
		}
		c := classes[i]
		cv, err := evaluateClass(ctx, s, base, c, in.MinFeasible)
		w.finish(i, cv, err, func(i int, cv *classVerdicts) {
			a.applied.Insert(cv.applies...)
			r.Findings = append(r.Findings, a.class(classes[i], cv.verdicts, cv.feasible)...)
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := a.otherSchedulers(ctx, s, bound); err != nil {
		return nil, err
	}
	if err := a.remediation(ctx, s); err != nil {
		return nil, err
	}
	preemption, err := crossTenantPreemption(ctx, s, pods, bound)
	if err != nil {
		return nil, err
	}
	r.Findings = append(r.Findings, preemption...)
	r.Findings = append(r.Findings, a.violationFindings()...)
	r.Findings = append(r.Findings, a.ruleFindings()...)
	r.Findings = append(r.Findings, a.scoreFindings()...)
	for _, p := range s.Policies() {
		if !a.applied.Has(p.Name) {
			f := Finding{Kind: MatchesNothing, Policies: []string{p.Name},
				Evidence:   fmt.Sprintf("its selectors and match conditions select none of the %d pods, nor the plain pod of any of the %d namespaces", len(pods), len(namespaces)),
				Suggestion: "check its namespaceSelector, podSelector, schedulerNames and match conditions; delete it if it is no longer needed"}
			if field := gatedField(in.Policies, p.Name); field != "" && !dryrun.GroupsOn() {
				f.Evidence += fmt.Sprintf("; its match reads %s, which is empty while the feature gate GenericWorkload is off", field)
				f.Suggestion = "turn GenericWorkload on (kube-scheduler's --feature-gates, and the API server's) for the pod groups it is written for; it matches nothing until then"
			}
			r.Findings = append(r.Findings, f)
		}
	}
	r.Findings = append(r.Findings, unusedOverrides(s.Policies(), namespaces)...)
	if err := r.groups(ctx, s, base, in.PodGroups, pods); err != nil {
		return nil, err
	}
	tenant, notes, err := tenantFindings(ctx, in, s.Policies())
	if err != nil {
		return nil, err
	}
	r.Findings = append(r.Findings, tenant...)
	r.Notes = append(r.Notes, notes...)
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Kind != b.Kind {
			return slices.Index(Kinds, a.Kind) < slices.Index(Kinds, b.Kind)
		}
		return cmp.Or(strings.Compare(a.Subject, b.Subject), slices.Compare(a.Policies, b.Policies), slices.Compare(a.Rules, b.Rules)) < 0
	})
	for i := range r.Findings {
		r.Summary.ByKind[r.Findings[i].Kind]++
	}
	return r, nil
}

// classVerdicts are what a class's findings are made of.
type classVerdicts struct {
	applies  []string
	verdicts *dryrun.Verdicts
	feasible *classFeasible
}

// evaluateClass evaluates a class's pod: the policies that apply to it,
// their verdicts on every node, and the nodes the framework finds
// feasible (with only the built-in plugins too, when minFeasible asks).
func evaluateClass(ctx context.Context, s, base *dryrun.Scheduler, c *class, minFeasible int) (*classVerdicts, error) {
	cv := &classVerdicts{}
	var err error
	if cv.applies, err = s.Applies(ctx, c.pod); err != nil {
		return nil, err
	}
	if cv.verdicts, err = s.Verdicts(ctx, c.pod); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", c.pod.Namespace, c.pod.Name, err)
	}
	needBase := func(r *verdict.Result) bool {
		return cv.verdicts.Rejection == nil && len(r.Feasible) < max(minFeasible, 1)
	}
	if cv.feasible, err = feasibility(ctx, s, base, c, cv.verdicts.Result, needBase); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", c.pod.Namespace, c.pod.Name, err)
	}
	return cv, nil
}

// window hands the classes' verdicts, evaluated in parallel, to one
// consumer in the classes' order, keeping at most size of them: a class
// is started when it is within size of the first not yet taken. The
// pool hands out classes in order, so the first not yet taken is always
// being evaluated or done: the window moves. Its fields are guarded by
// mu; the consumer runs under it.
type window struct {
	mu    sync.Mutex
	moved *sync.Cond
	size  int
	// next is the first class not yet taken; done holds the classes
	// evaluated and not yet taken.
	next   int
	done   []*classVerdicts
	failed bool
}

// wait waits until class i is within the window; false when a class
// failed (nothing more is taken).
func (w *window) wait(i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i >= w.next+w.size && !w.failed {
		w.moved.Wait()
	}
	return !w.failed
}

// finish records class i's verdicts (or its failure) and gives take every
// class now ready in order.
func (w *window) finish(i int, cv *classVerdicts, err error, take func(int, *classVerdicts)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.moved.Broadcast()
	if err != nil {
		w.failed = true
		return
	}
	w.done[i] = cv
	for ; w.next < len(w.done) && w.done[w.next] != nil && !w.failed; w.next++ {
		take(w.next, w.done[w.next])
		w.done[w.next] = nil
	}
}

// class is pods that every policy treats alike.
type class struct {
	pod *corev1.Pod // an example, unbound
	// bound are the class's pods on nodes; pods counts all of them.
	bound []*corev1.Pod
	pods  int
	plain bool
}

// plainPods are, for each namespace with no pod of the profiles, a pod
// with no labels and nothing requested, for the first profile: what a
// policy that selects by namespace alone gives the namespace's first
// workload.
func plainPods(namespaces []*corev1.Namespace, pods []*corev1.Pod, cfg *schedulerconfig.KubeSchedulerConfiguration) []*corev1.Pod {
	populated := sets.New[string]()
	for _, p := range pods {
		populated.Insert(p.Namespace)
	}
	var out []*corev1.Pod
	for _, ns := range namespaces {
		if populated.Has(ns.Name) {
			continue
		}
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "(a plain pod)", UID: ktypes.UID("analyze-plain-" + ns.Name)},
			Spec: corev1.PodSpec{SchedulerName: cfg.Profiles[0].SchedulerName,
				Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		})
	}
	return out
}

// classify groups the pods into classes (dryrun.Scheduler.Class), and adds
// each namespace's plain pod that a policy applies to and no pod shares a
// class with.
func classify(ctx context.Context, s *dryrun.Scheduler, pods, plain []*corev1.Pod) ([]*class, error) {
	byKey := map[string]*class{}
	var out []*class
	add := func(p *corev1.Pod, isPlain bool) {
		// A pending pod and a bound replica are one class: the node a pod
		// is on and its status are not what policies select by.
		example := p.DeepCopy()
		example.Spec.NodeName, example.Status = "", corev1.PodStatus{}
		key, ok := s.Class(example)
		if !ok {
			key = "pod:" + string(p.UID)
		}
		c := byKey[key]
		if c == nil {
			c = &class{pod: example, plain: isPlain}
			byKey[key] = c
			out = append(out, c)
		}
		if isPlain {
			return
		}
		c.pods++
		if p.Spec.NodeName != "" {
			c.bound = append(c.bound, p)
		}
	}
	for _, p := range pods {
		add(p, false)
	}
	for _, p := range plain {
		applies, err := s.Applies(ctx, p)
		if err != nil {
			return nil, err
		}
		if len(applies) > 0 {
			add(p, true)
		}
	}
	// The classes of a namespace one after the other: a rule's remembered
	// results on a node are kept per namespace (and the pod fields it
	// reads), a few at a time, so that classes taken in turn from many
	// namespaces would miss them every time. Each namespace's classes keep
	// their order, and so does what the report lists per namespace.
	slices.SortStableFunc(out, func(a, b *class) int { return strings.Compare(a.pod.Namespace, b.pod.Namespace) })
	return out, nil
}

// analysis accumulates what the classes' verdicts say.
type analysis struct {
	in      Input
	applied sets.Set[string]
	// rules counts each filter rule's verdicts (policy/rule); scores
	// each score rule's.
	rules  map[string]*ruleStats
	scores map[string]*scoreStats
	// violations are the bound pods whose node a policy refuses, by
	// policy and namespace.
	violations map[[2]string]*violation
}

type ruleStats struct {
	policy, rule string
	// pass and fail count the rule's true and false verdicts.
	pass, fail int
}

type scoreStats struct {
	policy, rule string
	// varies: some class saw two values on its feasible nodes; value is
	// the one value seen otherwise.
	varies, seen bool
	value        float64
}

type violation struct {
	pods    []string
	reasons sets.Set[string]
	// bound are the pods; wouldEvict, notEvicted and budget what the
	// policy's spec.remediation would do (analysis.remediation).
	bound                  []*corev1.Pod
	wouldEvict, notEvicted []string
	budget                 string
}

// classFeasible is what the one evaluator (kube-scheduler's framework for
// the pod's profile) says of a class's pod: its feasible nodes with the
// policies, and the nodes the built-in plugins admit without any policy.
type classFeasible struct {
	// policies and builtin are the framework's verdicts with and without
	// the policies; builtin is nil when the class's findings do not need
	// it (feasibility's needBase).
	policies, builtin *verdict.Result
	// preempts and basePreempts are what preemption would do for a
	// pending pod of the class that no node fits even without the
	// policies, with and without them (nil otherwise).
	preempts, basePreempts *verdict.PreemptionResult
}

// feasibility is what the framework says of the class's pod with the
// policies (withPolicies: the run Verdicts recorded), and without them
// (base) when needBase says the findings need it, past any PreEnqueue
// hold: a hold waits for a change by design (a namespace's approval), and
// what analyze asks is which nodes the pods may have once released. For a
// class with pending pods that no node fits without the policies either,
// it asks what preemption would do, both ways: a pod that waits for room
// may be given it by evicting pods of lower priority, unless the victim
// rules protect them.
func feasibility(ctx context.Context, s, base *dryrun.Scheduler, c *class, withPolicies *verdict.Result, needBase func(withPolicies *verdict.Result) bool) (*classFeasible, error) {
	var err error
	out := &classFeasible{policies: withPolicies}
	if !needBase(withPolicies) {
		return out, nil
	}
	if out.builtin, err = base.FeasibleOnceReleased(ctx, c.pod); err != nil {
		return nil, err
	}
	if len(out.builtin.Feasible) > 0 || c.pods == len(c.bound) || withPolicies.PreEnqueue != nil || withPolicies.PreFilter != nil {
		return out, nil
	}
	if _, out.basePreempts, err = base.Preempt(ctx, c.pod); err != nil {
		return nil, err
	}
	if out.basePreempts != nil && out.basePreempts.Node != "" {
		if _, out.preempts, err = s.Preempt(ctx, c.pod); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// indexes returns the indexes in nodes (name order) of the names given.
func indexes(nodes []*corev1.Node, names []string) []int {
	out := make([]int, 0, len(names))
	for _, name := range names {
		if n, ok := slices.BinarySearchFunc(nodes, name, func(node *corev1.Node, name string) int { return strings.Compare(node.Name, name) }); ok {
			out = append(out, n)
		}
	}
	return out
}

// class evaluates one class's verdicts: feasibility (the framework's) and
// its findings, and adds to the rule, score and violation counts.
func (a *analysis) class(c *class, v *dryrun.Verdicts, f *classFeasible) []Finding {
	subject := fmt.Sprintf("pods of namespace %s like %s", c.pod.Namespace, c.pod.Name)
	if c.plain {
		subject = fmt.Sprintf("a plain pod of namespace %s (no labels)", c.pod.Namespace)
	}
	for _, pv := range v.Filters {
		if pv.Params != "" {
			continue // its verdicts follow its params: params-mismatch
		}
		for rule, verdicts := range pv.Rules {
			key := pv.Policy + "/" + rule
			st := a.rules[key]
			if st == nil {
				st = &ruleStats{policy: pv.Policy, rule: rule}
				a.rules[key] = st
			}
			for _, x := range verdicts {
				switch x {
				case 1:
					st.pass++
				case 0:
					st.fail++
				}
			}
		}
	}
	for _, bp := range c.bound {
		n := slices.IndexFunc(v.Nodes, func(node *corev1.Node) bool { return node.Name == bp.Spec.NodeName })
		if n < 0 {
			continue
		}
		for _, pv := range v.Filters {
			if pv.Pass[n] {
				continue
			}
			a.violate(pv.Policy, bp, "", pv.Reason[n])
		}
	}

	feasible := indexes(v.Nodes, f.policies.Feasible)
	a.addScores(v, feasible)
	switch {
	case v.Rejection != nil && v.Rejection.Rule == "paramRef":
		return []Finding{{Kind: ParamsMismatch, Policies: []string{v.Rejection.Policy.Name}, Subject: "namespace " + c.pod.Namespace, Pods: c.pods,
			Evidence:   fmt.Sprintf("for %s, every node is refused: %s", subject, v.Rejection.String()),
			Suggestion: "create the namespace's params object (parameterNotFoundAction Allow would place its pods as if the policy had no params: where the missing object is the fence, it opens it)"}}
	case v.Rejection != nil:
		return []Finding{{Kind: NoFeasibleNode, Policies: []string{v.Rejection.Policy.Name}, Subject: subject, Pods: c.pods,
			Evidence:   "every node is refused: " + v.Rejection.String(),
			Suggestion: "fix the policy's match conditions, or set failurePolicy Ignore"}}
	case len(feasible) > 0 && len(feasible) >= max(a.in.MinFeasible, 1):
		return nil
	}
	// Fewer feasible nodes than the minimum: feasibility evaluated the
	// class without the policies too.
	builtin := indexes(v.Nodes, f.builtin.Feasible)
	switch {
	case len(builtin) == 0 && c.pods == len(c.bound):
		// Every pod of the class runs: that no node has room for
		// another is capacity, not a pod left without a node.
		return nil
	case len(builtin) == 0 && f.basePreempts != nil && f.basePreempts.Node != "":
		// No node has room, and preemption would make some without the
		// policies: their victim rules decide.
		if f.preempts == nil || f.preempts.Node != "" {
			return nil // preemption places them with the policies too
		}
		return []Finding{a.preemptionRefused(c, f, subject)}
	case len(builtin) == 0:
		// No node fits these pods whatever the policies: not a policy
		// finding (removing every policy would change nothing).
		return []Finding{{Kind: NoNodeFits, Subject: subject, Pods: c.pods,
			Evidence:   "no node fits these pods even without any policy: " + rejections(f.builtin),
			Suggestion: "no policy is involved: change the pods' requests, node selector, affinity or tolerations, or add nodes that fit them"}}
	case len(feasible) == 0:
		return []Finding{a.noFeasibleNode(c, v, builtin, subject)}
	}
	return []Finding{a.capacity(c, v, feasible, builtin, subject)}
}

// preemptionRefused is the finding of a class whose pods wait for room
// that preemption would make without the policies, and the victim rules
// refuse: which policies and rules protect which victims.
func (a *analysis) preemptionRefused(c *class, f *classFeasible, subject string) Finding {
	var policies []string
	for _, p := range f.preempts.Protected {
		if _, rest, ok := strings.Cut(p, "protected by SchedulingPolicy "); ok {
			if name, _, ok := strings.Cut(rest, ","); ok && !slices.Contains(policies, name) {
				policies = append(policies, name)
			}
		}
	}
	slices.Sort(policies)
	protected := f.preempts.Protected
	more := ""
	if len(protected) > 2 {
		protected, more = protected[:2], fmt.Sprintf("; %d more", len(f.preempts.Protected)-2)
	}
	return Finding{Kind: PreemptionRefused, Policies: policies, Subject: subject, Pods: c.pods,
		Evidence: fmt.Sprintf("no node has room for them; without the policies preemption would place them on %s, evicting %s; the victim rules protect %s%s",
			f.basePreempts.Node, strings.Join(f.basePreempts.Victims, ", "), strings.Join(protected, "; "), more),
		Suggestion: "where the victims are another tenant's, this is what the rules are for; otherwise let a victim rule admit them (spec.preemption.victims), or give these pods room"}
}

// rejections summarizes why the framework found no node: each rejection
// and how many nodes it was given for, most frequent first.
func rejections(r *verdict.Result) string {
	if r.PreEnqueue != nil {
		return fmt.Sprintf("held by %s: %s", r.PreEnqueue.Plugin, r.PreEnqueue.Message)
	}
	if r.PreFilter != nil {
		return fmt.Sprintf("rejected by %s: %s", r.PreFilter.Plugin, r.PreFilter.Message)
	}
	byRejection := map[verdict.Rejection]int{} // by value: nothing built per node
	for _, n := range r.Nodes {
		if n.RejectedBy != nil {
			byRejection[*n.RejectedBy]++
		}
	}
	counts := make(map[string]int, len(byRejection))
	for rej, c := range byRejection {
		counts[rej.Message+" ("+rej.Plugin+")"] += c
	}
	reasons := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	parts := make([]string, len(reasons))
	for i, reason := range reasons {
		parts[i] = fmt.Sprintf("%d node(s): %s", counts[reason], reason)
	}
	return fmt.Sprintf("%d node(s) evaluated; %s", len(r.Nodes), strings.Join(parts, "; "))
}

// noFeasibleNode names the policies whose filters together leave the
// class no node: a policy that refuses every node the built-in node
// filters admit on its own, or else the fewest policies (picked greedily)
// whose intersection is empty.
func (a *analysis) noFeasibleNode(c *class, v *dryrun.Verdicts, builtin []int, subject string) Finding {
	admitted := func(pv dryrun.PolicyVerdicts, remaining []int) (keep []int) {
		for _, n := range remaining {
			if pv.Pass[n] {
				keep = append(keep, n)
			}
		}
		return keep
	}
	remaining := builtin
	excluded := len(v.Nodes) - len(builtin)
	f := Finding{Kind: NoFeasibleNode, Subject: subject, Pods: c.pods}
	var parts []string
	for len(remaining) > 0 {
		best, bestLeft := -1, len(remaining)
		for i, pv := range v.Filters {
			if left := len(admitted(pv, remaining)); left < bestLeft {
				best, bestLeft = i, left
			}
		}
		if best < 0 {
			// No policy refuses a node the built-in plugins admit: the
			// framework's answer comes from how they combine (its filters
			// see the policies' pods too), which no single policy explains.
			f.Policies = nil
			f.Evidence = fmt.Sprintf("%d node(s) (%s) pass the built-in plugins and every policy's filters one by one, yet no node passes them together",
				len(builtin), nodeList(v.Nodes, builtin))
			f.Suggestion = "run celsched eval or explain on one of these pods to see each node's verdict"
			return f
		}
		pv := v.Filters[best]
		kept := admitted(pv, remaining)
		name := pv.Policy
		if pv.Params != "" {
			name += " (params " + pv.Params + ")"
		}
		f.Policies = append(f.Policies, pv.Policy)
		if len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("%s admits %s", name, nodeList(v.Nodes, kept)))
		} else {
			parts = append(parts, fmt.Sprintf("of those, %s admits %s", name, nodeList(v.Nodes, kept)))
		}
		if len(kept) == 0 && len(f.Policies) == 1 {
			// One policy refuses every node the built-in plugins leave.
			reason := firstReason(pv)
			if elsewhere := admitted(pv, allNodes(v.Nodes)); len(elsewhere) > 0 {
				// It admits nodes, but not one the pods' own constraints
				// (selector, affinity, tolerations), taints or capacity
				// leave: the cause is both, not the policy alone.
				f.Evidence = fmt.Sprintf("the built-in plugins (the pods' own node selector, affinity and tolerations, taints, resources) leave %s, and %s refuses %s: %s; %s admits %s, which the built-in plugins refuse",
					nodeList(v.Nodes, builtin), name, them(len(builtin)), reason, pv.Policy, nodeList(v.Nodes, elsewhere))
				f.Suggestion = "the pods' own constraints and the policy have no node in common: point the pods at nodes the policy admits, or change the policy"
				return f
			}
			if pv.Params != "" || strings.Contains(reason, "rule paramRef:") {
				f.Kind = ParamsMismatch
				f.Subject = cmp.Or(pv.Params, subject)
				f.Evidence = fmt.Sprintf("for %s, %s refuses every node: %s", subject, pv.Policy, reason)
				f.Suggestion = "give the namespace its params object, or values that some node has"
				return f
			}
			f.Evidence = fmt.Sprintf("%s refuses every node: %s", pv.Policy, reason)
			f.Suggestion = "fix the policy, or label nodes for these pods"
			return f
		}
		remaining = kept
	}
	f.Evidence = strings.Join(parts, "; ") + ": together, no node"
	if excluded > 0 {
		f.Evidence += fmt.Sprintf(" (and the built-in plugins refuse the other %d node(s): taints, cordons, resources, the pods' own selectors)", excluded)
	}
	slices.Sort(f.Policies)
	f.Suggestion = "these policies cannot all be met: change one, or label nodes that meet them all"
	return f
}

// gatedField is the pod group field the named policy's match conditions
// read (pod.spec.schedulingGroup, or podGroup), which only GenericWorkload
// fills; empty when they read neither.
func gatedField(policies []*schedv1alpha1.SchedulingPolicy, name string) string {
	for _, p := range policies {
		if p.Name != name || p.Spec.Match == nil {
			continue
		}
		for _, c := range p.Spec.Match.Conditions {
			switch {
			case strings.Contains(c.Expression, "schedulingGroup"):
				return "pod.spec.schedulingGroup"
			case strings.Contains(c.Expression, "podGroup"):
				return "podGroup"
			}
		}
	}
	return ""
}

// allNodes are the indexes of every node.
func allNodes(nodes []*corev1.Node) []int {
	out := make([]int, len(nodes))
	for i := range out {
		out[i] = i
	}
	return out
}

// them is "it" or "them", for n nodes.
func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func firstReason(pv dryrun.PolicyVerdicts) string {
	for _, r := range pv.Reason {
		if r != "" {
			return r
		}
	}
	return ""
}

// nodeList names nodes, at most three, with a count.
func nodeList(nodes []*corev1.Node, idx []int) string {
	if len(idx) == 0 {
		return "no node"
	}
	names := make([]string, 0, 3)
	for _, n := range idx[:min(3, len(idx))] {
		names = append(names, nodes[n].Name)
	}
	s := fmt.Sprintf("%d node(s) (%s", len(idx), strings.Join(names, ", "))
	if len(idx) > 3 {
		s += ", ..."
	}
	return s + ")"
}

// capacity reports a class with fewer feasible nodes than the minimum,
// naming the policies that refuse a node the built-in plugins admit
// (removing one of them would widen the class's nodes).
func (a *analysis) capacity(c *class, v *dryrun.Verdicts, feasible, builtin []int, subject string) Finding {
	policies, _ := refusing(v, builtin)
	f := Finding{Kind: Capacity, Policies: sets.List(policies), Subject: subject, Pods: c.pods,
		Evidence: fmt.Sprintf("%s feasible (the minimum is %d); without the policies, %s",
			nodeList(v.Nodes, feasible), max(a.in.MinFeasible, 1), nodeList(v.Nodes, builtin)),
		Suggestion: "widen the policies for these pods, or add nodes that meet them"}
	if policies.Len() == 0 {
		f.Suggestion = "no policy narrows these pods' nodes: add nodes that fit them"
	}
	return f
}

// refusing names the enforced policies whose filters refuse one of the
// nodes (indexes in v.Nodes), and their rules that are false or fail
// there (policy/filters/rule).
func refusing(v *dryrun.Verdicts, nodes []int) (policies, rules sets.Set[string]) {
	policies, rules = sets.New[string](), sets.New[string]()
	for _, pv := range v.Filters {
		for _, n := range nodes {
			if pv.Pass[n] {
				continue
			}
			policies.Insert(pv.Policy)
			for rule, verdicts := range pv.Rules {
				if verdicts[n] != 1 {
					rules.Insert(pv.Policy + "/filters/" + rule)
				}
			}
		}
	}
	return policies, rules
}

// addScores records the score rules' values on the class's feasible
// nodes.
func (a *analysis) addScores(v *dryrun.Verdicts, feasible []int) {
	for _, sv := range v.Scores {
		for rule, values := range sv.Rules {
			key := sv.Policy + "/" + rule
			st := a.scores[key]
			if st == nil {
				st = &scoreStats{policy: sv.Policy, rule: rule}
				a.scores[key] = st
			}
			for _, n := range feasible {
				x := values[n]
				if math.IsNaN(x) {
					continue
				}
				switch {
				case !st.seen:
					st.seen, st.value = true, x
				case x != st.value:
					st.varies = true
				}
			}
		}
	}
}

// violate records a bound pod that the policy refuses on its node, for
// the reason; note follows its place in the evidence.
func (a *analysis) violate(policy string, pod *corev1.Pod, note, reason string) {
	key := [2]string{policy, pod.Namespace}
	v := a.violations[key]
	if v == nil {
		v = &violation{reasons: sets.New[string]()}
		a.violations[key] = v
	}
	v.pods = append(v.pods, pod.Namespace+"/"+pod.Name+" on "+pod.Spec.NodeName+note)
	v.bound = append(v.bound, pod)
	v.reasons.Insert(reason)
}

// otherSchedulers adds to the violations the running pods no profile
// placed (another scheduler's, or created with spec.nodeName) that the
// enforced policies refuse on their node, judged as the first profile
// would judge them (the drift controller's Refusals), except for the
// policies whose driftScope is ProfilePods.
func (a *analysis) otherSchedulers(ctx context.Context, s *dryrun.Scheduler, bound []*corev1.Pod) error {
	profiles := make([]string, len(a.in.Config.Profiles))
	for i, p := range a.in.Config.Profiles {
		profiles[i] = p.SchedulerName
	}
	scopes := map[string]schedv1alpha1.DriftScope{}
	for _, p := range a.in.Policies {
		scopes[p.Name] = p.Spec.DriftScope
	}
	for _, pod := range bound {
		judged, foreign := verdict.AsProfile(pod, profiles)
		if !foreign {
			continue
		}
		refusals, err := s.Refusals(ctx, judged)
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		for _, r := range refusals {
			if scopes[r.Policy] == schedv1alpha1.DriftProfilePods {
				continue
			}
			a.violate(r.Policy, pod, " (placed by "+celplugins.SchedulerName(pod)+")", r.Message)
		}
	}
	return nil
}

// remediation says, for the violations of the policies with
// spec.remediation, which pods it would evict (dryrun.Remediation).
func (a *analysis) remediation(ctx context.Context, s *dryrun.Scheduler) error {
	now := time.Now()
	for key, v := range a.violations {
		i := slices.IndexFunc(a.in.Policies, func(p *schedv1alpha1.SchedulingPolicy) bool { return p.Name == key[0] })
		if i < 0 || a.in.Policies[i].Spec.Remediation == nil {
			continue
		}
		v.budget = dryrun.Budget(a.in.Policies[i].Spec.Remediation)
		for _, pod := range v.bound {
			r, err := s.Remediation(ctx, a.in.Policies[i:i+1], pod, a.in.Owners, now)
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			switch {
			case r == nil:
			case r.WouldEvict:
				v.wouldEvict = append(v.wouldEvict, pod.Namespace+"/"+pod.Name)
			default:
				v.notEvicted = append(v.notEvicted, pod.Namespace+"/"+pod.Name+": "+string(r.NotEvicted))
			}
		}
		slices.Sort(v.wouldEvict)
		slices.Sort(v.notEvicted)
	}
	return nil
}

func (a *analysis) violationFindings() []Finding {
	var out []Finding
	for key, v := range a.violations {
		reasons := sets.List(v.reasons)
		examples := v.pods[:min(3, len(v.pods))]
		evidence := fmt.Sprintf("%d bound pod(s) on nodes the policy refuses now (%s): %s", len(v.pods), strings.Join(examples, ", "), strings.Join(reasons[:min(2, len(reasons))], "; "))
		if v.budget != "" {
			evidence += fmt.Sprintf("; its remediation (%s) would evict %d of them", v.budget, len(v.wouldEvict))
			if len(v.notEvicted) > 0 {
				evidence += fmt.Sprintf(", not %d (%s)", len(v.notEvicted), notEvictedWhy(v.notEvicted))
			}
		}
		out = append(out, Finding{Kind: RunningInViolation, Policies: []string{key[0]}, Subject: "namespace " + key[1], Pods: len(v.pods),
			WouldEvict: v.wouldEvict, NotEvicted: v.notEvicted, Budget: v.budget,
			Evidence:   evidence,
			Suggestion: "they were placed before the policy tightened, or by another scheduler: they do not come back to these nodes after an eviction; move them (a rollout, a descheduler) or relax the policy"})
	}
	return out
}

// notEvictedWhy counts the reasons of the pods remediation would not
// evict ("namespace/name: Reason" each): "NoController: 2, ReplacementPinned: 1".
func notEvictedWhy(notEvicted []string) string {
	counts := map[string]int{}
	for _, s := range notEvicted {
		_, reason, _ := strings.Cut(s, ": ")
		counts[reason]++
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s: %d", r, counts[r]))
	}
	return strings.Join(parts, ", ")
}

func (a *analysis) ruleFindings() []Finding {
	var out []Finding
	for key, st := range a.rules {
		switch {
		case st.fail == 0 && st.pass > 0:
			out = append(out, Finding{Kind: AlwaysTrue, Policies: []string{st.policy}, Rules: []string{key},
				Evidence:   fmt.Sprintf("true on every node for every class of pods it applies to (%d evaluations)", st.pass),
				Suggestion: "it filters nothing in this cluster: check its expression (a misspelt label is absent everywhere) or delete it"})
		case st.pass == 0 && st.fail > 0:
			out = append(out, Finding{Kind: AlwaysFalse, Policies: []string{st.policy}, Rules: []string{key},
				Evidence:   fmt.Sprintf("false on every node for every class of pods it applies to (%d evaluations)", st.fail),
				Suggestion: "it refuses every node to the pods it matches: check its expression and the node labels it reads"})
		}
	}
	return out
}

func (a *analysis) scoreFindings() []Finding {
	var out []Finding
	for key, st := range a.scores {
		if st.seen && !st.varies {
			out = append(out, Finding{Kind: ConstantScore, Policies: []string{st.policy}, Rules: []string{key},
				Evidence:   fmt.Sprintf("%g on every feasible node for every class of pods it applies to", st.value),
				Suggestion: "it prefers nothing in this cluster: check its expression and the node labels it reads"})
		}
	}
	return out
}

// unusedOverrides finds the enforcementOverrides that decide the
// enforcement of none of the namespaces: their selector selects none, or
// only namespaces an earlier override selects (the first wins).
func unusedOverrides(policies []*engine.CompiledPolicy, namespaces []*corev1.Namespace) []Finding {
	var out []Finding
	for _, p := range policies {
		if p.NumOverrides() == 0 {
			continue
		}
		used := sets.New[string]()
		for _, ns := range namespaces {
			used.Insert(p.ForNamespace(ns).EnforcedBy)
		}
		for i := range p.NumOverrides() {
			field := fmt.Sprintf("spec.enforcementOverrides[%d]", i)
			if used.Has(field) {
				continue
			}
			out = append(out, Finding{Kind: UnusedOverride, Policies: []string{p.Name}, Subject: field,
				Evidence: fmt.Sprintf("it decides the enforcement of none of the %d namespaces: its namespaceSelector selects none, "+
					"or only namespaces that an earlier override selects (the first that selects a namespace applies)", len(namespaces)),
				Suggestion: "check its namespaceSelector and its place in the list; remove it if it is no longer needed"})
		}
	}
	return out
}
