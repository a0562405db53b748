package verdict

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestReplace: a drifted pod's replacement is judged from its
// controller's template: pinned by nodeName to a node the policy refuses
// (ReplicaSet), placed by a scheduler that does not enforce the policy
// (StatefulSet), given no node by the framework (a ReplicationController
// whose template selects the refused node), pinned to a node the policy
// admits (a Job: evicting moves it there), or placed (a Job's template
// as the pod). A pod whose controller is gone, or was replaced by another
// of the same name, is an error (NotFound); a bare pod has no template.
func TestReplace(t *testing.T) {
	ns := namespace("team", map[string]string{"tenant": "blue"})
	nodes := []*corev1.Node{
		node("red-1", map[string]string{"tenant": "red", corev1.LabelHostname: "red-1"}),
		node("blue-1", map[string]string{"tenant": "blue", corev1.LabelHostname: "blue-1"}),
	}
	tenant := "node.metadata.labels[?'tenant'].orValue('') == namespaceObject.metadata.labels[?'tenant'].orValue('-')"
	policy := builder.MakePolicy("tenant-nodes").FilterMsg("tenant", tenant, "not the tenant's node", "").Obj()

	template := func(edit func(*corev1.PodSpec)) corev1.PodTemplateSpec {
		t := corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
		edit(&t.Spec)
		return t
	}
	pinRed := func(s *corev1.PodSpec) { s.NodeName = "red-1" }
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "team", Name: name, UID: ktypes.UID("uid-" + name), Generation: 3}
	}
	owners := []client.Object{
		&appsv1.ReplicaSet{ObjectMeta: meta("pinned"), Spec: appsv1.ReplicaSetSpec{Template: template(pinRed)}},
		&appsv1.StatefulSet{ObjectMeta: meta("other"), Spec: appsv1.StatefulSetSpec{Template: template(func(s *corev1.PodSpec) { s.SchedulerName = "default-scheduler" })}},
		&corev1.ReplicationController{ObjectMeta: meta("selects-red"), Spec: corev1.ReplicationControllerSpec{Template: ptr.To(template(func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{corev1.LabelHostname: "red-1"}
		}))}},
		&batchv1.Job{ObjectMeta: meta("pinned-blue"), Spec: batchv1.JobSpec{Template: template(func(s *corev1.PodSpec) { s.NodeName = "blue-1" })}},
		&batchv1.Job{ObjectMeta: meta("job"), Spec: batchv1.JobSpec{Template: template(func(*corev1.PodSpec) {})}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "recreated", UID: "uid-new"}},
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(owners...).Build()

	owned := func(name, kind string) *corev1.Pod {
		p := pod("team", name+"-0", nil)
		p.Spec.NodeName = "red-1"
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: name, UID: ktypes.UID("uid-" + name), Controller: ptr.To(true)}}
		return p
	}
	bare := pod("team", "bare", nil)
	bare.Spec.NodeName = "red-1"
	pods := map[string]*corev1.Pod{
		"pinned": owned("pinned", "ReplicaSet"), "other": owned("other", "StatefulSet"), "selects-red": owned("selects-red", "ReplicationController"),
		"pinned-blue": owned("pinned-blue", "Job"), "job": owned("job", "Job"), "gone": owned("gone", "ReplicaSet"),
		"recreated": owned("recreated", "ReplicaSet"), "bare": bare,
	}
	var all []*corev1.Pod
	for _, p := range pods {
		all = append(all, p)
	}
	e := newEvaluator(t, ns, nodes, all, []*schedv1alpha1.SchedulingPolicy{policy})

	tests := map[string]struct {
		want        ReplacementVerdict
		wantMissing bool
		noTemplate  bool
	}{
		"pinned":      {want: ReplacementVerdict{Blocked: schedv1alpha1.BlockedReplacementPinned, Message: "its replacement would be created with nodeName red-1, which the policy refuses: no scheduler places it"}},
		"other":       {want: ReplacementVerdict{Blocked: schedv1alpha1.BlockedOtherScheduler, Message: `its replacement would be placed by scheduler "default-scheduler", which does not enforce the policy`}},
		"selects-red": {want: ReplacementVerdict{Blocked: schedv1alpha1.BlockedNoFeasibleNode, Message: "the scheduler's framework finds its replacement no node under the policies in force"}},
		"pinned-blue": {want: ReplacementVerdict{Node: "blue-1"}},
		"job":         {want: ReplacementVerdict{Node: "blue-1"}},
		"gone":        {wantMissing: true},
		"recreated":   {wantMissing: true},
		"bare":        {want: ReplacementVerdict{Node: "blue-1"}, noTemplate: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tmpl, err := OwnerTemplate(context.Background(), reader, pods[name])
			if tc.wantMissing {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("OwnerTemplate: %v, want NotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tmpl == nil) != tc.noTemplate {
				t.Fatalf("OwnerTemplate = %+v, want a template: %v", tmpl, !tc.noTemplate)
			}
			if tmpl != nil && tmpl.Generation != 3 {
				t.Errorf("template generation %d, want 3", tmpl.Generation)
			}
			got, err := e.Replace(context.Background(), pods[name], tmpl, "tenant-nodes", e.EnforcingProfiles(policy))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Replace (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAsProfile: a pod of one of the profiles, or without a scheduler
// name, is judged as itself; another scheduler's as a copy in the first
// profile, the pod untouched.
func TestAsProfile(t *testing.T) {
	profiles := []string{"celsched", "celsched-batch"}
	tests := map[string]struct {
		scheduler   string
		wantName    string
		wantForeign bool
	}{
		"a profile's":         {scheduler: "celsched-batch", wantName: "celsched-batch"},
		"none":                {scheduler: "", wantName: ""},
		"another scheduler's": {scheduler: "default-scheduler", wantName: "celsched", wantForeign: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := pod("team", "p", nil)
			p.Spec.SchedulerName = tc.scheduler
			got, foreign := AsProfile(p, profiles)
			if got.Spec.SchedulerName != tc.wantName || foreign != tc.wantForeign {
				t.Errorf("AsProfile = %q, %v; want %q, %v", got.Spec.SchedulerName, foreign, tc.wantName, tc.wantForeign)
			}
			if p.Spec.SchedulerName != tc.scheduler {
				t.Errorf("AsProfile changed the pod: %q", p.Spec.SchedulerName)
			}
		})
	}
}
