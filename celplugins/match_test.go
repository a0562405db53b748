package celplugins

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// fakeParamsVersion is a params resolver whose version the test moves.
type fakeParamsVersion struct {
	engine.ParamsResolver
	version uint64
}

func (f *fakeParamsVersion) Version() uint64 { return f.version }

// TestMatchShared: a cycle's Match is kept and shared by the pod's next
// cycle and by its queueing hints while the pod, its namespace, the
// policies and the params objects are the versions it was made from; a
// change of any of them gives a new Match, which agrees with one made
// fresh; a pod without a resourceVersion is never kept; bound and deleted
// pods leave.
func TestMatchShared(t *testing.T) {
	ns := namespace("ns", "1", map[string]string{"team": "a"})
	rt, registry := newTestRuntime(t, ns)
	params := &fakeParamsVersion{}
	rt.Inputs.Params = params
	registry.Upsert(testPolicy("team-a", "1", "a", "node.metadata.labels['rack'] == 'r1'", 1))
	p := pod("ns", "p", map[string]string{"app": "web"})
	p.ResourceVersion = "10"
	ctx := context.Background()

	prepare := func(pod *corev1.Pod) *Match {
		t.Helper()
		c, err := rt.Prepare(ctx, pod, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c.Match
	}
	first := prepare(p)
	if len(first.Filters) != 1 {
		t.Fatalf("the policy of team a does not apply: %d filters", len(first.Filters))
	}
	if again := prepare(p); again != first {
		t.Error("the pod's next cycle matched again although nothing changed")
	}
	hinted, err := rt.Inputs.Match(ctx, p)
	if err != nil || hinted != first {
		t.Errorf("a hint did not read the kept Match (%p, %v; kept %p)", hinted, err, first)
	}
	if _, err := rt.Requeue.NodeHint(klog.Background(), p, nil, node("n", "1", map[string]string{"rack": "r1"})); err != nil {
		t.Fatal(err)
	}

	// Each change is a new Match, which agrees with a fresh one.
	changes := []struct {
		name   string
		change func() *corev1.Pod
		// filters is how many policies with filters apply after it.
		filters int
	}{
		{"the pod's version", func() *corev1.Pod {
			q := p.DeepCopy()
			q.ResourceVersion = "11"
			return q
		}, 1},
		{"the namespace's labels", func() *corev1.Pod {
			rt.Inputs.ObserveNamespace(namespace("ns", "2", map[string]string{"team": "b"}))
			return p
		}, 0},
		{"the policies", func() *corev1.Pod {
			registry.Upsert(testPolicy("team-b", "1", "b", "true", 1))
			return p
		}, 1},
		{"the params objects", func() *corev1.Pod {
			params.version++
			return p
		}, 1},
	}
	last := first
	for _, ch := range changes {
		q := ch.change()
		m := prepare(q)
		if m == last {
			t.Errorf("after a change of %s, the kept Match was reused", ch.name)
		}
		if len(m.Filters) != ch.filters {
			t.Errorf("after a change of %s: %d policies with filters apply, want %d", ch.name, len(m.Filters), ch.filters)
		}
		fresh := newMatch(ctx, registry.Snapshot(), m.Pod)
		if len(fresh.Filters) != len(m.Filters) || len(fresh.Scores) != len(m.Scores) || (fresh.Rejection == nil) != (m.Rejection == nil) {
			t.Errorf("after a change of %s, the Match differs from a fresh one", ch.name)
		}
		if again := prepare(q); again != m {
			t.Errorf("after a change of %s, the new Match was not kept", ch.name)
		}
		last = m
	}

	unversioned := pod("ns", "dry-run", nil)
	a, b := prepare(unversioned), prepare(unversioned)
	if a == b {
		t.Error("the Match of a pod without a resourceVersion was kept")
	}

	rt.Inputs.forgetPod(p.UID)
	if _, kept := rt.Inputs.matches.byPod.Load(p.UID); kept {
		t.Error("a forgotten pod's Match is still kept")
	}
}

// TestMatchNotKeptPastBudget: a match whose evaluations ran out of the
// cycle's time is not kept (a later cycle with time must evaluate it).
func TestMatchNotKeptPastBudget(t *testing.T) {
	rt, registry := newTestRuntime(t, namespace("ns", "1", nil))
	registry.Upsert(builder.MakePolicy("any").Filter("f", "true").Obj())
	p := pod("ns", "p", nil)
	p.ResourceVersion = "1"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rt.Prepare(ctx, p, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, kept := rt.Inputs.matches.byPod.Load(p.UID); kept {
		t.Error("a Match made after the cycle's context ended was kept")
	}
}
