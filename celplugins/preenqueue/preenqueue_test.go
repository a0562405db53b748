package preenqueue

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/util/workqueue"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/lru"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/test/builder"
)

// TestStatusCodes: a held pod is UnschedulableAndUnresolvable (it stays out
// of the queue until an event the plugin registered requeues it), with the
// policy, rule and message; a passing, ignored or audited rule lets it in.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	pod := st.MakePod().Namespace("ns").Name("p").SchedulerName("celsched").Label("app", "db").Obj()
	unresolvable := func(msg string) *fwk.Status { return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg) }
	cases := map[string]struct {
		policies []*schedv1alpha1.SchedulingPolicy
		want     *fwk.Status
	}{
		"no policy": {},
		"a policy without preEnqueue rules": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Filter("f", "false").Obj()},
		},
		"a true rule": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").PreEnqueue("ok", "true", "").Obj()},
		},
		"a false rule holds": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").PreEnqueue("approved", "false", "not approved").Obj()},
			want:     unresolvable("held by SchedulingPolicy p, rule approved: not approved"),
		},
		"a policy for other pods": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").PodLabels(map[string]string{"app": "web"}).PreEnqueue("no", "false", "").Obj()},
		},
		"an error under Fail holds": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").PreEnqueue("team", "pod.metadata.labels['team'] == 'a'", "").Obj()},
			want:     unresolvable("held: SchedulingPolicy p, rule team: spec.preEnqueue[0].expression: no such key: team (failurePolicy Fail)"),
		},
		"an error under Ignore is skipped, the next rule still applies": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().
				PreEnqueue("team", "pod.metadata.labels['team'] == 'a'", "").PreEnqueue("approved", "false", "not approved").Obj()},
			want: unresolvable("held by SchedulingPolicy p, rule approved: not approved"),
		},
		"an Audit policy lets the pod in": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Audit().PreEnqueue("approved", "false", "").Obj()},
		},
		"a match condition error under Fail holds": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Condition("team", "pod.metadata.labels['team'] == 'a'").PreEnqueue("ok", "true", "").Obj()},
			want:     unresolvable("held: SchedulingPolicy p, rule team: spec.match.conditions[0].expression: no such key: team (failurePolicy Fail)"),
		},
		"a match condition error under Ignore skips the policy": {
			policies: []*schedv1alpha1.SchedulingPolicy{builder.MakePolicy("p").Ignore().Condition("team", "pod.metadata.labels['team'] == 'a'").PreEnqueue("no", "false", "").Obj()},
		},
	}
	// Each case twice: with the pod's Match that its cycle reuses
	// (Runtime.Queued), and with the policies matched here alone (a match
	// past Queued's budget).
	modes := map[string]time.Duration{"match for the cycle": 0, "matched alone": -1}
	for name, tc := range cases {
		for mode, budget := range modes {
			t.Run(name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				rt := plugintest.Runtime(t, tc.policies, plugintest.Namespace("ns", nil))
				rt.QueuedBudget = budget
				pl := &PreEnqueue{
					rt:       rt,
					queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[hold]()),
					reported: lru.New(10),
				}
				defer pl.queue.ShutDown()
				got := pl.PreEnqueue(context.Background(), pod)
				if diff := cmp.Diff(tc.want, got, statusCmp); diff != "" {
					t.Errorf("PreEnqueue (-want +got):\n%s", diff)
				}
				// A hold is reported once, in the background.
				if wantReports := map[bool]int{true: 0, false: 1}[got.IsSuccess()]; pl.queue.Len() != wantReports {
					t.Errorf("%d reports queued, want %d", pl.queue.Len(), wantReports)
				}
			})
		}
	}
}

var statusCmp = cmp.Comparer(func(a, b *fwk.Status) bool {
	if a == nil || b == nil {
		return a.Code() == b.Code()
	}
	return a.Code() == b.Code() && cmp.Equal(a.Reasons(), b.Reasons())
})
