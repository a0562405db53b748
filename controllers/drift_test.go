package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

func TestMaxUnavailable(t *testing.T) {
	tests := map[string]struct {
		v     *intstr.IntOrString
		total int
		want  int
	}{
		"default":                    {total: 10, want: 1},
		"an integer":                 {v: ptr.To(intstr.FromInt32(3)), total: 10, want: 3},
		"a percentage, rounded down": {v: ptr.To(intstr.FromString("25%")), total: 10, want: 2},
		"at least one":               {v: ptr.To(intstr.FromString("10%")), total: 5, want: 1},
		"all":                        {v: ptr.To(intstr.FromString("100%")), total: 6, want: 6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := maxUnavailable(tc.v, tc.total); got != tc.want {
				t.Errorf("maxUnavailable(%v, %d) = %d, want %d", tc.v, tc.total, got, tc.want)
			}
		})
	}
}

// TestDriftEvents: which updates recompute a pod's or a node's drift.
func TestDriftEvents(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
	heartbeat := node.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	relabelled := node.DeepCopy()
	relabelled.Labels["zone"] = "b"
	tainted := node.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	resized := node.DeepCopy()
	resized.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("2")
	for name, tc := range map[string]struct {
		node *corev1.Node
		want bool
	}{"heartbeat": {heartbeat, false}, "relabelled": {relabelled, true}, "tainted": {tainted, true}, "resized": {resized, true}} {
		if got := nodeChanged(node, tc.node); got != tc.want {
			t.Errorf("nodeChanged(%s) = %v, want %v", name, got, tc.want)
		}
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "a"}}, Spec: corev1.PodSpec{NodeName: "n"}}
	ready := pod.DeepCopy()
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	relabelledPod := pod.DeepCopy()
	relabelledPod.Labels = map[string]string{"app": "b"}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{"ready": {ready, false}, "deleting": {deleting, true}, "relabelled": {relabelledPod, true}} {
		if got := podChanged(pod, tc.pod); got != tc.want {
			t.Errorf("podChanged(%s) = %v, want %v", name, got, tc.want)
		}
	}
}

// TestRemediationActive: remediation acts only for an enforced policy
// with spec.remediation, not paused, not deleted, with the manager's
// --remediation.
func TestRemediationActive(t *testing.T) {
	evict := func(p *schedv1alpha1.SchedulingPolicy) *schedv1alpha1.SchedulingPolicy {
		p.Spec.Remediation = &schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict}
		return p
	}
	enforced := evict(&schedv1alpha1.SchedulingPolicy{Spec: schedv1alpha1.SchedulingPolicySpec{Enforcement: schedv1alpha1.Enforce}})
	audited := enforced.DeepCopy()
	audited.Spec.Enforcement = schedv1alpha1.Audit
	paused := enforced.DeepCopy()
	paused.Spec.Enforcement = schedv1alpha1.Audit
	paused.Spec.Rollout = &schedv1alpha1.Rollout{}
	paused.Status.Rollout = &schedv1alpha1.RolloutStatus{Phase: schedv1alpha1.RolloutPaused}
	deleting := enforced.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	tests := map[string]struct {
		p          *schedv1alpha1.SchedulingPolicy
		flag       bool
		want       bool
		wantReason string
	}{
		"enforced":            {p: enforced, flag: true, want: true},
		"disabled by manager": {p: enforced, flag: false, wantReason: RemediationDisabled},
		"audited":             {p: audited, flag: true, wantReason: RemediationNotEnforced},
		"rollout paused":      {p: paused, flag: true, wantReason: RemediationPaused},
		"being deleted":       {p: deleting, flag: true, wantReason: RemediationDeleting},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := &DriftController{Remediation: tc.flag, Evict: func(context.Context, *corev1.Pod) error { return nil }}
			got, reason := d.remediationActive(tc.p)
			if got != tc.want || reason != tc.wantReason {
				t.Errorf("remediationActive = %v, %q; want %v, %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

// TestDriftPodGroupEvents: a PodGroup's change recomputes the drift of its
// members on nodes when it changes what podGroup reads (labels, minCount),
// not its status; the members are the group's bound pods of its
// namespace.
func TestDriftPodGroupEvents(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", Labels: map[string]string{"tier": "gpu"}},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}}}}
	status := pg.DeepCopy()
	status.Status.Conditions = []metav1.Condition{{Type: "PodGroupScheduled", Status: metav1.ConditionTrue}}
	relabelled := pg.DeepCopy()
	relabelled.Labels["tier"] = "cpu"
	shrunk := pg.DeepCopy()
	shrunk.Spec.SchedulingPolicy.Gang.MinCount = 2
	for name, tc := range map[string]struct {
		pg   *schedulingv1beta1.PodGroup
		want bool
	}{"status": {status, false}, "relabelled": {relabelled, true}, "minCount": {shrunk, true}} {
		if got := podGroupChanged(pg, tc.pg); got != tc.want {
			t.Errorf("podGroupChanged(%s) = %v, want %v", name, got, tc.want)
		}
	}

	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	member := func(ns, name, group, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: node, SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: &group}}}
	}
	for _, p := range []*corev1.Pod{member("ml", "train-0", "train", "n1"), member("ml", "train-1", "train", ""),
		member("ml", "other-0", "other", "n1"), member("web", "train-0", "train", "n1")} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	d := &DriftController{Pods: corelisters.NewPodLister(pods)}
	if got, want := d.groupMembers(pg), []driftKey{{kind: driftPod, namespace: "ml", name: "train-0"}}; !slices.Equal(got, want) {
		t.Errorf("groupMembers = %v, want %v", got, want)
	}
}

// TestWatchPodGroups: on kube-scheduler's PodGroup informer, a PodGroup
// created or relabelled queues its members on nodes; a status change
// queues nothing (the next item is another group's member, and the
// informer delivers events in order).
func TestWatchPodGroups(t *testing.T) {
	member := func(name, group, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Spec: corev1.PodSpec{NodeName: node, SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: &group}}}
	}
	client := fake.NewClientset(member("train-0", "train", "n1"), member("train-1", "train", ""), member("other-0", "other", "n2"))
	factory := informers.NewSharedInformerFactory(client, 0)
	d := &DriftController{Pods: factory.Core().V1().Pods().Lister(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[driftKey]())}
	defer d.queue.ShutDown()
	if err := d.WatchPodGroups(factory.Scheduling().V1beta1().PodGroups().Informer()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	next := func(want string) {
		t.Helper()
		got := make(chan driftKey, 1)
		go func() {
			if k, shutdown := d.queue.Get(); !shutdown {
				d.queue.Done(k)
				got <- k
			}
		}()
		select {
		case k := <-got:
			if want := (driftKey{kind: driftPod, namespace: "ml", name: want}); k != want {
				t.Fatalf("queued %v, want %v", k, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing queued within 10s, want ml/%s", want)
		}
	}
	pgs := client.SchedulingV1beta1().PodGroups("ml")
	pg, err := pgs.Create(ctx, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", Labels: map[string]string{"tier": "gpu"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next("train-0") // created: its one member on a node
	pg.Status.Conditions = []metav1.Condition{{Type: "PodGroupScheduled", Status: metav1.ConditionTrue, Reason: "Scheduled", LastTransitionTime: metav1.Now()}}
	if pg, err = pgs.UpdateStatus(ctx, pg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pgs.Create(ctx, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("other-0") // not train-0: the status change queued nothing
	pg.Labels["tier"] = "cpu"
	if _, err := pgs.Update(ctx, pg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("train-0") // relabelled
}
