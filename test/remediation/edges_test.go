package remediation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/kwok"
)

// ownedPod is a pod as a controller (owner) creates it, pinned to node
// with spec.nodeName: the test plays the StatefulSet and Job
// controllers, which the test control plane does not run.
func ownedPod(namespace, name string, owner client.Object, kind, schedulerName, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{SchedulerName: schedulerName, NodeName: node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func podTemplate(labels map[string]string, schedulerName, node string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{SchedulerName: schedulerName, NodeName: node, RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func statefulSet(namespace, name, schedulerName, node string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels, schedulerName, node)},
	}
}

// drifted waits until the policy's status.drift holds exactly the pods
// (by name) with the reasons want, and returns it.
func drifted(t *testing.T, policy string, want map[string]schedv1alpha1.DriftedPod) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	return waitPolicy(t, policy, fmt.Sprintf("with drifted pods %v", slices.Sorted(mapsKeys(want))), func(p *schedv1alpha1.SchedulingPolicy) bool {
		d := p.Status.Drift
		if d == nil || int(d.Count) != len(want) || len(d.Pods) != len(want) {
			return false
		}
		for _, got := range d.Pods {
			w, ok := want[got.Name]
			if !ok || got.NotEvicted != w.NotEvicted || got.PlacedBy != w.PlacedBy || got.Node != w.Node {
				return false
			}
		}
		return true
	})
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// policyEvents are the policy's events of the reason, as "related: note"
// (related is the pod's name, or empty).
func policyEvents(t *testing.T, policy, reason string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8sClient.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "SchedulingPolicy" && e.Regarding.Name == policy && e.Reason == reason {
			related := ""
			if e.Related != nil {
				related = e.Related.Name
			}
			out = append(out, related+": "+e.Note)
		}
	}
	return out
}

// TestRemediationJudgesTheReplacementByItsTemplate: pods that a
// ReplicaSet and a StatefulSet pin with spec.nodeName to a node the
// policy refuses, and a pod of a StatefulSet whose pods another scheduler
// places, run on refused nodes (the Job's case is
// simulate/verdict's TestReplace: KWOK completes a Job's pods at once). Drift reports every one of them (the
// other scheduler's with placedBy OtherScheduler, as a bare pod of
// another scheduler created with nodeName), and remediation evicts none:
// each replacement would come back (ReplacementPinned) or be placed by a
// scheduler that does not enforce the policy (ReplacementOtherScheduler),
// with a RemediationBlocked event that says so.
func TestRemediationJudgesTheReplacementByItsTemplate(t *testing.T) {
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	red, blue := "pin-red-"+id[len(id)-6:], "pin-blue-"+id[len(id)-6:]
	create(t, kwok.Node(red, map[string]string{"drift-tenant": "red"}))
	create(t, kwok.Node(blue, map[string]string{"drift-tenant": "blue"}))
	ns := createNamespace(t, "pinned", map[string]string{"drift-test": id, "tenant": "blue"})
	const policyName = "drift-pinned"
	applyPolicy(t, tenantPolicy(policyName, id, &schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict, Rate: 600}))

	// A ReplicaSet whose template pins its pods to the refused node.
	rs := replicaSet(ns, "sneaky", 1, map[string]string{"app": "sneaky"}, nil)
	rs.Spec.Template.Spec.NodeName = red
	create(t, rs)
	// A StatefulSet and a Job with the same pinning; the test creates
	// their pods as their controllers would.
	ss := statefulSet(ns, "pinned-ss", schedulerName, red)
	create(t, ss)
	// A StatefulSet whose pods another scheduler places.
	other := statefulSet(ns, "other-ss", corev1.DefaultSchedulerName, "")
	create(t, other)
	create(t, ownedPod(ns, "pinned-ss-0", ss, "StatefulSet", schedulerName, red))
	create(t, ownedPod(ns, "other-ss-0", other, "StatefulSet", corev1.DefaultSchedulerName, red))
	// A bare pod of another scheduler, created on the refused node.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName, NodeName: red,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
	create(t, bare)

	var rsPod string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		pods := podsOf(t, ns, map[string]string{"app": "sneaky"})
		if len(pods) == 1 && pods[0].Spec.NodeName == red {
			rsPod = pods[0].Name
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the ReplicaSet's pod is not on %s: %v", red, err)
	}
	pinned := func(name string) schedv1alpha1.DriftedPod {
		return schedv1alpha1.DriftedPod{Name: name, Node: red, PlacedBy: schedv1alpha1.PlacedByProfile, NotEvicted: schedv1alpha1.BlockedReplacementPinned}
	}
	want := map[string]schedv1alpha1.DriftedPod{
		rsPod:         pinned(rsPod),
		"pinned-ss-0": pinned("pinned-ss-0"),
		"other-ss-0":  {Name: "other-ss-0", Node: red, PlacedBy: schedv1alpha1.PlacedByOtherScheduler, NotEvicted: schedv1alpha1.BlockedOtherScheduler},
		"elsewhere":   {Name: "elsewhere", Node: red, PlacedBy: schedv1alpha1.PlacedByOtherScheduler, NotEvicted: schedv1alpha1.BlockedNoController},
	}
	before := podsOf(t, ns, nil)
	drifted(t, policyName, want)
	// Longer than many evictions at the policy's rate (one per 100 ms):
	// none happens.
	time.Sleep(5 * time.Second)
	final := drifted(t, policyName, want)
	if r := final.Status.Drift.Remediation; r == nil || r.Evicted != 0 || !r.Active {
		t.Errorf("status.drift.remediation = %+v, want active with no eviction", r)
	}
	after := podsOf(t, ns, nil)
	if len(after) != len(before) {
		t.Errorf("pods before %v, after %v", podPlaces(before), podPlaces(after))
	}
	for i := range min(len(before), len(after)) {
		if before[i].UID != after[i].UID || after[i].DeletionTimestamp != nil {
			t.Errorf("pod %s was evicted", before[i].Name)
		}
	}
	// One event per pod not evicted, related to it, that says why.
	notes := policyEvents(t, policyName, "RemediationBlocked")
	for _, want := range []string{
		"pinned-ss-0: not evicting pod " + ns + "/pinned-ss-0 from node " + red + " (ReplacementPinned): its replacement would be created with nodeName " + red,
		rsPod + ": not evicting pod " + ns + "/" + rsPod + " from node " + red + " (ReplacementPinned)",
		"other-ss-0: not evicting pod " + ns + "/other-ss-0 from node " + red + " (ReplacementOtherScheduler): its replacement would be placed by scheduler \"default-scheduler\"",
	} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("no RemediationBlocked event %q in %q", want, notes)
		}
	}
}

