package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
)

// This file is the proof that a remembered result is the result: policies
// generated to read the pod, its namespace, its group, the node, nodeInfo
// and params through every construct (variables, cel.bind, comprehensions,
// optionals, has, messageExpressions, match conditions, nodeInfo.pods filters) are
// evaluated for a sequence of pods that differ from the one before in one
// field at a time, in order through the memo, and each also fresh: the
// verdicts, messages, errors and scores must be identical. Pods whose
// batching signatures are equal must get identical outcomes too.

// Fragments of sequence policies. {s} is a fuzzed string literal, {n} a
// fuzzed integer, {k} a small non-negative one.
var (
	seqBools = []string{
		"node.metadata.labels[?'team'].orValue('') == pod.metadata.namespace",
		"has(pod.metadata.namespace) && pod.metadata.namespace.endsWith({s})",
		"pod.metadata.?namespace.orValue('') != node.metadata.labels[?'team'].orValue('x')",
		"cel.bind(ns, pod.metadata.namespace, ns == node.metadata.labels[?'team'].orValue(''))",
		"nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace && p.labels[?'app'].orValue('') == pod.metadata.?labels[?'app'].orValue('')).size() < {k}",
		"nodeInfo.pods.exists(p, p.namespace != pod.metadata.namespace)",
		"namespaceObject.metadata.?labels[?'tier'].orValue('') == node.metadata.labels[?'tier'].orValue('')",
		"namespaceObject.metadata.name == pod.metadata.namespace",
		"pod.metadata.?labels[?'app'].orValue('') == {s} || node.metadata.labels[?'zone'].orValue('') == 'a'",
		"pod.metadata.?annotations[?'a'].orValue('') == node.metadata.labels[?'zone'].orValue('')",
		"pod.spec.?priority.orValue(0) < {n}",
		"pod.spec.containers.exists(c, has(c.resources.requests) && string(c.resources.requests['cpu']) == {s})",
		"pod.spec.?tolerations.orValue([]).exists(t, t.key == node.metadata.labels[?'zone'].orValue(''))",
		"pod.metadata.?ownerReferences.orValue([]).exists(o, o.name == {s})",
		"pod.metadata.name.startsWith({s})",
		"pod.metadata.?generateName.orValue('') == {s}",
		"pod.kind == 'Pod' || node.metadata.labels[?'zone'].orValue('') == 'b'",
		"pod.apiVersion == ''",
		"pod.status.?phase.orValue('') == '' && node.metadata.name != ''",
		"pod.metadata.uid != ''",
		"[pod.metadata.namespace].all(x, size(x) > {k})",
		"lists.range({k}).all(i, i >= 0) && node.metadata.name != ''",
		"pod == pod",
		"size(pod.metadata.namespace) > {k}",
		"node.metadata.labels[?'zone'].orValue('') == {s}",
		"nodeInfo.podCount < {k} || node.metadata.labels[?'zone'].orValue('') == 'b'",
		// The labels by constant keys (the memo key holds those labels
		// alone), and as a whole (it holds them all).
		"'app' in pod.metadata.labels && node.metadata.labels[?'zone'].orValue('') != {s}",
		"has(pod.metadata.labels.app) || node.metadata.labels[?'zone'].orValue('') == 'a'",
		"pod.metadata.labels.?app.orValue('') + node.metadata.labels[?'zone'].orValue('') != {s}",
		"pod.metadata.labels['app'] == node.metadata.labels[?'app'].orValue('web')",
		"pod.metadata.labels.exists(k, k.startsWith({s})) || node.metadata.labels[?'zone'].orValue('') == 'b'",
		"size(pod.metadata.labels) > {k} || node.metadata.labels[?'zone'].orValue('') == 'b'",
		"has(pod.metadata.labels) && node.metadata.name != ''",
		"cel.bind(l, pod.metadata.labels, l[?'app'].orValue('') == node.metadata.labels[?'zone'].orValue(''))",
		// The pod's group: its object, and where its members are.
		"podGroup.minCount <= {k} || node.metadata.labels[?'zone'].orValue('') == 'a'",
		"podGroup.metadata.labels[?'tier'].orValue('') == node.metadata.labels[?'tier'].orValue('')",
		"podGroup.metadata.name == {s} || node.metadata.labels[?'zone'].orValue('') == 'b'",
		"podGroup.assignedNodes.all(n, n != node.metadata.name)",
		"size(podGroup.assignedNodes) < {k} || node.metadata.name in podGroup.assignedNodes",
	}
	seqNumbers = []string{
		"nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu'] + nodeInfo.podCount",
		"nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size()",
		"size(pod.metadata.namespace)",
		"pod.spec.?priority.orValue(0)",
		"node.metadata.labels[?'team'].orValue('') == pod.metadata.namespace ? 10 : {n}",
		"size(namespaceObject.metadata.?labels[?'tier'].orValue('')) + nodeInfo.podCount",
		"{n}",
		"size(pod.metadata.?labels[?'app'].orValue(''))",
		"lists.range({k}).size()",
		"size(podGroup.assignedNodes) + podGroup.minCount",
	}
	seqStrings = []string{
		"'ns ' + pod.metadata.namespace",
		"'pod ' + pod.metadata.name",
		"pod.metadata.?labels[?'app'].orValue('-') + ' on ' + node.metadata.name",
		"namespaceObject.metadata.name",
		"{s}",
		"'%d pods of the namespace'.format([nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size()])",
		"'group ' + podGroup.metadata.name + ' on ' + podGroup.assignedNodes.join(',')",
	}
	// seqVariables are the variables a policy may have, each with the
	// fragments that read it.
	seqVariables = []struct {
		name, expression string
		bools, numbers   []string
	}{
		{"ns", "pod.metadata.namespace", []string{"variables.ns == node.metadata.labels[?'team'].orValue('')", "variables.ns != {s}"}, nil},
		{"tier", "namespaceObject.metadata.?labels[?'tier'].orValue('')", []string{"variables.tier == node.metadata.labels[?'tier'].orValue('')"}, nil},
		{"sameNs", "nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size()", []string{"variables.sameNs < {k}"}, []string{"variables.sameNs"}},
		{"loop", "lists.range({k}).filter(i, i % 2 == 0).size()", []string{"variables.loop >= 0 && node.metadata.name != ''"}, []string{"variables.loop"}},
		{"placed", "size(podGroup.assignedNodes)", []string{"variables.placed < {k}"}, []string{"variables.placed"}},
		{"app", "pod.metadata.?labels[?'app'].orValue('') + pod.spec.?priorityClassName.orValue('')", []string{"variables.app == node.metadata.labels[?'app'].orValue('')"}, []string{"size(variables.app)"}},
	}
	seqParamBools = []string{
		"node.metadata.labels[?'zone'].orValue('') in params.data[?'zones'].orValue('').split(',')",
		"variables.zones.exists(z, z == node.metadata.labels[?'zone'].orValue(''))",
	}
)

