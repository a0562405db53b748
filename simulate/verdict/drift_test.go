package verdict

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestRefusalsAndReplacement: Refusals names the enforced policies that
// refuse a running pod its own node (not an Audit policy, not a policy
// whose filter passes); Replace (without a template) finds the replacement a node only
// where the policies and the built-in plugins (here the pod's node
// selector) leave one.
func TestRefusalsAndReplacement(t *testing.T) {
	ns := namespace("team", map[string]string{"tenant": "blue"})
	nodes := []*corev1.Node{
		node("red-1", map[string]string{"tenant": "red", corev1.LabelHostname: "red-1"}),
		node("blue-1", map[string]string{"tenant": "blue", corev1.LabelHostname: "blue-1"}),
	}
	tenant := "node.metadata.labels[?'tenant'].orValue('') == namespaceObject.metadata.labels[?'tenant'].orValue('-')"
	policies := []*schedv1alpha1.SchedulingPolicy{
		builder.MakePolicy("tenant-nodes").FilterMsg("tenant", tenant, "not the tenant's node", "").Obj(),
		builder.MakePolicy("audited").Audit().Filter("never", "false").Obj(),
		builder.MakePolicy("anything").Filter("always", "true").Obj(),
	}
	drifted := pod("team", "drifted", nil)
	drifted.Spec.NodeName = "red-1"
	pinned := pod("team", "pinned", nil)
	pinned.Spec.NodeName = "red-1"
	pinned.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "red-1"}
	placed := pod("team", "placed", nil)
	placed.Spec.NodeName = "blue-1"
	e := newEvaluator(t, ns, nodes, []*corev1.Pod{drifted, pinned, placed}, policies)

	tests := map[string]struct {
		pod             *corev1.Pod
		want            []Refusal
		wantReplacement []string
	}{
		"on a refused node":                       {pod: drifted, want: []Refusal{{Policy: "tenant-nodes"}}, wantReplacement: []string{"blue-1"}},
		"on a refused node, replacement has none": {pod: pinned, want: []Refusal{{Policy: "tenant-nodes"}}},
		"on an allowed node":                      {pod: placed, wantReplacement: []string{"blue-1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := e.Refusals(context.Background(), tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i].Message == "" {
					t.Errorf("refusal %s has no message", got[i].Policy)
				}
				got[i].Message = ""
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Refusals (-want +got):\n%s", diff)
			}
			r, err := e.Replace(context.Background(), tc.pod, nil, "tenant-nodes", []string{"celsched"})
			if err != nil {
				t.Fatal(err)
			}
			var feasible []string
			if r.Node != "" {
				feasible = []string{r.Node}
			}
			if diff := cmp.Diff(tc.wantReplacement, feasible); diff != "" {
				t.Errorf("Replacement's feasible nodes (-want +got):\n%s", diff)
			}
		})
	}
}
