package integration

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/testenv"
)

// TestRolloutTwoWaves: a policy rolled out in two waves. The first wave's
// namespace has no violation during its soak: it is promoted, and its
// next pod is kept off the refused node. The second wave's namespace
// places a pod on that node during its soak: the wave pauses, naming the
// pod, and its pods are still placed there (Audit). Promoting it by the
// annotation enforces it; the rollout completes.
func TestRolloutTwoWaves(t *testing.T) {
	createNodes(t, nodeSpec{name: "roll-bad", labels: map[string]string{"bad": "true"}})
	one := createNamespace(t, "roll-one", map[string]string{"roll-wave": "one"})
	two := createNamespace(t, "roll-two", map[string]string{"roll-wave": "two"})
	p := builder.MakePolicy("roll-not-bad").Audit().PodLabels(map[string]string{"app": "roll-web"}).
		FilterMsg("not-bad", "node.metadata.labels[?'bad'].orValue('') != 'true'", "the node is bad", "").Obj()
	p.Spec.Rollout = &schedv1alpha1.Rollout{Waves: []schedv1alpha1.RolloutWave{
		{Name: "one", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"roll-wave": "one"}}, Soak: metav1.Duration{Duration: time.Second}},
		{Name: "two", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"roll-wave": "two"}}, Soak: metav1.Duration{Duration: 5 * time.Second}},
	}}
	applyPolicy(t, p)
	web := withLabels(map[string]string{"app": "roll-web"})

	st := waitRollout(t, p.Name, "wave one promoted", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveEnforced && st.Waves[1].Phase == schedv1alpha1.WaveSoaking
	})
	if st.Waves[0].WouldReject != 0 || st.Waves[0].PromotedTime == nil {
		t.Errorf("wave one: %+v", st.Waves[0])
	}
	// The promotion is status.rollout, which the scheduler's own informer
	// delivers to its registry a moment after the API server has it; a pod
	// created in that moment would be scheduled under the copy before (as
	// for any policy change).
	time.Sleep(propagation)
	waitPending(t, createPod(t, one, "web", web, onNode("roll-bad")), corev1.PodReasonUnschedulable, "the node is bad")
	// Wave two soaks: its pod goes to the bad node, and is evidence.
	expectNode(t, createPod(t, two, "web", web, onNode("roll-bad")), "roll-bad")
	st = waitRollout(t, p.Name, "wave two paused", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Phase == schedv1alpha1.RolloutPaused
	})
	if w := st.Waves[1]; w.Phase != schedv1alpha1.WavePaused || w.WouldReject != 1 || len(w.LastViolations) != 1 || w.LastViolations[0] != two+"/web" {
		t.Errorf("wave two: %+v", w)
	}
	// The pause is a condition too (for alerts and `kubectl wait`).
	waitCondition(t, p.Name, schedv1alpha1.ConditionRolloutPaused, func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == schedv1alpha1.ReasonGateExceeded && strings.Contains(c.Message, two+"/web")
	})
	// Still Audit in wave two while paused.
	expectNode(t, createPod(t, two, "web-2", web, onNode("roll-bad")), "roll-bad")

	// `celsched rollout status` shows the pause; a person promotes the wave
	// with `celsched rollout promote`.
	status := runCLI(t, "rollout", "status", "--kubeconfig", kubeconfig, p.Name)
	for _, want := range []string{"rollout Paused (GateExceeded): wave two: 1 pod(s)", "one   Enforced", "two   Paused", two + "/web"} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status lacks %q:\n%s", want, status)
		}
	}
	out := runCLI(t, "rollout", "promote", "--kubeconfig", kubeconfig, p.Name)
	request := requested(t, out)
	st = waitRollout(t, p.Name, "completed", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Phase == schedv1alpha1.RolloutCompleted && st.Waves[1].Phase == schedv1alpha1.WaveEnforced
	})
	if a := st.LastAction; a == nil || a.ID != request || a.Action != schedv1alpha1.RolloutActionPromote || a.Outcome != schedv1alpha1.ActionApplied {
		t.Errorf("last action %+v, want %s applied", a, request)
	}
	time.Sleep(propagation)
	waitPending(t, createPod(t, two, "web-3", web, onNode("roll-bad")), corev1.PodReasonUnschedulable, "the node is bad")
	waitCondition(t, p.Name, schedv1alpha1.ConditionRolloutPaused, func(c *metav1.Condition) bool { return c == nil })
	current := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: p.Name}, current); err != nil {
		t.Fatal(err)
	}
	if _, ok := current.Annotations[schedv1alpha1.RolloutActionAnnotation]; ok {
		t.Error("the action annotation was not removed")
	}
}