// seqPolicy builds a policy from choices.
func seqPolicy(choices []byte, str string, n int64) *schedv1alpha1.SchedulingPolicy {
	c := newChoices(choices, str, n, 500)
	next, fill := c.next, c.fill
	bools, nums := seqBools, seqNumbers
	b := builder.MakePolicy("seq")
	if next()%2 == 1 {
		b.Ignore()
	}
	if next()%3 == 0 {
		notFound := schedv1alpha1.DenyAction
		if next()%2 == 1 {
			notFound = schedv1alpha1.AllowAction
		}
		b.ParamKind("v1", "ConfigMap").ParamRef("placement", "", notFound).Variable("zones", "params.data[?'zones'].orValue('').split(',')")
		bools = append(bools[:len(bools):len(bools)], seqParamBools...)
	}
	var podVariables []string
	for _, v := range seqVariables {
		if next()%3 == 0 {
			b.Variable(v.name, fill(v.expression))
			bools = append(bools[:len(bools):len(bools)], v.bools...)
			nums = append(nums[:len(nums):len(nums)], v.numbers...)
			if !strings.Contains(v.expression, "nodeInfo") {
				podVariables = append(podVariables, v.name)
			}
		}
	}
	// Match conditions and preEnqueue rules, remembered per pod key
	// (podmemo.go): each reads something else of the pod.
	conditions := []string{
		"pod.metadata.namespace != {s}",
		"namespaceObject.metadata.?labels[?'tier'].orValue('') != 'bronze'",
		"podGroup.minCount != {k}",
		"pod.metadata.?labels[?'app'].orValue('') != {s}",
		"size(pod.metadata.?labels.orValue({})) >= {k}",
		"pod.spec.containers.all(c, !has(c.resources.requests) || string(c.resources.requests[?'cpu'].orValue('')) != {s})",
		"pod.metadata.?annotations[?'a'].orValue('') != {s} || pod.spec.?priority.orValue(0) > {n}",
	}
	for _, v := range podVariables {
		conditions = append(conditions, "string(variables."+v+") != 'web'")
	}
	for i := range next() % 3 {
		b.Condition(fmt.Sprintf("c%d", i), fill(conditions[next()%len(conditions)]))
	}
	switch next() % 5 {
	case 1:
		b.PreEnqueue("approved", "namespaceObject.metadata.?labels[?'approved'].orValue('yes') == 'yes'", "namespace not approved")
	case 2:
		b.HoldMsg("owned", fill("pod.metadata.?ownerReferences.orValue([]).all(o, o.name != {s})"), "", "'app ' + pod.metadata.?labels[?'app'].orValue('-')")
	case 3:
		b.HoldMsg("tolerated", fill("pod.spec.?tolerations.orValue([]).size() < {k} || pod.metadata.?labels[?'tier'].orValue('') == {s}"), "not tolerated", "")
	}
	for i := range 1 + next()%3 {
		message := ""
		if next()%2 == 1 {
			message = fill(seqStrings[next()%len(seqStrings)])
		}
		b.FilterMsg(fmt.Sprintf("f%d", i), c.condition(bools), "", message)
	}
	normalizations := []schedv1alpha1.ScoreNormalization{schedv1alpha1.MinMax, schedv1alpha1.MinMaxReverse, schedv1alpha1.None}
	for i := range next() % 3 {
		b.Score(fmt.Sprintf("s%d", i), fill(nums[next()%len(nums)]), int32(1+next()%100), normalizations[next()%len(normalizations)])
	}
	return b.Obj()
}

