package celplugins_test

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/test/builder"
)

// TestSignPod: pods that differ only in what no applying policy reads get
// the same signature (the replicas of a Deployment batch); pods that differ
// in a field a policy reads, or in the policies that apply, get different
// ones; a policy reading nodeInfo.pods or the whole pod makes the plugins
// decline to sign.
func TestSignPod(t *testing.T) {
	replica := func(name, tier string) *corev1.Pod {
		return st.MakePod().Namespace("ns").Name(name).UID(name).SchedulerName("celsched").
			Label("app", "web").Label("tier", tier).Obj()
	}
	cases := map[string]struct {
		policy   *schedv1alpha1.SchedulingPolicy
		a, b     *corev1.Pod
		wantSame bool
		declines bool
	}{
		"node-only policy, replicas": {
			policy: builder.MakePolicy("zone").Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'c'").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "gold"), wantSame: true,
		},
		"node-only policy, a label no policy reads": {
			policy: builder.MakePolicy("zone").Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'c'").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "silver"), wantSame: true,
		},
		"a filter reads the pod's labels": {
			policy: builder.MakePolicy("tier").Filter("tier", "pod.metadata.labels['tier'] == node.metadata.?labels[?'tier'].orValue('')").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "silver"),
		},
		"a variable reads the pod's labels": {
			policy: builder.MakePolicy("tier").Variable("tier", "pod.metadata.labels['tier']").
				Filter("tier", "variables.tier == node.metadata.?labels[?'tier'].orValue('')").Obj(),
			a: replica("web-1", "gold"), b: replica("web-2", "silver"),
		},
		"the same labels, a policy reading labels: replicas batch": {
			policy: builder.MakePolicy("tier").Filter("tier", "pod.metadata.labels['tier'] == node.metadata.?labels[?'tier'].orValue('')").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "gold"), wantSame: true,
		},
		"an optional selection of the pod's labels": {
			policy: builder.MakePolicy("tier").Filter("tier", "pod.metadata.?labels[?'tier'].orValue('') == node.metadata.?labels[?'tier'].orValue('')").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "silver"),
		},
		"an optional selection of the pod's labels, replicas": {
			policy: builder.MakePolicy("tier").Filter("tier", "pod.metadata.?labels[?'tier'].orValue('') == node.metadata.?labels[?'tier'].orValue('')").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "gold"), wantSame: true,
		},
		"an optional selection of the pod's spec": {
			policy: builder.MakePolicy("prio").Filter("prio", "pod.?spec.priority.orValue(0) < 100 || node.metadata.name != ''").Obj(),
			a:      replica("web-1", "gold"), b: st.MakePod().Namespace("ns").Name("web-2").UID("web-2").SchedulerName("celsched").
				Label("app", "web").Label("tier", "gold").Priority(1000).Obj(),
		},
		"a filter reads the pod's name": {
			policy: builder.MakePolicy("name").Filter("name", "pod.metadata.name != node.metadata.name").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "gold"),
		},
		"the policy applies to one of them only": {
			policy: builder.MakePolicy("gold").PodLabels(map[string]string{"tier": "gold"}).Filter("zone", "node.metadata.name != ''").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "silver"),
		},
		"nodeInfo.pods: no signature": {
			policy:   builder.MakePolicy("spread").Filter("spread", "nodeInfo.pods.filter(p, p.labels[?'app'] == pod.metadata.labels[?'app']).size() < 2").Obj(),
			a:        replica("web-1", "gold"),
			declines: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{tc.policy}, plugintest.Namespace("ns", nil))
			sign := func(pod *corev1.Pod) string {
				t.Helper()
				fragments, status := rt.SignPod(context.Background(), pod)
				if tc.declines {
					if status.Code() != fwk.Unschedulable {
						t.Fatalf("SignPod: %v, want Unschedulable", status)
					}
					return ""
				}
				if !status.IsSuccess() {
					t.Fatalf("SignPod: %v", status)
				}
				data, err := json.Marshal(fragments)
				if err != nil {
					t.Fatal(err)
				}
				return string(data)
			}
			a := sign(tc.a)
			if tc.declines {
				return
			}
			if b := sign(tc.b); (a == b) != tc.wantSame {
				t.Errorf("signatures equal=%v, want %v:\n%s\n%s", a == b, tc.wantSame, a, b)
			}
		})
	}
}
