package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"

	"github.com/celsched/celsched/test/builder"
)

// TestPodProjection: what the reference analysis finds an expression reads
// of the pod, as the fields converted for it.
func TestPodProjection(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		variable, condition, filter string
		want                        string
	}{
		"a label":                 {filter: "pod.metadata.labels['app'] == 'web'", want: "metadata.labels"},
		"an optional label":       {filter: "pod.metadata.?labels[?'app'].orValue('') == 'web'", want: "metadata.labels"},
		"has of a spec field":     {filter: "has(pod.spec.nodeName)", want: "spec.nodeName"},
		"containers in a macro":   {condition: "pod.spec.containers.all(c, has(c.resources.requests))", want: "spec.containers"},
		"optional spec field":     {filter: "pod.?spec.?nodeName.orValue('') == ''", want: "spec.nodeName"},
		"escaped namespace":       {filter: "pod.metadata.__namespace__ == 'team-a'", want: "metadata.namespace"},
		"two fields of two":       {filter: "pod.metadata.name != '' && pod.spec.priority > 0 && pod.status.phase == 'Pending'", want: "metadata.name,spec.priority,status.phase"},
		"spec whole":              {filter: "pod.spec == pod.spec", want: "spec"},
		"has of spec":             {filter: "has(pod.spec)", want: "spec"},
		"spec selected and whole": {filter: "pod.spec.nodeName == '' && [pod.spec].size() == 1", want: "spec"},
		"metadata passed on":      {filter: "[pod.metadata].size() == 1", want: "metadata"},
		"the pod whole":           {filter: "[pod].size() == 1", want: "*"},
		"kind":                    {filter: "pod.kind == 'Pod'", want: "kind"},
		"through a variable":      {variable: "pod.spec.priorityClassName", filter: "variables.v != ''", want: "spec.priorityClassName"},
		"a variable and a rule":   {variable: "pod.metadata.labels", filter: "pod.spec.nodeName == '' && variables.v.size() > 0", want: "metadata.labels,spec.nodeName"},
		"node only":               {filter: "node.metadata.name != ''", want: ""},
		"condition and filter":    {condition: "pod.metadata.labels['tier'] == 'a'", filter: "pod.spec.schedulerName != ''", want: "metadata.labels,spec.schedulerName"},
		"status whole in a macro": {filter: "[pod.status].exists(s, s.phase == 'Pending')", want: "status"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := builder.MakePolicy("p")
			if tc.variable != "" {
				b = b.Variable("v", tc.variable)
			}
			if tc.condition != "" {
				b = b.Condition("c", tc.condition)
			}
			if tc.filter != "" {
				b = b.Filter("f", tc.filter)
			}
			p := compileOK(t, b.Obj())
			if got := podTable().String(p.podFields); got != tc.want {
				t.Errorf("fields %q, want %q", got, tc.want)
			}
		})
	}
}