// seqWorld is the cluster a sequence is evaluated in: namespaces (which
// may be relabelled), nodes with their NodeInfo, and params.
type seqWorld struct {
	namespaces map[string]*corev1.Namespace
	nodes      []*corev1.Node
	infos      []*NodeInfo
	gens       []int64
	params     []*unstructured.Unstructured
	// groups are the PodGroup objects, placed the members placed.
	groups map[string]*schedulingv1beta1.PodGroup
	placed []*corev1.Pod
}

func newSeqWorld(t testing.TB) *seqWorld {
	w := &seqWorld{namespaces: map[string]*corev1.Namespace{}}
	for name, tier := range map[string]string{"team-a": "gold", "team-b": "silver"} {
		ns := makeNamespace(name, map[string]string{"tier": tier})
		ns.UID = ktypes.UID("uid-" + name)
		w.namespaces[name] = ns
	}
	for i, l := range []map[string]string{
		{"team": "team-a", "tier": "gold", "zone": "a"},
		{"team": "team-b", "tier": "silver", "zone": "b"},
		{"zone": "a"},
	} {
		node := makeNode(fmt.Sprintf("seq-node-%d", i), l)
		w.nodes = append(w.nodes, node)
		info := &NodeInfo{Allocatable: map[string]int64{"cpu": 8000}, Requested: map[string]int64{"cpu": 1000}}
		for j := range i + 1 {
			ns := []string{"team-a", "team-b"}[(i+j)%2]
			info.Pods = append(info.Pods, PodRef{Namespace: ns, Name: fmt.Sprintf("x-%d", j), Labels: map[string]string{"app": "web"}})
		}
		w.infos = append(w.infos, info)
		w.gens = append(w.gens, seqGeneration.Add(1))
	}
	w.groups = map[string]*schedulingv1beta1.PodGroup{}
	for i, name := range []string{"gang-a", "gang-b"} {
		w.groups[name] = builder.Gang("team-a", name, int32(2+i), map[string]string{"tier": "gold"})
	}
	w.params = []*unstructured.Unstructured{
		configMap(t, "team-a", "placement", map[string]string{"zones": "a"}, nil),
		configMap(t, "team-b", "placement", map[string]string{"zones": "b,c"}, nil),
	}
	return w
}

