package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/audit"
)

// faults are the writes a test makes fail: each counter is how many of
// the next such writes fail (-1: all).
type faults struct {
	// removals are the annotation's removals (JSON patches).
	removals int
	// statusWrites are the writes of status.
	statusWrites int
	// identities are the writes that give a bare action its id.
	identities int
	// beforeRemoval, when set, runs before each removal reaches the API
	// server (with the client under the interceptor).
	beforeRemoval func(context.Context, client.Client) error
	// statusWritten counts the writes of status that succeeded.
	statusWritten int
}

var errInjected = errors.New("injected fault")

// fail says whether the next write of a counter fails, and counts it.
func fail(n *int) bool {
	switch {
	case *n < 0:
		return true
	case *n > 0:
		*n--
		return true
	}
	return false
}

// faultyClient is a fake API server holding the policy, whose writes fail
// as f says (f may change between steps).
func faultyClient(t *testing.T, p *schedv1alpha1.SchedulingPolicy, f *faults) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(p).WithStatusSubresource(p).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				switch patch.Type() {
				case types.JSONPatchType:
					if fail(&f.removals) {
						return errInjected
					}
					if f.beforeRemoval != nil {
						if err := f.beforeRemoval(ctx, c); err != nil {
							return err
						}
					}
				case types.MergePatchType:
					if fail(&f.identities) {
						return errInjected
					}
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if fail(&f.statusWrites) {
					return apierrors.NewConflict(schema.GroupResource{Group: schedv1alpha1.GroupVersion.Group, Resource: "schedulingpolicies"}, obj.GetName(), errInjected)
				}
				if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				f.statusWritten++
				return nil
			},
		}).Build()
}

// soakingPolicy is a two-wave policy (soaks of an hour, so that only
// actions move it) whose first wave soaks, with the action annotation.
func soakingPolicy(action string) *schedv1alpha1.SchedulingPolicy {
	p := rolloutPolicy(1, "one", "two")
	p.Spec.Rollout.Waves[0].Soak.Duration = time.Hour
	p.Spec.Rollout.Waves[1].Soak.Duration = time.Hour
	start := metav1.NewTime(time.Unix(1000, 0))
	p.Status.Rollout = &schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutProgressing, Waves: []schedv1alpha1.WaveStatus{
		{Name: "one", Phase: schedv1alpha1.WaveSoaking, StartTime: &start},
		{Name: "two", Phase: schedv1alpha1.WavePending},
	}}
	if action != "" {
		p.Annotations = map[string]string{schedv1alpha1.RolloutActionAnnotation: action}
	}
	return p
}

// newTestController is a rollout controller on c, whose clock is a
// minute into the first wave's soak.
func newTestController(c client.Client, rec events.EventRecorder) *RolloutController {
	return &RolloutController{Client: c, Log: &audit.Log{}, Recorder: rec,
		Now: func() time.Time { return time.Unix(1060, 0) }}
}

// step reconciles the policy "p" once; an error (an injected fault) is
// logged, as the controller's queue would retry it.
func step(t *testing.T, r *RolloutController) {
	t.Helper()
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err != nil {
		t.Logf("step: %v", err)
	}
}

