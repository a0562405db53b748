package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// TestProfilePods: the pods of the profiles, pending and bound, in input
// order; the pods that take room, of every scheduler and being deleted
// included; pods on nodes that are not in the input are left out and
// counted; a pod without a UID or a schedulerName gets them on a copy.
func TestProfilePods(t *testing.T) {
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{}
		return p
	}
	handWritten := st.MakePod().Namespace("ns").Name("hand-written").SchedulerName("").Node("n1").Obj()
	in := &Input{
		Config: &schedulerconfig.KubeSchedulerConfiguration{Profiles: []schedulerconfig.KubeSchedulerProfile{
			{SchedulerName: "celsched"}, {SchedulerName: corev1.DefaultSchedulerName},
		}},
		Nodes: []*corev1.Node{st.MakeNode().Name("n1").Obj(), st.MakeNode().Name("n2").Obj()},
		Pods: []*corev1.Pod{
			st.MakePod().Namespace("ns").Name("pending").UID("u1").SchedulerName("celsched").Obj(),
			st.MakePod().Namespace("ns").Name("bound").UID("u2").SchedulerName("celsched").Node("n2").Obj(),
			st.MakePod().Namespace("ns").Name("off-node").UID("u3").SchedulerName("celsched").Node("gone").Obj(),
			st.MakePod().Namespace("ns").Name("other").UID("u4").SchedulerName("batch").Node("n1").Obj(),
			st.MakePod().Namespace("ns").Name("other-pending").UID("u5").SchedulerName("batch").Obj(),
			deleting(st.MakePod().Namespace("ns").Name("deleting").UID("u6").SchedulerName("celsched").Node("n1").Obj()),
			st.MakePod().Namespace("ns").Name("done").UID("u7").SchedulerName("celsched").Node("n1").Phase(corev1.PodSucceeded).Obj(),
			handWritten,
		},
	}
	got := in.ProfilePods()
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name+"@"+p.Spec.SchedulerName)
		}
		return out
	}
	if diff := cmp.Diff([]string{"pending@celsched", "bound@celsched", "hand-written@default-scheduler"}, names(got.Placed)); diff != "" {
		t.Errorf("Placed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bound@celsched", "other@batch", "deleting@celsched", "hand-written@default-scheduler"}, names(got.OnNodes)); diff != "" {
		t.Errorf("OnNodes (-want +got):\n%s", diff)
	}
	if got.Pending != 1 || got.Bound != 2 || got.OtherSchedulers != 2 || got.OffNodes != 1 {
		t.Errorf("pending %d, bound %d, other schedulers %d, off nodes %d; want 1, 2, 2, 1", got.Pending, got.Bound, got.OtherSchedulers, got.OffNodes)
	}
	last := got.Placed[len(got.Placed)-1]
	if last.UID == "" || last != got.OnNodes[len(got.OnNodes)-1] || handWritten.UID != "" || handWritten.Spec.SchedulerName != "" {
		t.Errorf("the hand-written pod: want one copy with a UID in both lists, the input unchanged; got UID %q", last.UID)
	}
	if diff := cmp.Diff([]string{"1 pod(s) bound to nodes that are not in the input are left out"}, got.Notes()); diff != "" {
		t.Errorf("Notes (-want +got):\n%s", diff)
	}
}

const (
	tenantZone = `apiVersion: scheduling.celsched.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: tenant-zone}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  paramRef: {name: place}
  filters:
  - {name: zone, expression: "node.metadata.labels[?'zone'].orValue('') == params.data.zone"}
`
	tenantPlacement = `apiVersion: scheduling.celsched.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: tenant-placement}
spec:
  paramKind: {apiVersion: placement.example.com/v1, kind: TenantPlacement}
  paramRef: {name: placement}
  filters:
  - {name: zone, expression: "true"}
`
	placement = `apiVersion: placement.example.com/v1
kind: TenantPlacement
metadata: {name: placement, namespace: t1}
spec: {zones: [a]}
`
	placementCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tenantplacements.placement.example.com}