// basePod is the first pod of every sequence.
func basePod() *corev1.Pod {
	pod := makePod("team-a", "web-0", map[string]string{"app": "web"})
	pod.GenerateName = "web-"
	pod.Annotations = map[string]string{"a": "a"}
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1234", UID: "rs-uid"}}
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("gang-a")}
	return pod
}

// seqMutations change one field of a pod (or the world) each.
var seqMutations = []struct {
	name   string
	mutate func(pod *corev1.Pod, w *seqWorld)
}{
	{"namespace", func(pod *corev1.Pod, _ *seqWorld) {
		pod.Namespace = map[string]string{"team-a": "team-b", "team-b": "team-a", "unknown": "team-a"}[pod.Namespace]
	}},
	{"unknown namespace", func(pod *corev1.Pod, _ *seqWorld) { pod.Namespace = "unknown" }},
	{"name", func(pod *corev1.Pod, _ *seqWorld) { pod.Name += "x" }},
	{"generateName", func(pod *corev1.Pod, _ *seqWorld) { pod.GenerateName = "api-" }},
	{"labels", func(pod *corev1.Pod, _ *seqWorld) { pod.Labels = map[string]string{"app": "api"} }},
	{"annotations", func(pod *corev1.Pod, _ *seqWorld) { pod.Annotations = map[string]string{"a": "b"} }},
	{"kind/apiVersion", func(pod *corev1.Pod, _ *seqWorld) { pod.Kind, pod.APIVersion = "Pod", "v1" }},
	{"ownerReferences", func(pod *corev1.Pod, _ *seqWorld) { pod.OwnerReferences[0].Name = "api-5678" }},
	{"requests", func(pod *corev1.Pod, _ *seqWorld) {
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
	}},
	{"priority", func(pod *corev1.Pod, _ *seqWorld) { p := int32(1000); pod.Spec.Priority = &p }},
	{"tolerations", func(pod *corev1.Pod, _ *seqWorld) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: "a", Operator: corev1.TolerationOpExists})
	}},
	{"namespace labels", func(_ *corev1.Pod, w *seqWorld) {
		ns := w.namespaces["team-a"].DeepCopy()
		ns.Labels["tier"] = map[string]string{"gold": "silver", "silver": "bronze", "bronze": "gold"}[ns.Labels["tier"]]
		ns.Labels["approved"] = map[string]string{"": "no", "no": "yes", "yes": "no"}[ns.Labels["approved"]]
		rv, _ := strconv.Atoi(ns.ResourceVersion)
		ns.ResourceVersion = strconv.Itoa(rv + 1)
		w.namespaces["team-a"] = ns
	}},
	{"a pod placed on a node", func(_ *corev1.Pod, w *seqWorld) {
		i := len(w.infos[0].Pods) % len(w.infos)
		info := *w.infos[i]
		info.Pods = append(info.Pods[:len(info.Pods):len(info.Pods)], PodRef{Namespace: "team-a", Name: "placed", Labels: map[string]string{"app": "web"}})
		w.infos[i] = &info
		w.gens[i] = seqGeneration.Add(1)
	}},
	{"back to the first pod", func(pod *corev1.Pod, _ *seqWorld) { *pod = *basePod() }},
	// A label of the pod's own, as a StatefulSet's or a Job's pods have,
	// that rules reading other labels by key do not read.
	{"another label", func(pod *corev1.Pod, _ *seqWorld) {
		pod.Labels = maps.Clone(pod.Labels)
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels["pod-name"] += "x"
	}},
	{"no labels", func(pod *corev1.Pod, _ *seqWorld) { pod.Labels = nil }},
	{"pod group", func(pod *corev1.Pod, _ *seqWorld) {
		switch GroupName(pod) {
		case "gang-a":
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("gang-b")}
		case "gang-b":
			pod.Spec.SchedulingGroup = nil
		default:
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("gang-a")}
		}
	}},
	{"pod group labels and minCount", func(_ *corev1.Pod, w *seqWorld) {
		g := w.groups["gang-a"].DeepCopy()
		g.Labels["tier"] = map[string]string{"gold": "silver", "silver": "gold"}[g.Labels["tier"]]
		g.Spec.SchedulingPolicy.Gang.MinCount++
		w.groups["gang-a"] = g
	}},
	{"a member placed", func(_ *corev1.Pod, w *seqWorld) {
		member := makePod("team-a", fmt.Sprintf("member-%d", len(w.placed)), nil)
		member.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To([]string{"gang-a", "gang-b"}[len(w.placed)%2])}
		member.Spec.NodeName = w.nodes[len(w.placed)%len(w.nodes)].Name
		w.placed = append(w.placed, member)
	}},
}