// richPod is a pod as the API server returns it, with every part of the
// pod set: defaulted spec, managedFields, status.
func richPod() *corev1.Pod {
	now := metav1.Now()
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-7d9f-abcde", GenerateName: "web-7d9f-", Namespace: "team-a", UID: ktypes.UID("0c6f5c1a-1111-2222-3333-444455556666"),
			ResourceVersion: "12345", Generation: 1, CreationTimestamp: now,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-27T10:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f", UID: "rs-uid", Controller: new(bool)}},
			Finalizers:      []string{"example.com/keep"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}`)}}},
		},
		Spec: corev1.PodSpec{
			SchedulerName:     "celsched",
			PriorityClassName: "high",
			Priority:          new(int32),
			NodeSelector:      map[string]string{"pool": "general"},
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example.com/web:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64)}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: new(resource.MustParse("1Gi"))}}}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available", LastTransitionTime: now}},
		},
	}
	k8sv1.SetObjectDefaults_Pod(pod)
	return pod
}

// TestPodValueProjected: each field converted alone has the value the
// whole pod's conversion gives it, and nothing else is converted.
func TestPodValueProjected(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	pod := richPod()
	whole, err := env.toVal(pod, env.podValues)
	if err != nil {
		t.Fatal(err)
	}
	all, err := env.podVal(pod, podTable().every)
	if err != nil {
		t.Fatal(err)
	}
	if all.Equal(whole) != types.True {
		t.Fatal("the whole pod's projection differs from its conversion")
	}
	wholeMap := whole.(traits.Mapper)
	fieldsSeen := 0
	for _, top := range podTable().top {
		want, wantFound := wholeMap.Find(types.String(top.name))
		got := convertFields(t, env, pod, top.all)
		if v, found := got.Find(types.String(top.name)); found != wantFound || (found && v.Equal(want) != types.True) {
			t.Errorf("%s whole: found %v, want %v; value %v, want %v", top.name, found, wantFound, v, want)
		}
		if n := got.Size().(types.Int); n > 1 {
			t.Errorf("%s whole: %d fields of the pod converted", top.name, n)
		}
		if top.fields == nil || !wantFound {
			continue
		}
		wantTop := want.(traits.Mapper)
		for name, sub := range top.fields {
			var f podFields
			f.set(sub.bit)
			got := convertFields(t, env, pod, f)
			gotTop, found := got.Find(types.String(top.name))
			if !found {
				t.Errorf("%s.%s: %s not converted", top.name, name, top.name)
				continue
			}
			keys := mapKeys(gotTop.(traits.Mapper))
			wantValue, wantFound := wantTop.Find(types.String(name))
			if !wantFound {
				if len(keys) != 0 {
					t.Errorf("%s.%s: absent from the pod, converted %v", top.name, name, keys)
				}
				continue
			}
			fieldsSeen++
			for _, k := range keys {
				if k != name && k != "__"+name+"__" {
					t.Errorf("%s.%s: %s converted too", top.name, name, k)
				}
			}
			if v, _ := gotTop.(traits.Mapper).Find(types.String(name)); v == nil || v.Equal(wantValue) != types.True {
				t.Errorf("%s.%s = %v, want %v", top.name, name, v, wantValue)
			}
		}
	}
	// The rich pod sets many fields: the loop above compared them.
	if fieldsSeen < 25 {
		t.Errorf("compared %d fields of metadata, spec and status, want a rich pod", fieldsSeen)
	}
}

func convertFields(t *testing.T, env *Environment, pod *corev1.Pod, f podFields) traits.Mapper {
	t.Helper()
	v, err := env.podVal(pod, f)
	if err != nil {
		t.Fatal(err)
	}
	return v.(traits.Mapper)
}

func mapKeys(m traits.Mapper) []string {
	var keys []string
	for it := m.Iterator(); it.HasNext() == types.True; {
		keys = append(keys, string(it.Next().(types.String)))
	}
	return keys
}

// TestPodValueGrows: policies that read different fields of one PodInput,
// in any order and concurrently, decide as on a PodInput of their own:
// the value grows to hold what each reads.
func TestPodValueGrows(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	policies := []*CompiledPolicy{
		compileOK(t, builder.MakePolicy("labels").Filter("f", "pod.metadata.labels['app'] == 'web'").Obj()),
		compileOK(t, builder.MakePolicy("node-name").Filter("f", "!has(pod.spec.nodeName)").Obj()),
		compileOK(t, builder.MakePolicy("containers").Filter("f", "pod.spec.containers.all(c, c.resources.requests['cpu'] == '500m')").Obj()),
		compileOK(t, builder.MakePolicy("status").Filter("f", "!has(pod.status.phase)").Obj()),
		compileOK(t, builder.MakePolicy("whole").Filter("f", "[pod].all(p, p.metadata.name == 'p')").Obj()),
		compileOK(t, builder.MakePolicy("uid").Filter("f", "pod.metadata.uid == 'uid-team-a-p'").Obj()),
	}
	node := func() *NodeInput { return nodeInput(t, conv, "n", nil, nil) }
	fresh := func(p *CompiledPolicy) Decision {
		return p.Filter(context.Background(), podInput(t, conv, map[string]string{"app": "web"}, nil), node())
	}
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 0, 5, 1, 3, 4}} {
		in := podInput(t, conv, map[string]string{"app": "web"}, nil)
		var last *podValue
		for _, i := range order {
			p := policies[i]
			got, want := p.Filter(context.Background(), in, node()), fresh(p)
			if got.Verdict != Pass || want.Verdict != Pass {
				t.Errorf("order %v, %s: %s, alone %s", order, p.Name, got.String(), want.String())
			}
			v := in.pod.Load()
			if !v.fields.covers(p.podFields) || (last != nil && !v.fields.covers(last.fields)) {
				t.Errorf("order %v, %s: the value holds %s, the policy reads %s", order, p.Name, podTable().String(v.fields), podTable().String(p.podFields))
			}
			last = v
		}
	}
	in := podInput(t, conv, map[string]string{"app": "web"}, nil)
	var wg sync.WaitGroup
	for range 4 {
		for _, p := range policies {
			wg.Go(func() {
				if d := p.Filter(context.Background(), in, node()); d.Verdict != Pass {
					t.Errorf("concurrently, %s: %s", p.Name, d.String())
				}
			})
		}
	}
	wg.Wait()
}

// BenchmarkPodValue converts a pod as the API server returns it: whole,
// as a policy that reads its labels and containers does, and its labels
// alone.
func BenchmarkPodValue(b *testing.B) {
	env := testEnv(b)
	pod := richPod()
	labels := compileFields(b, "pod.metadata.labels['app'] == 'web'")
	containers := compileFields(b, "pod.metadata.labels['app'] == 'web' && pod.spec.containers.all(c, has(c.resources.requests))")
	for name, f := range map[string]podFields{"whole": podTable().every, "labels-and-containers": containers, "labels": labels} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var v ref.Val
			for b.Loop() {
				var err error
				if v, err = env.podVal(pod, f); err != nil {
					b.Fatal(err)
				}
			}
			_ = v
		})
	}
}

func compileFields(b *testing.B, filter string) podFields {
	b.Helper()
	return benchPolicy(b, builder.MakePolicy("p").Filter("f", filter).Obj()).podFields
}

// String lists the fields of f, for the tests: "spec.containers",
// "metadata" (whole), "*" (the whole pod).
func (t *podFieldTable) String(f podFields) string {
	if f.has(podWholeBit) {
		return "*"
	}
	var names []string
	for _, top := range t.top {
		switch {
		case f.has(top.bit):
			names = append(names, top.name)
		case top.fields != nil:
			var subs []string
			for name, sub := range top.fields {
				if sub.bit != 0 && f.has(sub.bit) {
					subs = append(subs, top.name+"."+name)
				}
			}
			slices.Sort(subs) // map order
			names = append(names, subs...)
		}
	}
	return strings.Join(names, ",")
}