// TestRolloutAbort: abort returns a rollout to where it started, every
// wave audited, and status, `rollout status`, the Event and the scheduler
// agree. Before the abort, wave one is enforced (its pod is kept off the
// refused node) and wave two soaks (its pod is placed there). After it,
// status says Aborted with no wave Enforced, the CLI and the Event say
// every wave is audited, and the pods of both waves are placed on the
// refused node, wave one's refused pod too. Resume starts again from wave
// one.
func TestRolloutAbort(t *testing.T) {
	createNodes(t, nodeSpec{name: "abort-bad", labels: map[string]string{"abort-bad": "true"}})
	one := createNamespace(t, "abort-one", map[string]string{"abort-wave": "one"})
	two := createNamespace(t, "abort-two", map[string]string{"abort-wave": "two"})
	p := builder.MakePolicy("abort-not-bad").Audit().PodLabels(map[string]string{"app": "abort-web"}).
		FilterMsg("not-bad", "node.metadata.labels[?'abort-bad'].orValue('') != 'true'", "the node is bad", "").
		Wave("one", map[string]string{"abort-wave": "one"}, time.Second).
		Wave("two", map[string]string{"abort-wave": "two"}, time.Hour).Obj()
	applyPolicy(t, p)
	web := withLabels(map[string]string{"app": "abort-web"})

	waitRollout(t, p.Name, "wave one promoted", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveEnforced && st.Waves[1].Phase == schedv1alpha1.WaveSoaking
	})
	time.Sleep(propagation)
	refused := createPod(t, one, "web-1", web, onNode("abort-bad"))
	waitPending(t, refused, corev1.PodReasonUnschedulable, "the node is bad")
	expectNode(t, createPod(t, two, "web-1", web, onNode("abort-bad")), "abort-bad")

	aborted := time.Now()
	request := requested(t, runCLI(t, "rollout", "abort", "--kubeconfig", kubeconfig, p.Name))
	st := waitRollout(t, p.Name, "aborted", func(st *schedv1alpha1.RolloutStatus) bool { return st.Phase == schedv1alpha1.RolloutAborted })
	for _, w := range st.Waves {
		if w.Phase != schedv1alpha1.WavePending || w.PromotedTime != nil {
			t.Errorf("wave %s after the abort: %+v", w.Name, w)
		}
	}
	if a := st.LastAction; a == nil || a.ID != request || a.Outcome != schedv1alpha1.ActionApplied {
		t.Errorf("last action %+v, want %s applied", a, request)
	}
	const said = "every wave is audited (enforced before: one)"
	if !strings.Contains(st.Message, said) || st.PauseReason != "" {
		t.Errorf("status.rollout: pause reason %q, message %q", st.PauseReason, st.Message)
	}
	status := runCLI(t, "rollout", "status", "--kubeconfig", kubeconfig, p.Name)
	for _, want := range []string{"rollout Aborted: aborted by request: " + said, "one   Pending", "two   Pending", "Last action: " + request + ", Applied"} {
		if !strings.Contains(status, want) {
			t.Errorf("rollout status lacks %q:\n%s", want, status)
		}
	}
	waitPolicyEvent(t, p.Name, controllers.ReasonRolloutAction, "rollout aborted (annotation): every wave is audited again (enforced before: one)")

	// The scheduler audits both waves: the refused pod is requeued and
	// placed, and new pods of both waves go to the refused node.
	expectNode(t, refused, "abort-bad")
	time.Sleep(propagation)
	expectNode(t, createPod(t, one, "web-2", web, onNode("abort-bad")), "abort-bad")
	expectNode(t, createPod(t, two, "web-2", web, onNode("abort-bad")), "abort-bad")

	// Resume starts again from wave one: it soaks again (from after the
	// abort) before it is promoted.
	runCLI(t, "rollout", "resume", "--kubeconfig", kubeconfig, p.Name)
	st = waitRollout(t, p.Name, "resumed", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Waves[0].Phase == schedv1alpha1.WaveEnforced && st.Waves[1].Phase == schedv1alpha1.WaveSoaking
	})
	if start := st.Waves[0].StartTime; start == nil || start.Time.Before(aborted.Truncate(time.Second)) {
		t.Errorf("wave one after resume: %+v, want a soak started after the abort (%v)", st.Waves[0], aborted)
	}
}

// requested returns the annotation value that `celsched rollout ACTION`
// says it wrote.
func requested(t *testing.T, out string) string {
	t.Helper()
	_, after, ok := strings.Cut(out, schedv1alpha1.RolloutActionAnnotation+"=")
	value, _, ok2 := strings.Cut(after, ")")
	if !ok || !ok2 {
		t.Fatalf("no request in the output of celsched rollout: %s", out)
	}
	return value
}

// waitPolicyEvent waits until the policy has an Event with the reason and
// the note.
func waitPolicyEvent(t *testing.T, name, reason, note string) {
	t.Helper()
	var notes []string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := clientset.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = nil
		for _, e := range list.Items {
			if e.Regarding.Kind == "SchedulingPolicy" && e.Regarding.Name == name && e.Reason == reason {
				notes = append(notes, e.Note)
			}
		}
		return slices.Contains(notes, note), nil
	})
	if err != nil {
		t.Errorf("policy %s: no %s event %q: %v; got %q", name, reason, note, err, notes)
	}
}

