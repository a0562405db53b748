package gangs

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// Topology labels of the placement tests' nodes: racks, grouped in blocks.
const (
	rackLabel  = "topology.example.com/rack"
	blockLabel = "topology.example.com/block"
)

// oneRack is the placement filter "a gang stays in one rack".
const oneRack = "placement.nodes.all(n, n.metadata.labels[?'" + rackLabel + "'].orValue('') == placement.nodes[0].metadata.labels[?'" + rackLabel + "'].orValue(''))"

// nodesOf returns the nodes the pods are bound to, waiting for each.
func nodesOf(t *testing.T, pods []*corev1.Pod) []string {
	t.Helper()
	out := make([]string, len(pods))
	for i, pod := range pods {
		out[i] = waitForNode(t, pod)
	}
	return out
}

// createRacks creates six nodes in racks a, b (block b1) and c (block
// b2); rack c's two nodes are the only rack that takes four 1-CPU pods.
func createRacks(t *testing.T) {
	t.Helper()
	rack := func(name, r, b, cpu string) nodeSpec {
		return nodeSpec{name: name, cpu: cpu, labels: map[string]string{rackLabel: r, blockLabel: b}}
	}
	createNodes(t,
		rack("a1", "a", "b1", "1500m"), rack("a2", "a", "b1", "1500m"),
		rack("b1", "b", "b1", "1500m"), rack("b2", "b", "b1", "1500m"),
		rack("c1", "c", "b2", "2500m"), rack("c2", "c", "b2", "2500m"),
	)
}

// TestGangPlacementOneRack: a policy's placement filter keeps a 4-member
// gang in one rack. Block b1 has racks a and b (two 1-pod nodes each),
// block b2 rack c (two 2-pod nodes). A gang constrained to one block
// (topology constraint on the block label) has two candidate placements,
// b1 and b2: the policy refuses b1 (two racks) and the gang lands in rack
// c. A second gang without a topology constraint then has one candidate,
// every node, which spans the racks, and no rack has room for its 4
// members (rack c is full, a and b take 2 each): all 4 stay pending, their
// condition naming the policy and rule. A pod outside a group is placed
// as always. Switched to Audit, the policy refuses nothing and the second
// gang is placed across racks a and b.
func TestGangPlacementOneRack(t *testing.T) {
	createRacks(t)
	policy := builder.MakePolicy("one-rack").PodLabels(map[string]string{"app": "trainer"}).
		PlacementFilter("one-rack", oneRack, "a gang stays in one rack").Obj()
	applyPolicy(t, policy)
	ns := createNamespace(t, "placement", nil)
	trainer := withLabels(map[string]string{"app": "trainer"})

	createGang(t, ns, "train", 4, blockLabel)
	train := members(t, ns, "train", 4, nil, trainer, withCPU("1"))
	for i, node := range nodesOf(t, train) {
		if node != "c1" && node != "c2" {
			t.Errorf("%s on %s, want rack c (c1 or c2): the policy refuses block b1's two racks", train[i].Name, node)
		}
	}

	createGang(t, ns, "spill", 4, "")
	spill := make([]*corev1.Pod, 4)
	for i := range spill {
		spill[i] = createPod(t, ns, fmt.Sprintf("spill-%d", i), inGroup("spill"), trainer, withCPU("1"))
	}
	refusal := "placement (all nodes) rejected by SchedulingPolicy one-rack, rule placement.filters/one-rack: a gang stays in one rack"
	for _, pod := range spill {
		msg := waitPending(t, pod, reasonUnschedulable, refusal)
		t.Logf("%s: %s", pod.Name, msg)
	}

	// Outside a group the placement filter plays no part.
	solo := createPod(t, ns, "solo", trainer, withCPU("100m"), onNode("a1"))
	if got := waitForNode(t, solo); got != "a1" {
		t.Errorf("solo on %s, want a1", got)
	}
	for _, pod := range spill {
		if !unbound(t, pod) {
			t.Errorf("%s was bound, want the whole gang pending", pod.Name)
		}
	}

	// Audit: the refusal is only reported, and the group, requeued by the
	// policy's change, is placed on the free nodes of racks a and b.
	current := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: policy.Name}, current); err != nil {
		t.Fatal(err)
	}
	current.Spec.Enforcement = schedv1alpha1.Audit
	if err := k8sClient.Update(t.Context(), current); err != nil {
		t.Fatal(err)
	}
	got := nodesOf(t, spill)
	for i, node := range got {
		if !strings.HasPrefix(node, "a") && !strings.HasPrefix(node, "b") {
			t.Errorf("%s on %s, want a node of rack a or b", spill[i].Name, node)
		}
	}
	t.Logf("spill placed on %v", got)
}

// TestPlacementFilterTypeError: a placement filter that does not
// type-check is refused at apply, with its field path.
func TestPlacementFilterTypeError(t *testing.T) {
	wantRefused(t, builder.MakePolicy("bad-placement").PlacementFilter("count", "placement.count", "").Obj(),
		"spec.placement.filters[0].expression", "must evaluate to bool, but evaluates to int")
}

