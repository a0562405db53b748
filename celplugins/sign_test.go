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

// versionedParams is a fixed params set with a version, as ParamsStore has.
type versionedParams struct {
	*engine.StaticParams
	version uint64
}

func (p *versionedParams) Version() uint64 { return p.version }

// TestSignPodParams: a pod signed again after its params changed gets the
// new params' signature, not the last one kept.
func TestSignPodParams(t *testing.T) {
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
	pod := st.MakePod().Namespace("ns").Name("p").UID("p").SchedulerName("celsched").Obj()
	pod.ResourceVersion = "1"
	sign := func() string {
		fragments, status := rt.SignPod(context.Background(), pod)
		if !status.IsSuccess() || len(fragments) != 1 {
			t.Fatalf("SignPod: %v, %v", fragments, status)
		}
		data, err := json.Marshal(fragments[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	rt.Params = &versionedParams{StaticParams: placement("1", "a")}
	first := sign()
	rt.Params = &versionedParams{StaticParams: placement("2", "b"), version: 1}
	if second := sign(); second == first {
		t.Errorf("the signature did not change with the params: %s", second)
	}
}
