package celplugins

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// member is a pod of the group, on node (none: unscheduled).
func member(name, group, node string) *corev1.Pod {
	p := pod("ml", name, nil)
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	p.Spec.NodeName = node
	return p
}

// gang is a gang PodGroup of namespace ml, with a version.
func gang(name string, minCount int32, labels map[string]string) *schedulingv1beta1.PodGroup {
	pg := builder.Gang("ml", name, minCount, labels)
	pg.UID, pg.ResourceVersion = "pg-"+ktypes.UID(name), "1"
	return pg
}

// TestPodGroups: the group as kube-scheduler's cache (its pod group
// manager) holds it: the PodGroup's labels and minCount, and the nodes of
// the members bound or assumed, without the pod itself and without the
// unscheduled ones; a group whose object is not there yet has its name
// alone, and so has every group with GenericWorkload off.
func TestPodGroups(t *testing.T) {
	t.Parallel()
	schedmetrics.Register() // the cache records into kube-scheduler's metrics
	ctx := t.Context()
	logger := klog.Background()
	on := internalcache.New(ctx, nil, true, false)
	on.AddPodGroup(gang("train", 4, map[string]string{"team": "ml"}))
	for _, p := range []*corev1.Pod{member("train-1", "train", "n2"), member("train-2", "train", "n1"), member("train-3", "train", "n2")} {
		if err := on.AddPod(logger, p); err != nil {
			t.Fatal(err)
		}
	}
	// Queued unscheduled, then assumed on n3, as a scheduling cycle does.
	on.AddPodGroupMember(member("train-4", "train", ""))
	if err := on.AssumePod(logger, member("train-4", "train", "n3")); err != nil {
		t.Fatal(err)
	}
	on.AddPodGroupMember(member("train-5", "train", ""))
	on.AddPodGroupMember(member("orphan-0", "orphan", ""))
	off := internalcache.New(ctx, nil, false, false)
	off.AddPodGroup(gang("train", 4, nil))

	tests := map[string]struct {
		cache internalcache.Cache
		pod   *corev1.Pod
		want  *engine.PodGroup
	}{
		"a gang with members bound and assumed": {
			cache: on, pod: member("train-5", "train", ""),
			want: engine.NewPodGroup("ml", "train", gang("train", 4, map[string]string{"team": "ml"}), []string{"n1", "n2", "n3"}),
		},
		"a bound member does not count itself": {
			cache: on, pod: member("train-1", "train", "n2"),
			want: engine.NewPodGroup("ml", "train", gang("train", 4, map[string]string{"team": "ml"}), []string{"n1", "n2", "n3"}),
		},
		"no PodGroup object yet":      {cache: on, pod: member("orphan-1", "orphan", ""), want: engine.NewPodGroup("ml", "orphan", nil, nil)},
		"no group":                    {cache: on, pod: pod("ml", "alone", nil), want: engine.NoPodGroup},
		"GenericWorkload off":         {cache: off, pod: member("train-5", "train", ""), want: engine.NewPodGroup("ml", "train", nil, nil)},
		"no pod group manager at all": {pod: member("train-5", "train", ""), want: engine.NewPodGroup("ml", "train", nil, nil)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			groups := &PodGroups{lister: func() podGroupLister {
				if tc.cache == nil {
					return nil
				}
				return tc.cache
			}}
			got := groups.PodGroup(tc.pod)
			if diff := cmp.Diff(tc.want.Key(), got.Key()); diff != "" {
				t.Errorf("podGroup (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodGroupHint: a PodGroup event requeues the pods that name the
// group when it is created or its labels or minCount change, if a policy
// reads podGroup; a member placed requeues a pod whose filter reads where
// the members are.
func TestPodGroupHint(t *testing.T) {
	t.Parallel()
	p := member("train-0", "train", "")
	relabelled := gang("train", 4, map[string]string{"team": "other"})
	resized := gang("train", 8, nil)
	cases := map[string]struct {
		filter         string
		oldObj, newObj any
		want           fwk.QueueingHint
	}{
		"created":                  {filter: "podGroup.minCount <= 4", newObj: gang("train", 4, nil), want: fwk.Queue},
		"created, unstructured":    {filter: "podGroup.minCount <= 4", newObj: unstructuredOf(t, gang("train", 4, nil)), want: fwk.Queue},
		"relabelled":               {filter: "podGroup.minCount <= 4", oldObj: gang("train", 4, nil), newObj: relabelled, want: fwk.Queue},
		"minCount changed":         {filter: "podGroup.minCount <= 4", oldObj: gang("train", 4, nil), newObj: resized, want: fwk.Queue},
		"status only":              {filter: "podGroup.minCount <= 4", oldObj: gang("train", 4, nil), newObj: gang("train", 4, nil), want: fwk.QueueSkip},
		"another group":            {filter: "podGroup.minCount <= 4", newObj: gang("eval", 4, nil), want: fwk.QueueSkip},
		"no policy reads podGroup": {filter: "node.metadata.name != ''", newObj: gang("train", 4, nil), want: fwk.QueueSkip},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, registry := newTestRuntime(t, namespace("ml", "1", nil))
			registry.Upsert(testPolicy("rules", "1", "", tc.filter, 1))
			got, err := rt.Requeue.PodGroupHint(klog.Background(), p, tc.oldObj, tc.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}

	placed := map[string]struct {
		filter string
		other  *corev1.Pod
		want   fwk.QueueingHint
	}{
		"a member placed, the filter reads the members": {filter: "node.metadata.name in podGroup.assignedNodes", other: member("train-1", "train", "n1"), want: fwk.Queue},
		"a member placed, the filter reads minCount":    {filter: "podGroup.minCount <= 4", other: member("train-1", "train", "n1"), want: fwk.QueueSkip},
		"another group's member placed":                 {filter: "node.metadata.name in podGroup.assignedNodes", other: member("eval-1", "eval", "n1"), want: fwk.QueueSkip},
	}
	for name, tc := range placed {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt, registry := newTestRuntime(t, namespace("ml", "1", nil))
			registry.Upsert(testPolicy("rules", "1", "", tc.filter, 1))
			got, err := rt.Requeue.PodHint(klog.Background(), p, nil, tc.other)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMatchFollowsTheGroup: a pod's kept Match is used while its group
// reads the same, and made again when the group changes (a member placed),
// so that no cycle decides on a stale podGroup.
func TestMatchFollowsTheGroup(t *testing.T) {
	t.Parallel()
	rt, registry := newTestRuntime(t, namespace("ml", "1", nil))
	registry.Upsert(builder.MakePolicy("near").Filter("near", "size(podGroup.assignedNodes) == 0 || node.metadata.name in podGroup.assignedNodes").Obj())
	p := member("train-0", "train", "")
	p.ResourceVersion = "1"
	pods := []*corev1.Pod{member("train-1", "train", "n1")}
	rt.Inputs.PodGroups = podGroupsFunc(func(pod *corev1.Pod) *engine.PodGroup {
		return engine.NewStaticPodGroups([]*schedulingv1beta1.PodGroup{gang("train", 2, nil)}, pods).PodGroup(pod)
	})
	ctx := context.Background()
	first, err := rt.Prepare(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rt.Prepare(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.Match != first.Match {
		t.Error("the Match was made again although nothing it depends on changed")
	}
	pods = append(pods, member("train-2", "train", "n2"))
	moved, err := rt.Prepare(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Match == first.Match {
		t.Fatal("the Match was kept although a member was placed")
	}
	if got := moved.Pod.Group.AssignedNodes; !cmp.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("the new Match's group has members on %v, want n1 and n2", got)
	}
}

// podGroupsFunc is a PodGroupResolver of a function.
type podGroupsFunc func(pod *corev1.Pod) *engine.PodGroup

func (f podGroupsFunc) PodGroup(pod *corev1.Pod) *engine.PodGroup { return f(pod) }

// TestSameGroupHint: a held member of a pod group is requeued when another
// member of its group is added, and for no other pod.
func TestSameGroupHint(t *testing.T) {
	t.Parallel()
	p := member("train-0", "train", "")
	p.UID = "train-0"
	other := func(name, group, node string) *corev1.Pod {
		o := member(name, group, node)
		o.UID = ktypes.UID(name)
		return o
	}
	elsewhere := other("train-1", "train", "")
	elsewhere.Namespace = "dev"
	cases := map[string]struct {
		pod, added *corev1.Pod
		want       fwk.QueueingHint
	}{
		"a member added":                {pod: p, added: other("train-1", "train", ""), want: fwk.Queue},
		"a member added, placed":        {pod: p, added: other("train-1", "train", "n1"), want: fwk.Queue},
		"another group's member":        {pod: p, added: other("eval-1", "eval", ""), want: fwk.QueueSkip},
		"a pod in no group":             {pod: p, added: pod("ml", "web", nil), want: fwk.QueueSkip},
		"the same group name elsewhere": {pod: p, added: elsewhere, want: fwk.QueueSkip},
		"the pod itself":                {pod: p, added: p, want: fwk.QueueSkip},
		"a held pod in no group":        {pod: pod("ml", "web", nil), added: other("train-1", "train", ""), want: fwk.QueueSkip},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := SameGroupHint(klog.Background(), tc.pod, nil, tc.added)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hint %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := SameGroupHint(klog.Background(), p, nil, "not a pod"); err == nil {
		t.Error("no error for an event without a pod")
	}
}
