package celplugins

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// TestProfilePod: the pods of the profiles, pending and bound; terminated
// and deleting pods are nobody's to place (a bound one being deleted still
// takes room); an empty schedulerName is default-scheduler's.
func TestProfilePod(t *testing.T) {
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{}
		return p
	}
	profiles := []string{"celsched", corev1.DefaultSchedulerName}
	cases := map[string]struct {
		pod        *corev1.Pod
		profiles   []string
		want       PodState
		wantOnNode bool
	}{
		"pending":                   {pod: st.MakePod().SchedulerName("celsched").Obj(), profiles: profiles, want: PodPending},
		"bound":                     {pod: st.MakePod().SchedulerName("celsched").Node("n").Obj(), profiles: profiles, want: PodBound, wantOnNode: true},
		"empty name is default":     {pod: st.MakePod().SchedulerName("").Obj(), profiles: profiles, want: PodPending},
		"empty name, not a profile": {pod: st.MakePod().SchedulerName("").Node("n").Obj(), profiles: []string{"celsched"}, want: PodOtherScheduler, wantOnNode: true},
		"other scheduler":           {pod: st.MakePod().SchedulerName("batch").Obj(), profiles: profiles, want: PodOtherScheduler},
		"succeeded":                 {pod: st.MakePod().SchedulerName("celsched").Node("n").Phase(corev1.PodSucceeded).Obj(), profiles: profiles, want: PodTerminated},
		"failed, pending":           {pod: st.MakePod().SchedulerName("celsched").Phase(corev1.PodFailed).Obj(), profiles: profiles, want: PodTerminated},
		"deleting, bound":           {pod: deleting(st.MakePod().SchedulerName("celsched").Node("n").Obj()), profiles: profiles, want: PodDeleting, wantOnNode: true},
		"deleting, pending":         {pod: deleting(st.MakePod().SchedulerName("celsched").Obj()), profiles: profiles, want: PodDeleting},
		"deleting, other":           {pod: deleting(st.MakePod().SchedulerName("batch").Obj()), profiles: profiles, want: PodDeleting},
		"no profiles":               {pod: st.MakePod().SchedulerName("celsched").Obj(), want: PodOtherScheduler},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ProfilePod(tc.pod, tc.profiles)
			if diff := cmp.Diff(tc.want.String(), got.String()); diff != "" {
				t.Errorf("ProfilePod (-want +got):\n%s", diff)
			}
			if got.Placed() != (tc.want == PodPending || tc.want == PodBound) {
				t.Errorf("Placed() = %v for %s", got.Placed(), got)
			}
			if onNode := OnNode(tc.pod); onNode != tc.wantOnNode {
				t.Errorf("OnNode = %v, want %v", onNode, tc.wantOnNode)
			}
		})
	}
}