// TestRemediationStopsWhenTheReplacementComesBack: a StatefulSet whose
// template neither pins nor names another scheduler, but whose pod comes
// back to the refused node after each eviction (the test plays a
// controller that pins it): remediation evicts it once, sees the
// replacement on the node it evicted from, and stops remediating the
// workload (ReplacementRefused, with an Event); no second eviction.
func TestRemediationStopsWhenTheReplacementComesBack(t *testing.T) {
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	red, blue := "loop-red-"+id[len(id)-6:], "loop-blue-"+id[len(id)-6:]
	create(t, kwok.Node(red, map[string]string{"drift-tenant": "red"}))
	create(t, kwok.Node(blue, map[string]string{"drift-tenant": "blue"}))
	ns := createNamespace(t, "loop", map[string]string{"drift-test": id, "tenant": "blue"})
	const policyName = "drift-loop"
	applyPolicy(t, tenantPolicy(policyName, id, &schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict, Rate: 600}))
	ss := statefulSet(ns, "rogue", schedulerName, "")
	create(t, ss)

	// The rogue controller: rogue-0 exists, on the refused node.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	recreated := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pod := &corev1.Pod{}
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rogue-0"}, pod)
			if apierrors.IsNotFound(err) {
				if k8sClient.Create(ctx, ownedPod(ns, "rogue-0", ss, "StatefulSet", schedulerName, red)) == nil {
					recreated++
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	st := waitPolicy(t, policyName, "with the workload's remediation stopped", func(p *schedv1alpha1.SchedulingPolicy) bool {
		d := p.Status.Drift
		return d != nil && d.Count == 1 && len(d.Pods) == 1 && d.Pods[0].NotEvicted == schedv1alpha1.BlockedReplacementRefused
	})
	if got := st.Status.Drift.Remediation.Evicted; got != 1 {
		t.Errorf("evicted %d pods before stopping, want 1", got)
	}
	time.Sleep(5 * time.Second)
	cancel()
	<-done
	final := waitPolicy(t, policyName, "read", func(*schedv1alpha1.SchedulingPolicy) bool { return true })
	if got := final.Status.Drift.Remediation.Evicted; got != 1 {
		t.Errorf("evicted %d pods in all, want 1: remediation went on after the replacement came back", got)
	}
	if recreated != 2 {
		t.Errorf("the rogue controller created rogue-0 %d times, want 2 (one eviction)", recreated)
	}
	notes := policyEvents(t, policyName, "RemediationStopped")
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, "stopped remediating StatefulSet "+ns+"/rogue") && strings.Contains(n, "runs again on node "+red)
	}) {
		t.Errorf("no RemediationBlocked event says the workload's remediation stopped: %q", notes)
	}
}

// TestDeletingAReplicaSetDeletesItsPods: the test cluster (and `make
// run`'s) runs kube-controller-manager's garbage collector: a deleted
// ReplicaSet's pods go with it.
func TestDeletingAReplicaSetDeletesItsPods(t *testing.T) {
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	create(t, kwok.Node("gc-"+id[len(id)-6:], nil))
	ns := createNamespace(t, "gc", nil)
	labels := map[string]string{"app": "gc"}
	rs := replicaSet(ns, "gc", 2, labels, nil)
	create(t, rs)
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return len(podsOf(t, ns, labels)) == 2, nil
	}); err != nil {
		t.Fatalf("the ReplicaSet's pods were not created: %v", err)
	}
	if err := k8sClient.Delete(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		for _, p := range podsOf(t, ns, labels) {
			if p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("the deleted ReplicaSet's pods are still there: %v", podPlaces(podsOf(t, ns, labels)))
	}
}