// wantRefused creates a policy that the webhook must refuse, with an error
// containing each of want.
func wantRefused(t *testing.T, policy *schedv1alpha1.SchedulingPolicy, want ...string) {
	t.Helper()
	var err error
	// The webhook's certificate may still be loading: retry while the
	// error is not the webhook's answer.
	_ = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err = k8sClient.Create(ctx, policy.DeepCopy())
		return err == nil || strings.Contains(err.Error(), "denied the request"), nil
	})
	if err == nil {
		deleteObject(t, policy)
		t.Fatalf("policy %s was accepted", policy.Name)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

// TestGangPlacementScore: a policy's placement score chooses between two
// racks that both hold a 4-member gang. Rack g's nodes are tier=gold, rack
// p's are not; the rule prefers gold for the first gang, and the other
// rack for the second.
func TestGangPlacementScore(t *testing.T) {
	const allGold = "placement.nodes.all(n, n.metadata.labels[?'tier'].orValue('') == 'gold')"
	twoGangs(t, "placement-score", map[string]string{"tier": "gold"}, nil,
		builder.MakePolicy("gold-racks").PodLabels(map[string]string{"app": "trainer"}).
			PlacementScore("gold", allGold+" ? 100 : 0", 1, "").Obj(),
		func(r *schedv1alpha1.PlacementRules) { r.Scores[0].Expression = allGold + " ? 0 : 100" })
}

// TestGangPlacementScoreNormalized: a placement score with values above
// 100 (the free GPUs of the placement's nodes, from a label: 400 in rack
// g, 300 in rack p) ranks the placements by its normalization across
// them: MinMax, the default, places the first gang in rack g, the most
// free GPUs; MinMaxReverse the second in rack p, the fewest. Clamped to
// 0..100, both racks would score 100 and kube-scheduler's own scores
// would place each gang in the other rack.
func TestGangPlacementScoreNormalized(t *testing.T) {
	twoGangs(t, "placement-normalized", map[string]string{"free-gpus": "200"}, map[string]string{"free-gpus": "150"},
		builder.MakePolicy("free-gpus").PodLabels(map[string]string{"app": "trainer"}).
			PlacementScore("most-free-gpus", "placement.nodes.map(n, int(n.metadata.labels['free-gpus'])).sum()", 1, "").Obj(),
		func(r *schedv1alpha1.PlacementRules) { r.Scores[0].Normalization = schedv1alpha1.MinMaxReverse })
}

// twoGangs places two 4-member gangs (1 CPU each) that a policy's
// placement score steers, on two racks of two 4-CPU nodes (one placement
// per rack, from the gangs' topology constraint on the rack label): rack
// g's nodes with gLabels, rack p's with pLabels. The first gang, under
// policy, must land wholly in rack g; the second, under the policy as
// change changes its placement rules, wholly in rack p. kube-scheduler's
// own placement scores (NodeResourcesFit packs: it prefers the placement
// left most allocated) lean the other way each time, so only the policy
// can place the gangs so: a filler pod makes rack p the fuller one for the
// first gang, and the first gang makes rack g the fuller one for the
// second.
func twoGangs(t *testing.T, namespace string, gLabels, pLabels map[string]string, policy *schedv1alpha1.SchedulingPolicy, change func(*schedv1alpha1.PlacementRules)) {
	t.Helper()
	node := func(name, r string, extra map[string]string) nodeSpec {
		labels := map[string]string{rackLabel: r}
		maps.Copy(labels, extra)
		return nodeSpec{name: name, cpu: "4", labels: labels}
	}
	createNodes(t, node("g1", "g", gLabels), node("g2", "g", gLabels), node("p1", "p", pLabels), node("p2", "p", pLabels))
	ns := createNamespace(t, namespace, nil)
	filler := createPod(t, ns, "filler", withCPU("2"), onNode("p1"))
	if got := waitForNode(t, filler); got != "p1" {
		t.Fatalf("filler on %s, want p1", got)
	}

	applyPolicy(t, policy)
	trainer := withLabels(map[string]string{"app": "trainer"})
	inRack := func(group string, pods []*corev1.Pod, rack string) {
		t.Helper()
		for i, node := range nodesOf(t, pods) {
			if !strings.HasPrefix(node, rack) {
				t.Errorf("gang %s: %s on %s, want rack %s", group, pods[i].Name, node, rack)
			}
		}
	}

	createGang(t, ns, "first", 4, rackLabel)
	inRack("first", members(t, ns, "first", 4, nil, trainer, withCPU("1")), "g")

	current := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: policy.Name}, current); err != nil {
		t.Fatal(err)
	}
	change(current.Spec.Placement)
	if err := k8sClient.Update(t.Context(), current); err != nil {
		t.Fatal(err)
	}
	waitReady(t, policy.Name)

	// members names the pods of every gang alike: another namespace.
	ns2 := createNamespace(t, namespace, nil)
	createGang(t, ns2, "second", 4, rackLabel)
	inRack("second", members(t, ns2, "second", 4, nil, trainer, withCPU("1")), "p")
}

// TestPlacementScoreTypeError: a placement score that does not evaluate
// to a number is refused at apply, with its field path.
func TestPlacementScoreTypeError(t *testing.T) {
	wantRefused(t, builder.MakePolicy("bad-placement-score").PlacementScore("gold", "placement.count > 1", 1, "").Obj(),
		"spec.placement.scores[0].expression", "must evaluate to int, uint or double, but evaluates to bool")
}
