package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
)

// waveView compiles p and returns its copy for the namespaces of the
// wave of index i (labelled wave=<its name>), as the scheduler's plugins
// use it.
func waveView(t *testing.T, p *schedv1alpha1.SchedulingPolicy, i int) *engine.CompiledPolicy {
	t.Helper()
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	compiled := engine.NewCompiler(env).Compile(p, engine.CompileOptions{Stored: true})
	if err := compiled.Err(); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"wave": p.Spec.Rollout.Waves[i].Name}
	view := compiled.ForNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: labels}})
	if view.Wave() != i {
		t.Fatalf("the view of wave %d has wave %d", i, view.Wave())
	}
	return view
}

// bind reports n pods bound for the policy (view), the first violations
// of them with a violation each.
func bind(log *audit.Log, view *engine.CompiledPolicy, n, violations int) {
	rec := events.NewFakeRecorder(n)
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + string(rune('a'+i))}}
		var vs []schedv1alpha1.AuditViolation
		if i < violations {
			vs = []schedv1alpha1.AuditViolation{{Pod: "ns/" + pod.Name, Rule: "filters/f"}}
		}
		log.Report(rec, view, pod, "node", vs)
	}
}

func policyRequest(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// TestRolloutReconcile: the rollout controller steps a policy on its
// events and evidence and says when to look again (the soak's end, the
// next evidence write); evidence alone is written at most once per
// WriteInterval, and leaves the cache only once written, so that a write
// that fails loses nothing and counts nothing twice; the counts of pending
// pods are pruned with the waves, and what the controller keeps of a
// policy, with the policy; Flush (the leader stops) writes what was held
// back.
func TestRolloutReconcile(t *testing.T) {
	p := soakingPolicy("")
	for i := range p.Spec.Rollout.Waves {
		p.Spec.Rollout.Waves[i].Soak.Duration = time.Minute
		p.Spec.Rollout.Waves[i].MaxWouldReject = ptrTo(int32(10))
		p.Spec.Rollout.Waves[i].NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"wave": p.Spec.Rollout.Waves[i].Name}}
	}
	p.Spec.Enforcement = schedv1alpha1.Audit
	p.Spec.Filters = []schedv1alpha1.Rule{{Name: "f", Expression: "true"}}
	view := waveView(t, p, 0)
	f := faults{}
	c := faultyClient(t, p, &f)
	clock := time.Unix(1010, 0) // the soak of wave one began at 1000
	r := newTestController(c, nil)
	r.Now = func() time.Time { return clock }
	r.WriteInterval = 10 * time.Second
	pending := &fakePending{}
	r.Pending = pending
	reconcile := func(want time.Duration) {
		t.Helper()
		res, err := r.Reconcile(t.Context(), policyRequest("p"))
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != want {
			t.Errorf("at %d: requeue after %s, want %s", clock.Unix(), res.RequeueAfter, want)
		}
	}
	waveOne := func() schedv1alpha1.WaveStatus {
		t.Helper()
		got := &schedv1alpha1.SchedulingPolicy{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Rollout.Waves[0]
	}

	// Nothing to do: the soak ends in 50 s.
	reconcile(50 * time.Second)
	if f.statusWritten != 0 {
		t.Errorf("%d writes with nothing to write", f.statusWritten)
	}
	bind(r.Log, view, 3, 1)
	reconcile(50 * time.Second)
	if w := waveOne(); f.statusWritten != 1 || w.Evaluated != 3 || w.WouldReject != 1 {
		t.Fatalf("after the first evidence: %d writes, wave one %+v", f.statusWritten, w)
	}
	if left := r.Log.Waves.Policies(); len(left) != 0 {
		t.Errorf("written evidence left in the cache: %v", left)
	}
	// More evidence 5 s later: held back until 10 s after the last write.
	clock = clock.Add(5 * time.Second)
	bind(r.Log, view, 2, 0)
	reconcile(5 * time.Second)
	if f.statusWritten != 1 {
		t.Errorf("evidence written within WriteInterval: %d writes", f.statusWritten)
	}
	// The write fails (a conflict): the evidence stays; written at the
	// next step, once.
	clock = clock.Add(5 * time.Second)
	f.statusWrites = 1
	reconcile(registryLag)
	if w := waveOne(); w.Evaluated != 3 || len(r.Log.Waves.Policies()) != 1 {
		t.Fatalf("after a failed write: wave one %+v, unwritten evidence of %v", w, r.Log.Waves.Policies())
	}
	reconcile(40 * time.Second)
	if w := waveOne(); f.statusWritten != 2 || w.Evaluated != 5 || w.WouldReject != 1 {
		t.Fatalf("after the retry: %d writes, wave one %+v", f.statusWritten, w)
	}
	// The soak is over: the pending pods are counted, the wave promoted at
	// once (a decision is not held back), and wave two soaks for a minute.
	clock = clock.Add(40 * time.Second)
	reconcile(time.Minute)
	if w := waveOne(); w.Phase != schedv1alpha1.WaveEnforced || pending.asked != 1 {
		t.Fatalf("at the soak's end: wave one %+v, pending counted %d times", w, pending.asked)
	}
	mem := r.memory["p"]
	if mem == nil || len(mem.counted) != 0 {
		t.Errorf("the count of wave one outlived its soak: %+v", mem)
	}
	// Wave two's evidence, a second after the last write: held back; when
	// the leader stops, Flush writes it.
	clock = clock.Add(time.Second)
	bind(r.Log, waveView(t, p, 1), 2, 0)
	reconcile(9 * time.Second)
	r.Flush(t.Context())
	got := &schedv1alpha1.SchedulingPolicy{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if w := got.Status.Rollout.Waves[1]; w.Evaluated != 2 || len(r.Log.Waves.Policies()) != 0 {
		t.Errorf("after the flush: wave two %+v, unwritten evidence of %v", w, r.Log.Waves.Policies())
	}
	// Deleted: what the controller kept of the policy goes, with its
	// evidence.
	bind(r.Log, view, 1, 0)
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	reconcile(0)
	if _, ok := r.memory["p"]; ok || len(r.Log.Waves.Policies()) != 0 {
		t.Errorf("kept after the policy's deletion: %+v, evidence of %v", r.memory, r.Log.Waves.Policies())
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestAuditStatusWriterReconcile: status.audit is written when a policy
// gains evidence, at most once per Interval (RequeueAfter says when
// next); a write that fails keeps the evidence, and the counts written in
// the end are exact; a deleted policy's evidence is dropped.
func TestAuditStatusWriterReconcile(t *testing.T) {
	p := rolloutPolicy(1)
	p.Spec.Rollout = nil
	f := faults{}
	c := faultyClient(t, p, &f)
	clock := time.Unix(1000, 0)
	w := &AuditStatusWriter{Client: c, Log: &audit.Log{}, Interval: 10 * time.Second, Now: func() time.Time { return clock }}
	compiled := &engine.CompiledPolicy{Program: &engine.Program{Name: "p", Generation: 1}}
	reconcile := func(want time.Duration) {
		t.Helper()
		res, err := w.Reconcile(t.Context(), policyRequest("p"))
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != want {
			t.Errorf("at %d: requeue after %s, want %s", clock.Unix(), res.RequeueAfter, want)
		}
	}
	stored := func() *schedv1alpha1.AuditStatus {
		t.Helper()
		got := &schedv1alpha1.SchedulingPolicy{}
		if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Audit
	}
	if got := w.Log.Policies.Touched(); len(got) != 0 {
		t.Fatalf("touched before any pod: %v", got)
	}
	bind(w.Log, compiled, 4, 2)
	if got := w.Log.Policies.Touched(); !cmp.Equal(got, []string{"p"}) {
		t.Errorf("touched %v, want [p]", got)
	}
	reconcile(0)
	if a := stored(); f.statusWritten != 1 || a.Evaluated != 4 || a.WouldReject != 2 {
		t.Fatalf("%d writes, status.audit %+v", f.statusWritten, a)
	}
	for range 20 {
		clock = clock.Add(time.Second / 2)
		bind(w.Log, compiled, 1, 1)
		if _, err := w.Reconcile(t.Context(), policyRequest("p")); err != nil {
			t.Fatal(err)
		}
	}
	// 10 s and 20 pods later: one more write, at the 10th second, with
	// all of them.
	if a := stored(); f.statusWritten != 2 || a.Evaluated != 24 || a.WouldReject != 22 || len(w.Log.Policies.Policies()) != 0 {
		t.Errorf("after 10 s of pods: %d writes, status.audit %+v, unwritten evidence of %v", f.statusWritten, a, w.Log.Policies.Policies())
	}
	// A write that fails keeps the evidence; the retry writes it once.
	bind(w.Log, compiled, 3, 0)
	clock = clock.Add(10 * time.Second)
	f.statusWrites = 1
	reconcile(registryLag)
	if a := stored(); a.Evaluated != 24 || len(w.Log.Policies.Policies()) != 1 {
		t.Errorf("after a failed write: status.audit %+v, unwritten evidence of %v", a, w.Log.Policies.Policies())
	}
	reconcile(0)
	if a := stored(); f.statusWritten != 3 || a.Evaluated != 27 || a.WouldReject != 22 || len(w.Log.Policies.Policies()) != 0 {
		t.Errorf("after the retry: %d writes, status.audit %+v, unwritten evidence of %v", f.statusWritten, a, w.Log.Policies.Policies())
	}
	bind(w.Log, compiled, 1, 0)
	got := &schedv1alpha1.SchedulingPolicy{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	reconcile(0)
	if left := w.Log.Policies.Policies(); len(left) != 0 {
		t.Errorf("evidence of a deleted policy kept: %v", left)
	}
}