// drain returns the events recorded so far.
func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestRolloutActionExactlyOnce: an action is applied once, whichever
// write of a step fails and however often the step runs again: a removal
// of the annotation that fails after the status write (the action is only
// removed at the next steps), a status write that fails (nothing is
// applied, the next step applies it), a bare action written by hand (given
// an id first; when that write fails nothing is applied), an unknown action
// (removed, never applied, said once), and a new request written between
// the status write and the removal (kept, and applied at the next step).
// Each case runs its steps with the faults, then steps with none.
func TestRolloutActionExactlyOnce(t *testing.T) {
	enforcedSoaking := []schedv1alpha1.WavePhase{schedv1alpha1.WaveEnforced, schedv1alpha1.WaveSoaking}
	cases := map[string]struct {
		annotation string
		faults     faults
		steps      int
		// wantDuring is the annotation after the faulty steps.
		wantDuring  string
		wantPhases  []schedv1alpha1.WavePhase
		wantRollout schedv1alpha1.RolloutPhase
		// wantAction is status.rollout.lastAction.id at the end.
		wantAction string
		// wantEvents are the events of the whole run, by reason and
		// the start of the note.
		wantEvents []string
	}{
		"removal fails after promote": {
			annotation:  "promote/a1",
			faults:      faults{removals: -1},
			steps:       4,
			wantDuring:  "promote/a1",
			wantPhases:  enforcedSoaking,
			wantRollout: schedv1alpha1.RolloutProgressing,
			wantAction:  "promote/a1",
			wantEvents:  []string{"Normal RolloutAction wave one promoted to Enforce (annotation)", "Normal RolloutWaveStarted wave two soaks"},
		},
		"status write fails before promote is applied": {
			annotation:  "promote/a2",
			faults:      faults{statusWrites: 2},
			steps:       2,
			wantDuring:  "promote/a2",
			wantPhases:  enforcedSoaking,
			wantRollout: schedv1alpha1.RolloutProgressing,
			wantAction:  "promote/a2",
			wantEvents:  []string{"Normal RolloutAction wave one promoted to Enforce (annotation)", "Normal RolloutWaveStarted wave two soaks"},
		},
		"bare promote, removal fails": {
			annotation: "promote",
			faults:     faults{removals: -1},
			steps:      3,
			// The resourceVersion the fake client gave the policy.
			wantDuring:  "promote/rv-999",
			wantPhases:  enforcedSoaking,
			wantRollout: schedv1alpha1.RolloutProgressing,
			wantAction:  "promote/rv-999",
			wantEvents:  []string{"Normal RolloutAction wave one promoted to Enforce (annotation)", "Normal RolloutWaveStarted wave two soaks"},
		},
		"bare promote, its id cannot be written": {
			annotation:  "promote",
			faults:      faults{identities: -1},
			steps:       3,
			wantDuring:  "promote",
			wantPhases:  enforcedSoaking,
			wantRollout: schedv1alpha1.RolloutProgressing,
			// Applied after the faults, with the version seen then.
			wantAction: "promote/rv-999",
			wantEvents: []string{"Normal RolloutAction wave one promoted to Enforce (annotation)", "Normal RolloutWaveStarted wave two soaks"},
		},
		"abort, removal fails": {
			annotation:  "abort/a3",
			faults:      faults{removals: -1},
			steps:       3,
			wantDuring:  "abort/a3",
			wantPhases:  []schedv1alpha1.WavePhase{schedv1alpha1.WavePending, schedv1alpha1.WavePending},
			wantRollout: schedv1alpha1.RolloutAborted,
			wantAction:  "abort/a3",
			wantEvents:  []string{"Warning RolloutAction rollout aborted (annotation): every wave is audited again (no wave was enforced)"},
		},
		"resume of a pause, removal fails": {
			annotation:  "pause/a4",
			faults:      faults{removals: -1},
			steps:       3,
			wantDuring:  "pause/a4",
			wantPhases:  []schedv1alpha1.WavePhase{schedv1alpha1.WavePaused, schedv1alpha1.WavePending},
			wantRollout: schedv1alpha1.RolloutPaused,
			wantAction:  "pause/a4",
			wantEvents:  []string{"Normal RolloutAction rollout paused at wave one (annotation)"},
		},
		"unknown action, removal fails": {
			annotation:  "promot/a5",
			faults:      faults{removals: 2},
			steps:       2,
			wantDuring:  "promot/a5",
			wantPhases:  []schedv1alpha1.WavePhase{schedv1alpha1.WaveSoaking, schedv1alpha1.WavePending},
			wantRollout: schedv1alpha1.RolloutProgressing,
			wantEvents:  []string{`Warning RolloutAction scheduling.celsched.io/rollout-action "promot/a5" removed, not applied: unknown action "promot"`},
		},
		"a new request written before the removal": {
			annotation: "promote/a6",
			faults: faults{beforeRemoval: func(ctx context.Context, c client.Client) error {
				p := &schedv1alpha1.SchedulingPolicy{}
				if err := c.Get(ctx, client.ObjectKey{Name: "p"}, p); err != nil {
					return err
				}
				if p.Annotations[schedv1alpha1.RolloutActionAnnotation] != "promote/a6" {
					return nil
				}
				patch := client.MergeFrom(p.DeepCopy())
				p.Annotations[schedv1alpha1.RolloutActionAnnotation] = "pause/a7"
				return c.Patch(ctx, p, patch)
			}},
			steps:       1,
			wantDuring:  "pause/a7",
			wantPhases:  []schedv1alpha1.WavePhase{schedv1alpha1.WaveEnforced, schedv1alpha1.WavePaused},
			wantRollout: schedv1alpha1.RolloutPaused,
			wantAction:  "pause/a7",
			wantEvents: []string{"Normal RolloutAction wave one promoted to Enforce (annotation)", "Normal RolloutWaveStarted wave two soaks",
				"Normal RolloutAction rollout paused at wave two (annotation)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := tc.faults
			c := faultyClient(t, soakingPolicy(tc.annotation), &f)
			rec := events.NewFakeRecorder(100)
			r := newTestController(c, rec)
			for range tc.steps {
				step(t, r)
			}
			got := &schedv1alpha1.SchedulingPolicy{}
			if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			if a := got.Annotations[schedv1alpha1.RolloutActionAnnotation]; a != tc.wantDuring {
				t.Errorf("annotation after the faulty steps: %q, want %q", a, tc.wantDuring)
			}
			f = faults{}
			for range 3 {
				step(t, r)
			}
			if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			if a, ok := got.Annotations[schedv1alpha1.RolloutActionAnnotation]; ok {
				t.Errorf("annotation left: %q", a)
			}
			st := got.Status.Rollout
			if diff := cmp.Diff(tc.wantPhases, phases(st)); diff != "" || st.Phase != tc.wantRollout {
				t.Errorf("rollout %s, want %s; waves (-want +got):\n%s", st.Phase, tc.wantRollout, diff)
			}
			action := ""
			if st.LastAction != nil {
				action = st.LastAction.ID
			}
			if action != tc.wantAction {
				t.Errorf("last action %q, want %q", action, tc.wantAction)
			}
			evs := drain(rec)
			if len(evs) != len(tc.wantEvents) {
				t.Fatalf("events %q, want %q", evs, tc.wantEvents)
			}
			for i, want := range tc.wantEvents {
				if !strings.HasPrefix(evs[i], want) {
					t.Errorf("event %d: %q, want %q...", i, evs[i], want)
				}
			}
		})
	}
}