// propagation is how long the test lets a status write reach the
// scheduler's informer before it creates a pod that must see it.
const propagation = 500 * time.Millisecond

// waitRollout waits until the policy's status.rollout satisfies ok.
func waitRollout(t *testing.T, name, what string, ok func(*schedv1alpha1.RolloutStatus) bool) *schedv1alpha1.RolloutStatus {
	t.Helper()
	return waitPolicy(t, name, "rollout "+what, func(got *schedv1alpha1.SchedulingPolicy) bool {
		st := got.Status.Rollout
		return st != nil && st.ObservedGeneration == got.Generation && len(st.Waves) == len(got.Spec.Rollout.Waves) && ok(st)
	}).Status.Rollout
}

// runCLI runs celsched and returns its output; it must succeed.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, out.String())
	}
	return out.String()
}

// waitCondition waits until a condition of the policy (nil when absent)
// satisfies ok.
func waitCondition(t *testing.T, name, conditionType string, ok func(*metav1.Condition) bool) {
	t.Helper()
	waitPolicy(t, name, "condition "+conditionType, func(got *schedv1alpha1.SchedulingPolicy) bool {
		return ok(meta.FindStatusCondition(got.Status.Conditions, conditionType))
	})
}

// TestRolloutPendingPods: the gate counts a wave's pending pod when the
// scheduler's framework finds it a node with the wave audited and none
// with it enforced, or, for a pod no node fits either way, when it waits
// for room on nodes the wave refuses (capacity aside, it has a node
// audited and none enforced). A pod too big for its zone's only node,
// which the wave's filter refuses, could never run there once the wave is
// enforced, even when the room frees: the wave pauses on it (GateExceeded,
// the pod named), and the next recheck after the pod is deleted promotes
// it. Pods pending for reasons of their own (no node in their zone; a pod
// the wave's preEnqueue rule would also hold) are not the wave's doing;
// the wave's next pod is kept off the refused node. (The pods the gate
// counts because the wave refuses the node they would get are pending
// only until the scheduler's next cycle for them; verdict's
// TestPendingPodsWouldStrand and TestVerdictIsOne count them over
// listers.)
func TestRolloutPendingPods(t *testing.T) {
	createNodes(t, nodeSpec{name: "pend-bad", labels: map[string]string{"pend-zone": "a", "pend-bad": "true"}, cpu: "1"})
	ns := createNamespace(t, "pend", map[string]string{"pend-wave": "one"})
	web := map[string]string{"app": "pend-web"}
	approved := map[string]string{"app": "pend-web", "approved": "yes"}
	inZone := func(zone string) podOption {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pend-zone": zone} }
	}
	// Pending for reasons of their own: no node in the zone, too big for
	// the zone's only node.
	unapproved := createPod(t, ns, "unapproved", withLabels(web), inZone("nowhere"))
	big := createPod(t, ns, "big", withLabels(approved), inZone("a"), withRequests("2", "1Gi"))
	waitPending(t, unapproved, corev1.PodReasonUnschedulable)
	waitPending(t, big, corev1.PodReasonUnschedulable, "Insufficient cpu")

	p := builder.MakePolicy("pend-rollout").Audit().PodLabels(web).
		PreEnqueue("approved", "pod.metadata.labels[?'approved'].orValue('') == 'yes'", "not approved").
		FilterMsg("not-bad", "node.metadata.labels[?'pend-bad'].orValue('') != 'true'", "the node is bad", "").
		Wave("only", map[string]string{"pend-wave": "one"}, 2*time.Second).Obj()
	applyPolicy(t, p)

	paused := waitRollout(t, p.Name, "paused by its gate on the big pod", func(st *schedv1alpha1.RolloutStatus) bool {
		return st.Phase == schedv1alpha1.RolloutPaused && st.PauseReason == schedv1alpha1.PauseGateExceeded
	})
	if w := paused.Waves[0]; w.PendingWouldReject != 1 || !slices.Equal(w.PendingViolations, []string{ns + "/big"}) {
		t.Errorf("wave: %+v, want one pending pod stranded: %s/big (unapproved is pending for reasons of its own)", w, ns)
	}
	deleteObject(t, big)
	st := waitRollout(t, p.Name, "completed", func(st *schedv1alpha1.RolloutStatus) bool { return st.Phase == schedv1alpha1.RolloutCompleted })
	if w := st.Waves[0]; w.Phase != schedv1alpha1.WaveEnforced {
		t.Errorf("wave: %+v, want enforced once the stranded pod is gone", w)
	}
	time.Sleep(propagation)
	waitPending(t, createPod(t, ns, "small", withLabels(approved), inZone("a")), corev1.PodReasonUnschedulable, "the node is bad")
}
