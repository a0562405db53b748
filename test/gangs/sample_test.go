package gangs

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// blockOf is the block label of the sample tenant-gangs-one-block.
const blockOf = "topology.example.com/block"

// TestSampleTenantGangs applies config/samples'
// tenant-gangs-one-block as a platform team would and checks what its
// comment promises. Zone z1 has blocks x (a GPU node and a CPU node) and
// y (two GPU nodes), each node with room for one member. A tenant gang of
// two whose PodGroup asks for one block lands in block y: block x has room
// only with its CPU node, which the policy's gpu-node filter refuses. A
// tenant gang whose PodGroup asks for a zone has one candidate,
// zone z1, which spans both blocks: all its members stay pending, their
// condition naming the policy and rule. The same gang in a namespace
// that is not a tenant's is placed.
func TestSampleTenantGangs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "samples", "scheduling_v1alpha1_tenant-gangs-one-block.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := yaml.UnmarshalStrict(data, policy); err != nil {
		t.Fatal(err)
	}
	node := func(name, block string, gpu bool) nodeSpec {
		labels := map[string]string{blockOf: block, corev1.LabelTopologyZone: "z1"}
		if gpu {
			labels["nvidia.com/gpu.present"] = "true"
		}
		return nodeSpec{name: name, cpu: "2", labels: labels}
	}
	createNodes(t, node("x1", "x", true), node("x-cpu", "x", false), node("y1", "y", true), node("y2", "y", true))
	applyPolicy(t, policy)
	tenant := createNamespace(t, "tenant", map[string]string{"celsched.io/tenant": "team-a"})

	createGang(t, tenant, "in-block", 2, blockOf)
	inBlock := members(t, tenant, "in-block", 2, nil, withCPU("1500m"))
	for i, n := range nodesOf(t, inBlock) {
		if n != "y1" && n != "y2" {
			t.Errorf("%s on %s, want block y's GPU nodes (block x has room only with its CPU node)", inBlock[i].Name, n)
		}
	}

	// members names its pods trainer-<i>: each gang in a namespace of its own.
	tenant2 := createNamespace(t, "tenant", map[string]string{"celsched.io/tenant": "team-b"})
	createGang(t, tenant2, "in-zone", 2, corev1.LabelTopologyZone)
	inZone := members(t, tenant2, "in-zone", 2, nil, withCPU("1"))
	for _, pod := range inZone {
		msg := waitPending(t, pod, reasonUnschedulable,
			"rejected by SchedulingPolicy tenant-gangs-one-block, rule placement.filters/one-block: a tenant gang stays within one rack block")
		t.Logf("%s: %s", pod.Name, msg)
	}
	for _, pod := range inZone {
		if !unbound(t, pod) {
			t.Errorf("%s was bound, want the whole gang pending", pod.Name)
		}
	}

	// Not a tenant's namespace: the policy does not match, the zone's
	// placement is taken.
	other := createNamespace(t, "other", nil)
	createGang(t, other, "in-zone", 2, corev1.LabelTopologyZone)
	t.Logf("in-zone outside the tenants placed on %v", nodesOf(t, members(t, other, "in-zone", 2, nil, withCPU("1"))))
}
