package celplugins_test

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestSignPod: replicas (pods that differ only in their names) get the
// same signature; pods that differ in any other field a policy may read, or
// in their namespace, get different ones, whatever today's policies read (a
// signature is kept while the pod waits, and must stay true when policies
// change); a policy that may apply and reads nodeInfo.pods, the pod's name
// or the whole pod makes the plugins decline to sign.
func TestSignPod(t *testing.T) {
	t.Parallel()
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
		"node-only policy, a label no policy reads yet": {
			policy: builder.MakePolicy("zone").Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'c'").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "silver"),
		},
		"replicas of two namespaces": {
			policy: builder.MakePolicy("zone").Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'c'").Obj(),
			a:      replica("web-1", "gold"),
			b: st.MakePod().Namespace("other").Name("web-2").UID("web-2").SchedulerName("celsched").
				Label("app", "web").Label("tier", "gold").Obj(),
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
			policy:   builder.MakePolicy("name").Filter("name", "pod.metadata.name != node.metadata.name").Obj(),
			a:        replica("web-1", "gold"),
			declines: true,
		},
		"a match condition reads the pod's name": {
			policy:   builder.MakePolicy("name").Condition("canary", "pod.metadata.name.endsWith('-1')").Filter("zone", "node.metadata.name != ''").Obj(),
			a:        replica("web-1", "gold"),
			declines: true,
		},
		"a policy reading names that selects other pods": {
			policy: builder.MakePolicy("name").PodLabels(map[string]string{"tier": "bronze"}).Filter("name", "pod.metadata.name != node.metadata.name").Obj(),
			a:      replica("web-1", "gold"), b: replica("web-2", "gold"), wantSame: true,
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
			t.Parallel()
			rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{tc.policy}, plugintest.Namespace("ns", nil))
			sign := func(pod *corev1.Pod) string {
				t.Helper()
				fragments, status := rt.Inputs.SignPod(context.Background(), pod)
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

// TestSignPodStaysTrue: a signature is the pod's content, not the state of
// the policies and params that applied when it was made, so a pod signed
// before a params object changed and one signed after have equal
// signatures (kube-scheduler keeps a signature while the pod waits; both
// pods are evaluated against the params in force when they are scheduled).
func TestSignPodStaysTrue(t *testing.T) {
	t.Parallel()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	placement := func(rv, zones string) *engine.StaticParams {
		u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"zones": zones}}}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("ns")
		u.SetName("placement")
		u.SetResourceVersion(rv)
		p, err := engine.NewStaticParams(env, []*unstructured.Unstructured{u})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	policy := builder.MakePolicy("tenant").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").
		Filter("zone", "node.metadata.labels[?'zone'].orValue('') in params.data['zones'].split(',')").Obj()
	rt := plugintest.Runtime(t, []*schedv1alpha1.SchedulingPolicy{policy}, plugintest.Namespace("ns", nil))
	sign := func(name string) string {
		pod := st.MakePod().Namespace("ns").Name(name).UID(name).SchedulerName("celsched").Obj()
		pod.ResourceVersion = "1"
		fragments, status := rt.Inputs.SignPod(context.Background(), pod)
		if !status.IsSuccess() || len(fragments) != 1 {
			t.Fatalf("SignPod: %v, %v", fragments, status)
		}
		data, err := json.Marshal(fragments[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	rt.Inputs.Params = placement("1", "a")
	first := sign("p1")
	rt.Inputs.Params = placement("2", "b")
	if second := sign("p2"); second != first {
		t.Errorf("signatures of replicas signed before and after a params change differ:\n%s\n%s", first, second)
	}
}