spec:
  group: placement.example.com
  names: {kind: TenantPlacement, plural: tenantplacements}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`
	dump = `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {zone: a}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: t1}}
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: t1}, spec: {containers: [{name: c, image: i}]}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: place, namespace: t1}, data: {zone: a}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: unrelated, namespace: t1}}
- {apiVersion: v1, kind: PersistentVolume, metadata: {name: pv}}
`
)

// TestReadFiles: a dump is sorted by kind; the params objects kept are
// those of the kinds that a policy in force or drafted names (every
// ConfigMap when one names ConfigMap, none otherwise), a custom
// kind needs its CustomResourceDefinition, other kinds are an error (of
// the dump) or a note (of the drafts); a scenario takes its params as
// they are.
func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: t1}\n"
	secret := "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: t1}\n"
	type summary struct {
		Nodes, Namespaces, Pods, Policies, Params, Drafts, ParamsDrafts, Objects []string
		Pod                                                                      string
		Notes                                                                    []string
	}
	cases := map[string]struct {
		src     Source
		want    summary
		wantErr string
	}{
		"dump": {
			src: Source{Files: Files{Dump: []string{file("dump.yaml", dump)}, Policies: []string{file("tenant-zone.yaml", tenantZone)}}},
			want: summary{Nodes: []string{"n1"}, Namespaces: []string{"t1"}, Pods: []string{"t1/p"}, Policies: []string{"tenant-zone"},
				Params: []string{"t1/place", "t1/unrelated"}, Objects: []string{"/pv"}},
		},
		"drafts": {
			src: Source{Files: Files{Dump: []string{file("dump.yaml", dump)}},
				Drafts: []string{file("drafts.yaml", tenantZone+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: place, namespace: t1}\ndata: {zone: b}\n---\n"+secret)}},
			want: summary{Nodes: []string{"n1"}, Namespaces: []string{"t1"}, Pods: []string{"t1/p"}, Drafts: []string{"tenant-zone"},
				Params: []string{"t1/place", "t1/unrelated"}, ParamsDrafts: []string{"t1/place"}, Objects: []string{"/pv"},
				Notes: []string{"-f: objects of kinds that are neither SchedulingPolicies nor the paramKind of a policy are left out: Secret"}},
		},
		"custom kind with its CRD": {
			src: Source{Files: Files{Dump: []string{file("dump.yaml", dump), file("crd.yaml", placementCRD)},
				Params: []string{file("placement.yaml", placement)}, Policies: []string{file("tenant-placement.yaml", tenantPlacement)}}},
			want: summary{Nodes: []string{"n1"}, Namespaces: []string{"t1"}, Pods: []string{"t1/p"}, Policies: []string{"tenant-placement"},
				Params: []string{"t1/placement"}, Objects: []string{"/pv"}},
		},
		"a scenario's params as they are": {
			src: Source{Files: Files{Scenario: true, Nodes: []string{file("node.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")},
				Params: []string{file("placement.yaml", placement)}, Policies: []string{file("tenant-placement.yaml", tenantPlacement)}},
				Pod: file("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")},
			want: summary{Nodes: []string{"n1"}, Policies: []string{"tenant-placement"}, Params: []string{"t1/placement"}, Pod: "default/p"},
		},
		"custom kind without its CRD": {
			src: Source{Files: Files{Dump: []string{file("dump.yaml", dump)},
				Params: []string{file("placement.yaml", placement)}, Policies: []string{file("tenant-placement.yaml", tenantPlacement)}}},
			wantErr: "paramKind placement.example.com/v1 TenantPlacement of SchedulingPolicy tenant-placement: its CustomResourceDefinition is in none of the files read",
		},
		"a kind no policy reads": {
			src:     Source{Files: Files{Dump: []string{file("dump.yaml", dump)}, Params: []string{file("secret.yaml", secret)}}},
			wantErr: "--dump, --params: objects of kinds that are not read and that no policy's paramKind names: Secret",
		},
		"a kind a dump does not hold": {
			src:     Source{Files: Files{Dump: []string{file("dump.yaml", dump), file("deployment.yaml", deployment)}}},
			wantErr: "--dump: a Deployment is not one of the kinds read",
		},
		"no nodes": {
			src:     Source{Files: Files{Namespaces: []string{file("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: t1}\n")}}},
			wantErr: "no nodes: give --nodes or --dump",
		},
		"drafts with nothing to draft": {
			src:     Source{Files: Files{Dump: []string{file("dump.yaml", dump)}}, Drafts: []string{file("empty.yaml", "# nothing\n")}},
			wantErr: "no SchedulingPolicy or params object in",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in, err := tc.src.Read(context.Background())
			if tc.wantErr != "" {
				var inputErr *InputError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &inputErr) {
					t.Fatalf("err %v, want an InputError with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := summary{Notes: in.Notes}
			for _, n := range in.Nodes {
				got.Nodes = append(got.Nodes, n.Name)
			}
			for _, n := range in.Namespaces {
				got.Namespaces = append(got.Namespaces, n.Name)
			}
			for _, p := range in.Pods {
				got.Pods = append(got.Pods, p.Namespace+"/"+p.Name)
			}
			for _, p := range in.Policies {
				got.Policies = append(got.Policies, p.Name)
			}
			for _, p := range in.Drafts {
				got.Drafts = append(got.Drafts, p.Name)
			}
			for _, p := range in.Params {
				got.Params = append(got.Params, p.GetNamespace()+"/"+p.GetName())
			}
			for _, p := range in.ParamsDrafts {
				got.ParamsDrafts = append(got.ParamsDrafts, p.GetNamespace()+"/"+p.GetName())
			}
			for _, o := range in.Objects {
				m, _ := o.(metav1.Object)
				got.Objects = append(got.Objects, m.GetNamespace()+"/"+m.GetName())
			}
			if in.Pod != nil {
				got.Pod = in.Pod.Namespace + "/" + in.Pod.Name
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("input (-want +got):\n%s", diff)
			}
			if in.Config == nil || len(in.Config.Profiles) == 0 {
				t.Errorf("no scheduler configuration")
			}
		})
	}
}
