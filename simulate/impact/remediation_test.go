package impact

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/source"
)

// TestDraftRemediation: a draft that narrows a namespace's zones makes its
// running pods in the other zone drift (evicted-would-not-return); with
// the draft's spec.remediation, impact says which of them it would evict:
// a ReplicaSet's pod whose replacement has a node, not a bare pod, not a
// pod pinned to its node.
func TestDraftRemediation(t *testing.T) {
	nodes := []*corev1.Node{node("a1", "a"), node("b1", "b")}
	owned := func(p *corev1.Pod) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}}
		return p
	}
	replicated := owned(pod("web", "replicated", "a1", nil))
	pinned := owned(pod("web", "pinned", "a1", nil))
	pinned.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "a1"}
	bare := pod("web", "bare", "a1", nil)
	draft := zoneFilter("web-zones", "web", "['b']")
	draft.Spec.Remediation = &schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict, MaxUnavailable: ptr.To(intstr.FromString("25%")), Rate: 6}
	r, err := Run(context.Background(), Input{Input: source.Input{Drafts: []*schedv1alpha1.SchedulingPolicy{draft},
		Nodes: nodes, Namespaces: []*corev1.Namespace{namespace("web", nil)}, Pods: []*corev1.Pod{replicated, pinned, bare}, Config: config(t)}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dryrun.Remediation{}
	for _, p := range r.Pods {
		if p.Change != EvictedWouldNotReturn {
			t.Errorf("pod %s: change %s, want %s", p.Pod, p.Change, EvictedWouldNotReturn)
		}
		got[p.Pod] = p.Remediation
	}
	budget := "maxUnavailable 25% per workload, 6 per minute"
	want := map[string]*dryrun.Remediation{
		"web/replicated": {Policy: "web-zones", WouldEvict: true, Budget: budget},
		"web/pinned": {Policy: "web-zones", NotEvicted: schedv1alpha1.BlockedNoFeasibleNode, Budget: budget,
			Why: "the scheduler's framework finds its replacement no node under the policies in force"},
		"web/bare": {Policy: "web-zones", NotEvicted: schedv1alpha1.BlockedNoController, Budget: budget},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("remediation (-want +got):\n%s", diff)
	}
}