// podGroups is the world's groups as a resolver.
func (w *seqWorld) podGroups() *StaticPodGroups {
	groups := make([]*schedulingv1beta1.PodGroup, 0, len(w.groups))
	for _, g := range w.groups {
		groups = append(groups, g)
	}
	return NewStaticPodGroups(groups, w.placed)
}

// seqOutcome is what a caller sees of a policy for a pod: its match (per
// params object), preEnqueue, and filters and scores on every node.
type seqOutcome struct {
	Match      []outcome
	PreEnqueue []outcome
	Nodes      []outcome
}

// evaluateSeq evaluates the policy for the pod in the world: through conv
// and the nodes' memo when cached, else on nodes without resourceVersion,
// with a fresh converter and params, and the whole pod converted.
func evaluateSeq(t testing.TB, p *CompiledPolicy, conv *Converter, w *seqWorld, pod *corev1.Pod, params *StaticParams, cached bool) seqOutcome {
	ctx := context.Background()
	in, err := conv.Pod(pod, w.namespaces[pod.Namespace])
	if err != nil {
		t.Fatal(err)
	}
	in.Params = params
	in.Group = w.podGroups().PodGroup(pod)
	if !cached {
		// Fresh reads the whole pod's value; through the memo, the policy
		// converts what it reads of it (projection.go). And it has no memo
		// keys, so that it neither reads nor fills the memo of the
		// expressions evaluated without a node, which lives with the
		// policy (podmemo.go).
		in.podValue(podTable().every)
		in.podKeys = nil
	}
	var out seqOutcome
	matches := p.MatchAll(ctx, in)
	for i := range matches {
		m := &matches[i]
		mo := outcomeOf(m.Decision, nil)
		mo.Rule += "|" + strconv.FormatBool(m.Matches)
		out.Match = append(out.Match, mo)
		if !m.Matches || m.Decision.Verdict != Pass {
			continue
		}
		bound := m.Decision.Policy
		out.PreEnqueue = append(out.PreEnqueue, outcomeOf(bound.PreEnqueue(ctx, in), nil))
		for i, node := range w.nodes {
			if !cached {
				node = node.DeepCopy()
				node.ResourceVersion = ""
			}
			info := w.infos[i]
			n, err := conv.NodeInput(node, w.gens[i], info, func(source any) *NodeInfo { return source.(*NodeInfo) })
			if err != nil {
				t.Fatal(err)
			}
			d := bound.Filter(ctx, in, &n)
			scores := make([]float64, bound.NumScoreRules())
			s := bound.Score(ctx, in, &n, scores)
			o := outcomeOf(d, scores)
			o.Scores = append(o.Scores, s.Verdict.String(), s.Rule, errText(s.Err), strconv.Itoa(len(s.Ignored)))
			out.Nodes = append(out.Nodes, o)
		}
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// seqGeneration numbers NodeInfo contents, as the scheduler's generation
// does (one counter for all nodes).
var seqGeneration atomic.Int64

// seqStats counts what sequences reached.
type seqStats struct {
	generated, compiled       int
	compared, equalSignatures int
	memoized                  map[memoKind]int
	// podGroup and members count the policies that read podGroup, and
	// its members.
	podGroup, members int
	// alone counts the match conditions and preEnqueue rules remembered
	// per pod key (podmemo.go).
	alone int
}

// runSequence evaluates a generated policy for a sequence of pods (steps
// are indexes into seqMutations), through the memo and fresh, and fails
// on the first difference.
func runSequence(t testing.TB, compiler *Compiler, choices []byte, str string, n int64, budget uint64, steps []byte, stats *seqStats) {
	budgeted := &Compiler{env: compiler.env, costBudget: budget}
	policy := budgeted.Compile(seqPolicy(choices, str, n), CompileOptions{})
	if stats != nil {
		stats.generated++
	}
	if policy.Err() != nil {
		return
	}
	if stats != nil {
		stats.compiled++
		for _, e := range policy.exprs() {
			stats.memoized[e.memo]++
		}
		for _, r := range append(policy.conditions[:len(policy.conditions):len(policy.conditions)], policy.preEnqueue...) {
			if r.alone != nil {
				stats.alone++
			}
		}
		if policy.ReadsPodGroup() {
			stats.podGroup++
		}
		if policy.ReadsPodGroupMembers() {
			stats.members++
		}
	}
	env := compiler.env
	w := newSeqWorld(t)
	conv := NewConverter(env, 0)
	params := staticParams(t, w.params...)
	pod := basePod()
	type signed struct {
		sig string
		pod *corev1.Pod
	}
	var history []signed
	snapshot := NewSnapshot(policy)
	for i, step := range append([]byte{byte(len(seqMutations) - 1)}, steps...) {
		m := seqMutations[int(step)%len(seqMutations)]
		pod = pod.DeepCopy()
		m.mutate(pod, w)
		// Both fresh: a converter, params and unversioned nodes of their own.
		want := evaluateSeq(t, policy, NewConverter(env, 0), w, pod, staticParams(t, w.params...), false)
		got := evaluateSeq(t, policy, conv, w, pod, params, true)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("pod %d (after %q) of the sequence %v, policy %s:\nremembered (+) and fresh (-) outcomes differ:\n%s",
				i, m.name, steps, policyText(t, choices, str, n), diff)
		}
		if stats != nil {
			stats.compared++
		}
		sig, ok := snapshot.Signature(pod)
		if !ok {
			continue
		}
		text := fmt.Sprintf("%+v", *sig)
		if sig.Spec != nil {
			text += fmt.Sprintf("%+v", *sig.Spec)
		}
		for _, h := range history {
			if h.sig != text {
				continue
			}
			// Equal signatures, evaluated in the same state: equal outcomes.
			other := evaluateSeq(t, policy, NewConverter(env, 0), w, h.pod, staticParams(t, w.params...), false)
			if diff := cmp.Diff(want, other); diff != "" {
				t.Fatalf("pods %s and %s have equal signatures but different outcomes under %s:\n%s",
					h.pod.Name, pod.Name, policyText(t, choices, str, n), diff)
			}
			if stats != nil {
				stats.equalSignatures++
			}
			break
		}
		history = append(history, signed{sig: text, pod: pod})
	}
}

func policyText(t testing.TB, choices []byte, str string, n int64) string {
	p := seqPolicy(choices, str, n)
	var parts []string
	for _, v := range p.Spec.Variables {
		parts = append(parts, "variables."+v.Name+": "+v.Expression)
	}
	if p.Spec.Match != nil {
		for _, c := range p.Spec.Match.Conditions {
			parts = append(parts, "condition: "+c.Expression)
		}
	}
	for _, f := range p.Spec.Filters {
		parts = append(parts, "filter: "+f.Expression+" / message: "+f.MessageExpression)
	}
	for _, s := range p.Spec.Scores {
		parts = append(parts, "score: "+s.Expression)
	}
	return fmt.Sprintf("(failurePolicy %s, params %v) %s", p.Spec.FailurePolicy, p.Spec.ParamKind != nil, strings.Join(parts, "; "))
}

// seqBudgets are the policy cost budgets sequences run with: the real one,
// and small ones that cheap expressions reach.
var seqBudgets = []uint64{celcost.PolicyEvaluationCostBudget, 3, 20, 60, 200, 1000}

// TestRememberedIsFresh: generated policies, sequences of pods that differ
// in one field at a time (and namespace relabels, pods placed on nodes),
// under several cost budgets: the memo never changes an outcome, and pods
// with equal signatures get equal outcomes.
func TestRememberedIsFresh(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	rng := rand.New(rand.NewPCG(20, 24))
	strs := []string{"team-a", "a", "b", "web", "", "web-", "api-", "1"}
	stats := &seqStats{memoized: map[memoKind]int{}}
	for range 300 {
		choices := make([]byte, 40)
		for j := range choices {
			choices[j] = byte(rng.IntN(256))
		}
		steps := make([]byte, 12)
		for j := range steps {
			steps[j] = byte(rng.IntN(len(seqMutations)))
		}
		runSequence(t, compiler, choices, strs[rng.IntN(len(strs))], int64(rng.IntN(40)-5), seqBudgets[rng.IntN(len(seqBudgets))], steps, stats)
	}
	if stats.compiled < stats.generated*3/4 || stats.compared < 2000 || stats.equalSignatures < 100 || stats.memoized[memoPodAndNode] < 50 || stats.memoized[memoPodAndNodeInfo] < 50 ||
		stats.memoized[memoNode] < 50 || stats.memoized[memoNodeInfo] < 20 || stats.podGroup < 30 || stats.members < 15 || stats.alone < 100 {
		t.Errorf("the generator does not reach the memo: %+v", stats)
	}
	t.Logf("%d comparisons, %d pairs of equal signatures, expressions by memo kind %v, %d policies reading podGroup (%d its members), %d conditions and preEnqueue rules remembered per pod key",
		stats.compared, stats.equalSignatures, stats.memoized, stats.podGroup, stats.members, stats.alone)
}

// FuzzRememberedIsFresh is TestRememberedIsFresh with fuzzed policies,
// budgets and sequences (`make fuzz`).
func FuzzRememberedIsFresh(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0}, "team-a", int64(3), uint8(0), []byte{0, 1, 2, 3})
	f.Add([]byte{1, 1, 0, 0, 0, 2, 1, 4, 1, 9, 2, 5, 1, 0}, "a", int64(2), uint8(2), []byte{0, 0, 11, 12, 0, 4})
	f.Add([]byte{0, 3, 0, 1, 0, 0, 1, 0, 0, 2, 5, 3, 7, 1, 8, 1, 2}, "web", int64(100), uint8(4), []byte{5, 6, 7, 8, 9, 10, 13})
	compiler := NewCompiler(testEnv(f))
	f.Fuzz(func(t *testing.T, choices []byte, str string, n int64, budget uint8, steps []byte) {
		if len(steps) > 32 || len(str) > 64 {
			return
		}
		runSequence(t, compiler, choices, str, n, seqBudgets[int(budget)%len(seqBudgets)], steps, nil)
	})
}
