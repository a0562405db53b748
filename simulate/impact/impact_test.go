package impact

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/source"
	"github.com/celsched/celsched/test/builder"
)

const zoneLabel = corev1.LabelTopologyZone

func node(name, zone string) *corev1.Node {
	return st.MakeNode().Name(name).Label(corev1.LabelHostname, name).Label(zoneLabel, zone).Capacity(map[corev1.ResourceName]string{
		corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "110",
	}).Obj()
}

func pod(namespace, name, nodeName string, labels map[string]string) *corev1.Pod {
	return st.MakePod().Namespace(namespace).Name(name).UID("uid-" + namespace + "-" + name).SchedulerName("celsched").
		Labels(labels).Node(nodeName).Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "100m"}).Obj()
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	l := map[string]string{corev1.LabelMetadataName: name}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// zoneFilter keeps the pods of a namespace in zones.
func zoneFilter(name, ns, zones string) *schedv1alpha1.SchedulingPolicy {
	return builder.MakePolicy(name).NamespaceLabels(map[string]string{corev1.LabelMetadataName: ns}).
		FilterMsg("zone", fmt.Sprintf("node.metadata.labels[%q] in %s", zoneLabel, zones), "not in the namespace's zones", "").Obj()
}

// zoneScore prefers a zone for a namespace.
func zoneScore(name, ns, zone string) *schedv1alpha1.SchedulingPolicy {
	return builder.MakePolicy(name).NamespaceLabels(map[string]string{corev1.LabelMetadataName: ns}).
		Score("zone", fmt.Sprintf("node.metadata.labels[%q] == %q ? 100 : 0", zoneLabel, zone), 1, schedv1alpha1.None).Obj()
}

// hold holds the pods of a namespace without the label approved=true.
func hold(name, ns string) *schedv1alpha1.SchedulingPolicy {
	return builder.MakePolicy(name).NamespaceLabels(map[string]string{corev1.LabelMetadataName: ns}).
		PreEnqueue("approved", "namespaceObject.metadata.?labels[?'approved'].orValue('') == 'true'", "namespace not approved").Obj()
}