// TestRolloutActionAfterRestart: the leader writes the status of a
// promote and stops before it removes the annotation; a new controller
// (no memory of the old one's) removes it and promotes nothing more.
func TestRolloutActionAfterRestart(t *testing.T) {
	f := faults{removals: -1}
	c := faultyClient(t, soakingPolicy("promote/b1"), &f)
	rec := events.NewFakeRecorder(100)
	step(t, newTestController(c, rec))
	f = faults{}
	restarted := newTestController(c, rec)
	for range 3 {
		step(t, restarted)
	}
	got := &schedv1alpha1.SchedulingPolicy{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	want := []schedv1alpha1.WavePhase{schedv1alpha1.WaveEnforced, schedv1alpha1.WaveSoaking}
	if diff := cmp.Diff(want, phases(got.Status.Rollout)); diff != "" {
		t.Errorf("waves (-want +got):\n%s", diff)
	}
	if a, ok := got.Annotations[schedv1alpha1.RolloutActionAnnotation]; ok {
		t.Errorf("annotation left: %q", a)
	}
	if evs := drain(rec); len(evs) != 2 {
		t.Errorf("events: %q", evs)
	}
}

// TestRolloutRestartOnce: a new generation restarts the rollout once,
// in the write that records the generation: when that write fails, the
// next step computes the same restart; once written, the waves go on
// from it (a second step does not restart the soak again).
func TestRolloutRestartOnce(t *testing.T) {
	p := soakingPolicy("")
	p.Status.Rollout.Waves[0].Phase = schedv1alpha1.WaveEnforced
	p.Status.Rollout.Waves[1].Phase = schedv1alpha1.WaveSoaking
	p.Generation = 2
	f := faults{statusWrites: 1}
	c := faultyClient(t, p, &f)
	clock := time.Unix(2000, 0)
	r := newTestController(c, nil)
	r.Now = func() time.Time { return clock }
	step(t, r)
	got := &schedv1alpha1.SchedulingPolicy{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Rollout.ObservedGeneration != 1 {
		t.Fatalf("the failed write changed the status: %+v", got.Status.Rollout)
	}
	step(t, r)
	clock = clock.Add(time.Minute)
	step(t, r)
	if err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	st := got.Status.Rollout
	want := []schedv1alpha1.WavePhase{schedv1alpha1.WaveEnforced, schedv1alpha1.WaveSoaking}
	if diff := cmp.Diff(want, phases(st)); diff != "" || st.ObservedGeneration != 2 {
		t.Fatalf("generation %d, waves (-want +got):\n%s", st.ObservedGeneration, diff)
	}
	if start := st.Waves[1].StartTime; start == nil || !start.Time.Equal(time.Unix(2000, 0)) {
		t.Errorf("wave two's soak started at %v, want the first step's time", start)
	}
}
