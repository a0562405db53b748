package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/builder"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// countingPods is a pod lister that counts the lists of every pod.
type countingPods struct {
	corelisters.PodLister
	lists int
}

func (c *countingPods) List(selector labels.Selector) ([]*corev1.Pod, error) {
	c.lists++
	return c.PodLister.List(selector)
}

// TestRefuser: a Refuser's Refusals are an Evaluator's over the same
// informers, pod by pod, message by message: a node's view holds the pods
// bound to it that have not terminated (a filter on nodeInfo.podCount
// tells), a gang member's podGroup its PodGroup and placed members, and a
// pod on a node the cluster does not have is an error. With the index
// of pods by node it lists no pod at all unless a policy reads podGroup
// (then once), and a node's pods only when a policy reads nodeInfo (then
// once per node).
func TestRefuser(t *testing.T) {
	t.Parallel()
	f := newFixture(t, namespace("team", map[string]string{"tenant": "blue"}))
	f.add(t, f.nodes,
		node("red-1", map[string]string{"tenant": "red"}),
		node("blue-1", map[string]string{"tenant": "blue"}),
		node("blue-2", map[string]string{"tenant": "blue"}))
	on := func(p *corev1.Pod, node string, edits ...func(*corev1.Pod)) *corev1.Pod {
		p.Spec.NodeName = node
		for _, e := range edits {
			e(p)
		}
		return p
	}
	member := func(p *corev1.Pod) {
		group := "big"
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	}
	done := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	pods := []*corev1.Pod{
		on(pod("team", "drifted", nil), "red-1"),
		on(pod("team", "a", nil), "blue-1"),
		on(pod("team", "b", nil), "blue-1"),
		on(pod("team", "finished", nil), "blue-1", done),
		on(pod("team", "c", nil), "blue-2"),
		on(pod("team", "d", nil), "blue-2"),
		on(pod("team", "e", nil), "blue-2"),
		on(pod("team", "big-0", nil), "blue-1", member),
		on(pod("team", "big-1", nil), "red-1", member),
		on(pod("team", "lost", nil), "gone-1"),
	}
	for _, p := range pods {
		f.add(t, f.pods, p)
	}
	if err := f.pods.AddIndexers(cache.Indexers{podsByNode: podNodeName}); err != nil {
		t.Fatal(err)
	}
	tenant := "node.metadata.labels[?'tenant'].orValue('') == namespaceObject.metadata.labels[?'tenant'].orValue('-')"
	f.registry.Upsert(builder.MakePolicy("tenant-nodes").UID("policy-tenant").Generation(1, "1").FilterMsg("tenant", tenant, "not the tenant's node", "").Obj())
	groups := []*schedulingv1beta1.PodGroup{podGroup("team", "big", 4, "")}

	for _, tc := range []struct {
		name     string
		podGroup bool
		// nodeInfo keeps crowded, which reads nodeInfo.
		nodeInfo bool
		// wantLists and wantNodeLists are the lists of every pod and of
		// a node's pods the Refuser makes.
		wantLists, wantNodeLists int
		want                     map[string][]string
	}{
		{name: "node rules", wantNodeLists: 0, want: map[string][]string{"drifted": {"tenant-nodes"}, "big-1": {"tenant-nodes"}}},
		{name: "nodeInfo rules", nodeInfo: true, wantNodeLists: 3, want: map[string][]string{"drifted": {"tenant-nodes"}, "big-1": {"tenant-nodes"}}},
		{name: "podGroup rules", podGroup: true, nodeInfo: true, wantLists: 1, wantNodeLists: 3, want: map[string][]string{"drifted": {"tenant-nodes"}, "big-0": {"together"}, "big-1": {"tenant-nodes", "together"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nodeInfo {
				// blue-1 runs four pods and blue-2 three: a finished pod
				// counted would refuse blue-1's.
				f.registry.Upsert(builder.MakePolicy("crowded").UID("policy-crowded").Generation(1, "1").Filter("few", "nodeInfo.podCount <= 3").Obj())
				defer f.registry.Delete("crowded")
			}
			if tc.podGroup {
				f.registry.Upsert(builder.MakePolicy("together").UID("policy-together").Generation(1, "1").
					Filter("with-the-others", "size(podGroup.assignedNodes) == 0 || podGroup.assignedNodes.all(n, n == node.metadata.name)").Obj())
				defer f.registry.Delete("together")
			}
			live := f.pending(t).Live
			live.PodGroups = func() ([]*schedulingv1beta1.PodGroup, error) { return groups, nil }
			e, release, err := live.Evaluator(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			lister := &countingPods{PodLister: live.Pods}
			nodeLists := 0
			onNode := podsOnNode(f.pods)
			live.Pods, live.PodsOnNode = lister, func(node string) ([]*corev1.Pod, error) {
				nodeLists++
				return onNode(node)
			}
			r, err := live.Refuser()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, p := range pods {
				want, wantErr := e.Refusals(context.Background(), p)
				refusals, err := r.Refusals(context.Background(), p)
				if (err == nil) != (wantErr == nil) {
					t.Errorf("%s: Refuser's error %v, the Evaluator's %v", p.Name, err, wantErr)
				}
				if diff := cmp.Diff(want, refusals); diff != "" {
					t.Errorf("%s: Refuser's refusals differ from the Evaluator's (-Evaluator +Refuser):\n%s", p.Name, diff)
				}
				for _, rf := range refusals {
					got[p.Name] = append(got[p.Name], rf.Policy)
				}
				slices.Sort(got[p.Name])
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refusing policies by pod (-want +got):\n%s", diff)
			}
			if _, err := r.Refusals(context.Background(), pods[len(pods)-1]); err == nil || !strings.Contains(err.Error(), "not a node of the cluster") {
				t.Errorf("a pod on a node the cluster does not have: %v, want not a node of the cluster", err)
			}
			if lister.lists != tc.wantLists {
				t.Errorf("the Refuser listed every pod %d times, want %d", lister.lists, tc.wantLists)
			}
			if nodeLists != tc.wantNodeLists {
				t.Errorf("the Refuser listed a node's pods %d times, want %d (once per node, only for nodeInfo)", nodeLists, tc.wantNodeLists)
			}
		})
	}

	// A node's pods that cannot be listed fail the Refusals of the pods
	// on it when a policy reads nodeInfo (its error is no refusal), and
	// change nothing when none does.
	live := f.pending(t).Live
	live.PodsOnNode = func(string) ([]*corev1.Pod, error) { return nil, fmt.Errorf("the index is gone") }
	for _, nodeInfo := range []bool{false, true} {
		if nodeInfo {
			f.registry.Upsert(builder.MakePolicy("crowded").UID("policy-crowded").Generation(1, "1").Filter("few", "nodeInfo.podCount <= 3").Obj())
		}
		r, err := live.Refuser()
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Refusals(context.Background(), pods[1]) // a, on blue-1: no refusal
		if nodeInfo && (err == nil || !strings.Contains(err.Error(), "the index is gone")) {
			t.Errorf("with a nodeInfo policy and a failing list: %v, %v; want the list's error", got, err)
		}
		if !nodeInfo && (err != nil || len(got) != 0) {
			t.Errorf("without a nodeInfo policy and a failing list: %v, %v; want no refusal, no error", got, err)
		}
	}
}

// BenchmarkDriftBatch is drift detection's work for one batch: the
// Refusals of 100 pods that just started (half of them on spot nodes,
// which the policy refuses), in a cluster of 5000 nodes running 20 pods
// each, by an Evaluator over the whole cluster (what the tracker built
// before the Refuser) and by a Refuser, which makes views of the batch's
// nodes only and lists their pods only for a policy that reads nodeInfo
// (refuser-nodeInfo).
func BenchmarkDriftBatch(b *testing.B) {
	f := newFixture(b, namespace("team", map[string]string{"tenant": "blue"}))
	f.registry.Upsert(builder.MakePolicy("no-spot").UID("policy-no-spot").Generation(1, "1").
		Filter("off-spot", "node.metadata.labels['pool'] != 'spot'").Obj())
	if err := f.pods.AddIndexers(cache.Indexers{podsByNode: podNodeName}); err != nil {
		b.Fatal(err)
	}
	var batch []*corev1.Pod
	for i := range 5000 {
		pool := "general"
		if i%100 == 0 {
			pool = "spot"
		}
		name := fmt.Sprintf("node-%04d", i)
		f.add(b, f.nodes, node(name, map[string]string{"pool": pool}))
		for j := range 20 {
			p := pod("team", fmt.Sprintf("web-%d-%d", i, j), map[string]string{"app": "web"})
			p.Spec.NodeName = name
			f.add(b, f.pods, p)
			if j == 0 && i%50 == 0 {
				batch = append(batch, p)
			}
		}
	}
	live := f.pending(b).Live
	live.PodsOnNode = podsOnNode(f.pods)
	ctx := context.Background()
	refuse := func(b *testing.B, refusals func(context.Context, *corev1.Pod) ([]verdict.Refusal, error)) {
		refused := 0
		for _, p := range batch {
			r, err := refusals(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			refused += len(r)
		}
		if refused != len(batch)/2 {
			b.Fatalf("%d pods refused, want %d (those on spot nodes)", refused, len(batch)/2)
		}
	}
	b.Run("evaluator", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, release, err := live.Evaluator(ctx)
			if err != nil {
				b.Fatal(err)
			}
			refuse(b, e.Refusals)
			release()
		}
	})
	refuser := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := live.Refuser()
			if err != nil {
				b.Fatal(err)
			}
			refuse(b, r.Refusals)
		}
	}
	b.Run("refuser", refuser)
	// A policy that reads nodeInfo (and passes): the Refuser lists the
	// pods of each node it evaluates a pod on.
	f.registry.Upsert(builder.MakePolicy("roomy").UID("policy-roomy").Generation(1, "1").
		Filter("room", "nodeInfo.podCount <= 110").Obj())
	b.Run("refuser-nodeInfo", refuser)
}