// config is the built-in scheduler configuration.
func config(tb testing.TB) *schedulerconfig.KubeSchedulerConfiguration {
	tb.Helper()
	cfg, err := defaultconfig.Load("")
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func TestRun(t *testing.T) {
	cfg := config(t)
	nodes := []*corev1.Node{node("a1", "a"), node("a2", "a"), node("b1", "b"), node("c1", "c")}
	namespaces := []*corev1.Namespace{namespace("web", nil), namespace("api", nil), namespace("batch", nil), namespace("other", nil)}
	pods := []*corev1.Pod{
		pod("web", "bound-a", "a1", nil),
		pod("web", "bound-c", "c1", nil),
		pod("web", "pending", "", nil),
		pod("api", "bound-b", "b1", nil),
		pod("api", "pending", "", nil),
		pod("batch", "held", "", nil),
		pod("batch", "bound", "a2", nil),
		pod("other", "pending", "", nil),
	}
	foreign := pod("other", "foreign", "", nil)
	foreign.Spec.SchedulerName = corev1.DefaultSchedulerName
	terminating := pod("web", "terminating", "a1", nil)
	terminating.DeletionTimestamp = &metav1.Time{}
	done := pod("web", "done", "a1", nil)
	done.Status.Phase = corev1.PodSucceeded
	pods = append(pods, foreign, terminating, done) // neither is evaluated

	live := []*schedv1alpha1.SchedulingPolicy{
		zoneFilter("web-zones", "web", "['a', 'c']"),
		zoneFilter("api-zones", "api", "['a']"), // bound-b was placed before it
		hold("batch-approval", "batch"),
		zoneScore("other-prefers-b", "other", "b"),
	}
	cases := map[string]struct {
		drafts    []*schedv1alpha1.SchedulingPolicy
		deletions []string
		want      map[string]Change
		wantNodes map[string][]string
		notAff    int
	}{
		"tighten web to zone a": {
			drafts: []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['a']")},
			want:   map[string]Change{"web/bound-c": EvictedWouldNotReturn},
			notAff: 5,
		},
		"web to zone b only": {
			drafts:    []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['b']")},
			want:      map[string]Change{"web/bound-a": EvictedWouldNotReturn, "web/bound-c": EvictedWouldNotReturn, "web/pending": Moved},
			wantNodes: map[string][]string{"web/pending": {"b1"}},
			notAff:    5,
		},
		"web to zone d": {
			drafts: []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['d']")},
			want:   map[string]Change{"web/bound-a": EvictedWouldNotReturn, "web/bound-c": EvictedWouldNotReturn, "web/pending": Stranded},
			notAff: 5,
		},
		"loosen api to zone b": {
			drafts:    []*schedv1alpha1.SchedulingPolicy{zoneFilter("api-zones", "api", "['b']")},
			want:      map[string]Change{"api/bound-b": Readmitted, "api/pending": Moved},
			wantNodes: map[string][]string{"api/pending": {"b1"}},
			notAff:    6,
		},
		"delete the hold": {
			deletions: []string{"batch-approval"},
			// batch/bound's node is refused now: were it evicted, it
			// would be held.
			want:   map[string]Change{"batch/held": Placed, "batch/bound": Readmitted},
			notAff: 6,
		},
		"hold web": {
			drafts: []*schedv1alpha1.SchedulingPolicy{hold("web-approval", "web")},
			want:   map[string]Change{"web/bound-a": EvictedWouldNotReturn, "web/bound-c": EvictedWouldNotReturn, "web/pending": Held},
			notAff: 5,
		},
		"release batch into nowhere": {
			drafts: []*schedv1alpha1.SchedulingPolicy{
				builder.MakePolicy("batch-approval").NamespaceLabels(map[string]string{corev1.LabelMetadataName: "batch"}).Filter("none", "false").Obj(),
			},
			// batch/bound is refused both ways: held now, filtered out
			// with the draft.
			want:   map[string]Change{"batch/held": Released},
			notAff: 6,
		},
		"other prefers c": {
			drafts:    []*schedv1alpha1.SchedulingPolicy{zoneScore("other-prefers-b", "other", "c")},
			want:      map[string]Change{"other/pending": Moved},
			wantNodes: map[string][]string{"other/pending": {"c1"}},
			notAff:    7,
		},
		"web prefers c": {
			drafts: []*schedv1alpha1.SchedulingPolicy{zoneScore("web-prefers-c", "web", "c")},
			// web/pending's best nodes were a1, a2 and c1: c1 still is.
			want:   map[string]Change{"web/bound-a": RankChanged},
			notAff: 5,
		},
		"unchanged draft": {
			drafts: []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['a', 'c']")},
			want:   map[string]Change{},
			notAff: 8,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := Run(context.Background(), Input{
				Input:     source.Input{Policies: live, Drafts: tc.drafts, Nodes: nodes, Namespaces: namespaces, Pods: pods, Config: cfg},
				Deletions: tc.deletions,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Change{}
			for _, p := range r.Pods {
				got[p.Pod] = p.Change
				if want, ok := tc.wantNodes[p.Pod]; ok {
					if diff := cmp.Diff(want, p.Draft.Nodes); diff != "" {
						t.Errorf("%s: nodes with the draft (-want +got):\n%s", p.Pod, diff)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s\nreport: %+v", diff, r.Pods)
			}
			s := r.Summary
			if s.Pending != 4 || s.Bound != 4 || s.OtherSchedulers != 1 || s.NotAffected != tc.notAff {
				t.Errorf("summary %+v, want 4 pending, 4 bound, 1 of another scheduler, %d not affected", s, tc.notAff)
			}
			total := 0
			for _, n := range s.ByChange {
				total += n
			}
			if total != 8 || s.ByChange[Unchanged] != 8-len(tc.want) {
				t.Errorf("byChange %v: want 8 pods, %d unchanged", s.ByChange, 8-len(tc.want))
			}
		})
	}
}

// TestRefusalNamesTheRule: a refused node says which policy and rule.
func TestRefusalNamesTheRule(t *testing.T) {
	cfg := config(t)
	r, err := Run(context.Background(), Input{
		Input: source.Input{Drafts: []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['b']")},
			Nodes: []*corev1.Node{node("a1", "a"), node("b1", "b")}, Pods: []*corev1.Pod{pod("web", "p", "a1", nil)}, Config: cfg},
		Why: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// --why: the false filter on the pod's node, and the values.
	if len(r.Pods) != 1 || len(r.Pods[0].Why) != 1 {
		t.Fatalf("pods %+v: want one with one policy in why", r.Pods)
	}
	why := r.Pods[0].Why[0]
	wantWhy := []dryrun.RuleResult{{Rule: "zone", Message: "not in the namespace's zones", Why: []engine.Step{
		{Expr: `node.metadata.labels["topology.kubernetes.io/zone"] in ["b"]`, Value: "false"},
		{Expr: `node.metadata.labels["topology.kubernetes.io/zone"]`, Value: `"a"`},
	}}}
	if diff := cmp.Diff(wantWhy, why.Filters["a1"]); why.Name != "web-zones" || diff != "" {
		t.Errorf("why of %s (-want +got):\n%s", why.Name, diff)
	}
	r.Pods[0].Why = nil
	want := []PodImpact{{
		Pod: "web/p", Node: "a1", Change: EvictedWouldNotReturn, Policies: []string{"web-zones"},
		Now:   Outcome{State: StateAccepted, Rank: 1, Feasible: 2},
		Draft: Outcome{State: StateRefused, Feasible: 1, Reason: "CELFilter: node(s) rejected by SchedulingPolicy web-zones, rule zone: not in the namespace's zones"},
	}}
	if diff := cmp.Diff(want, r.Pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]dryrun.PolicyChange{{Name: "web-zones", Change: dryrun.PolicyAdded}}, r.Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	if len(r.Notes) != 1 {
		t.Errorf("notes %q: want one about the namespace not given", r.Notes)
	}
}

// TestEvictedPodLeavesItsNode: a bound pod is evaluated without itself on
// its node: a node it fills is still feasible, and its own anti-affinity
// does not refuse it.
func TestEvictedPodLeavesItsNode(t *testing.T) {
	cfg := config(t)
	full := pod("web", "big", "a1", map[string]string{"app": "web"})
	full.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	full.Spec.Affinity = st.MakePod().PodAntiAffinityExists("app", corev1.LabelHostname, st.PodAntiAffinityWithRequiredReq).Obj().Spec.Affinity
	r, err := Run(context.Background(), Input{Input: source.Input{
		Drafts: []*schedv1alpha1.SchedulingPolicy{zoneScore("web-prefers-b", "web", "b")},
		Nodes:  []*corev1.Node{node("a1", "a"), node("b1", "b")}, Pods: []*corev1.Pod{full}, Config: cfg,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pods) != 1 || r.Pods[0].Change != RankChanged || r.Pods[0].Now.State != StateAccepted || r.Pods[0].Draft.Rank != 2 {
		t.Errorf("pods %+v: want web/big accepted on a1, rank 1 now and 2 with the draft", r.Pods)
	}
}

func TestBadDeletion(t *testing.T) {
	_, err := Run(context.Background(), Input{Input: source.Input{Config: config(t)}, Deletions: []string{"nope"}})
	if err == nil || err.Error() != "--delete nope: no live SchedulingPolicy of that name" {
		t.Errorf("error %v", err)
	}
}

func TestClassify(t *testing.T) {
	sched := func(nodes ...string) Outcome { return Outcome{State: StateSchedulable, Nodes: nodes} }
	cases := map[string]struct {
		now, draft Outcome
		want       Change
	}{
		"same top":         {sched("a", "b"), sched("b"), Unchanged},
		"other top":        {sched("a"), sched("b"), Moved},
		"held to held":     {Outcome{State: StateHeld}, Outcome{State: StateHeld}, Unchanged},
		"unsched to held":  {Outcome{State: StateUnschedulable}, Outcome{State: StateHeld}, Held},
		"sched to held":    {sched("a"), Outcome{State: StateHeld}, Held},
		"held to sched":    {Outcome{State: StateHeld}, sched("a"), Placed},
		"unsched to sched": {Outcome{State: StateUnschedulable}, sched("a"), Placed},
		"sched to unsched": {sched("a"), Outcome{State: StateUnschedulable}, Stranded},
		"held to unsched":  {Outcome{State: StateHeld}, Outcome{State: StateUnschedulable}, Released},
		"refused":          {Outcome{State: StateAccepted, Rank: 1}, Outcome{State: StateRefused}, EvictedWouldNotReturn},
		"readmitted":       {Outcome{State: StateRefused}, Outcome{State: StateAccepted, Rank: 3}, Readmitted},
		"rank":             {Outcome{State: StateAccepted, Rank: 1}, Outcome{State: StateAccepted, Rank: 3}, RankChanged},
		"same rank":        {Outcome{State: StateAccepted, Rank: 2}, Outcome{State: StateAccepted, Rank: 2}, Unchanged},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := classify(tc.now, tc.draft); got != tc.want {
				t.Errorf("classify = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestTerminatingPodsTakeRoom: a terminating pod is not evaluated, but
// stays on its node until it is gone, as in the scheduler's cache.
func TestTerminatingPodsTakeRoom(t *testing.T) {
	big := pod("other", "big", "a1", nil)
	big.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	big.DeletionTimestamp = &metav1.Time{}
	r, err := Run(context.Background(), Input{Input: source.Input{
		Drafts: []*schedv1alpha1.SchedulingPolicy{zoneFilter("web-zones", "web", "['a']")},
		Nodes:  []*corev1.Node{node("a1", "a"), node("b1", "b")},
		Pods:   []*corev1.Pod{big, pod("web", "p", "", nil)},
		Config: config(t),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// a1 is full: web/p can go to b1 now, and nowhere with the draft.
	if s := r.Summary; s.Pending != 1 || s.Bound != 0 || len(r.Pods) != 1 || r.Pods[0].Change != Stranded {
		t.Errorf("summary %+v, pods %+v: want web/p alone, stranded", s, r.Pods)
	}
}

// TestRunSameInputSameReport: impact evaluates the pods of several tenants
// in parallel over one memo; a policy reading the pod's namespace gives
// each pod its own tenant's nodes, and the report is the same on every run
// and with any parallelism.
func TestRunSameInputSameReport(t *testing.T) {
	cfg := config(t)
	var nodes []*corev1.Node
	for i, team := range []string{"team-a", "team-a", "team-b", "team-b", "team-c"} {
		n := node(fmt.Sprintf("%s-%d", team, i), "a")
		n.Labels["team"] = team
		n.ResourceVersion = "1" // as from the API server: the memo applies
		nodes = append(nodes, n)
	}
	var namespaces []*corev1.Namespace
	var pods []*corev1.Pod
	for _, team := range []string{"team-a", "team-b", "team-c"} {
		namespaces = append(namespaces, namespace(team, nil))
		for i := range 4 {
			// Identical pods in every namespace.
			pods = append(pods, pod(team, fmt.Sprintf("web-%d", i), "", map[string]string{"app": "web"}))
		}
	}
	draft := builder.MakePolicy("own-nodes").
		FilterMsg("team", "node.metadata.labels[?'team'].orValue('') == pod.metadata.namespace", "", "'reserved for a team other than ' + pod.metadata.namespace").
		Filter("two-per-node", "nodeInfo.pods.filter(p, p.namespace == pod.metadata.namespace).size() < 2").Obj()
	// Live, the policy keeps every pod pending: the draft places them all.
	live := builder.MakePolicy("own-nodes").Filter("closed", "false").Obj()
	var first *Report
	for run := range 6 {
		r, err := Run(context.Background(), Input{Input: source.Input{Policies: []*schedv1alpha1.SchedulingPolicy{live}, Drafts: []*schedv1alpha1.SchedulingPolicy{draft},
			Nodes: nodes, Namespaces: namespaces, Pods: pods, Config: cfg}, Parallelism: 1 + run%3})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Pods) != len(pods) {
			t.Fatalf("run %d: %d pods in the report, want %d", run, len(r.Pods), len(pods))
		}
		for _, p := range r.Pods {
			team := p.Pod[:len("team-x")]
			if p.Draft.State != StateSchedulable || len(p.Draft.Nodes) == 0 {
				t.Errorf("run %d: %s is %s with the draft (%v), want schedulable on its team's nodes", run, p.Pod, p.Draft.State, p.Draft.Nodes)
			}
			for _, n := range p.Draft.Nodes {
				if n[:len("team-x")] != team {
					t.Errorf("run %d: %s may go to %s with the draft", run, p.Pod, n)
				}
			}
		}
		if first == nil {
			first = r
			continue
		}
		if diff := cmp.Diff(first, r); diff != "" {
			t.Fatalf("run %d differs from the first (-first +run):\n%s", run, diff)
		}
	}
}

// TestImpactPreemption: a draft victim rule changes what preemption would
// do for a pending pod that no node fits either way: the pod is
// preemption-changed, its outcome now evicts the other tenant's pod and
// with the draft names it protected; a pod the draft's rule does not
// change (its victim is its own namespace's) is unchanged.
func TestImpactPreemption(t *testing.T) {
	cfg, err := defaultconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	big := func(ns, name, node string, priority int32) *corev1.Pod {
		return st.MakePod().Namespace(ns).Name(name).UID("uid-" + ns + "-" + name).SchedulerName("celsched").Priority(priority).
			Node(node).Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "3"}).Obj()
	}
	nodes := []*corev1.Node{node("a1", "a"), node("a2", "a")}
	pods := []*corev1.Pod{
		big("team-b", "theirs", "a1", 10), big("team-c", "own", "a2", 10),
		big("team-a", "urgent", "", 100), big("team-c", "urgent", "", 100),
	}
	pods[2].Spec.NodeSelector = map[string]string{corev1.LabelHostname: "a1"}
	pods[3].Spec.NodeSelector = map[string]string{corev1.LabelHostname: "a2"}
	rule := builder.MakePolicy("own-tenant").Victim("own-namespace", "victim.metadata.namespace == pod.metadata.namespace", "another tenant's pod").Obj()
	r, err := Run(context.Background(), Input{Input: source.Input{Drafts: []*schedv1alpha1.SchedulingPolicy{rule}, Nodes: nodes, Pods: pods, Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pods) != 1 || r.Pods[0].Pod != "team-a/urgent" || r.Pods[0].Change != PreemptionChanged {
		t.Fatalf("pods that change: %+v, want team-a/urgent preemption-changed", r.Pods)
	}
	p := r.Pods[0]
	if now := p.Now.Preemption; now == nil || now.Node != "a1" || !cmp.Equal(now.Victims, []string{"team-b/theirs"}) {
		t.Errorf("now: preemption %+v, want team-b/theirs evicted on a1", now)
	}
	if draft := p.Draft.Preemption; draft == nil || draft.Node != "" || len(draft.Protected) != 1 {
		t.Errorf("with the draft: preemption %+v, want none, team-b/theirs protected", draft)
	}
	if got := r.Summary.ByChange[Unchanged]; got != 3 {
		t.Errorf("%d pods unchanged, want 3 (team-c/urgent preempts its own namespace's pod both ways, and the bound pods)", got)
	}
}
