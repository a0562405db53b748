package integration

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/analyze"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/impact"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/testenv"
)

// TestImpactAgreesWithScheduler runs `celsched impact` against the live
// cluster, with pending and bound pods under several policies: a
// tightening draft lists exactly the bound pods it would refuse and the
// pending pod it would hold; a loosening draft lists the pending pods it
// would place, and where, and the bound pods it readmits. Then the
// loosening draft is applied, and the live scheduler places the pending
// pods on nodes impact named.
//
// A pending pod that the live policies let the scheduler place is bound
// before impact can see it, so "stranded" and "moved" (pods schedulable
// now) are covered offline: the unit tests of simulate/impact and the
// golden files of cmd/celsched/app.
func TestImpactAgreesWithScheduler(t *testing.T) {
	const zone = corev1.LabelTopologyZone
	createNodes(t,
		nodeSpec{name: "impact-a1", labels: map[string]string{zone: "impact-a"}},
		nodeSpec{name: "impact-b1", labels: map[string]string{zone: "impact-b"}},
		nodeSpec{name: "impact-c1", labels: map[string]string{zone: "impact-c"}},
	)
	web := createNamespace(t, "impact-web", nil)
	api := createNamespace(t, "impact-api", nil)
	inNamespace := func(ns string) map[string]string { return map[string]string{corev1.LabelMetadataName: ns} }
	zones := func(list string) *schedv1alpha1.SchedulingPolicy {
		return builder.MakePolicy("impact-web-zones").NamespaceLabels(inNamespace(web)).
			FilterMsg("zones", "node.metadata.labels[?'"+zone+"'].orValue('') in "+list, "not a zone of the web team", "").Obj()
	}
	applyPolicy(t, zones("['impact-a', 'impact-b']"))
	applyPolicy(t, builder.MakePolicy("impact-api-approval").NamespaceLabels(inNamespace(api)).
		PreEnqueue("approved", "namespaceObject.metadata.?labels[?'approved'].orValue('') == 'true'", "namespace not approved").Obj())

	inZone := func(z string) podOption {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zone: z} }
	}
	createPod(t, web, "on-a", boundTo("impact-a1"))
	createPod(t, web, "on-b", boundTo("impact-b1"))
	createPod(t, web, "on-c", boundTo("impact-c1")) // bound before the policy: refused now
	wantsC := createPod(t, web, "wants-c", inZone("impact-c"), withLabels(map[string]string{"tier": "batch"}))
	waitPending(t, wantsC, corev1.PodReasonUnschedulable, "rejected by SchedulingPolicy impact-web-zones, rule zones")
	held := createPod(t, api, "held", inZone("impact-b"))
	waitPending(t, held, "SchedulingGated", "held by SchedulingPolicy impact-api-approval")
	createPod(t, api, "bound", boundTo("impact-a1")) // would be held if evicted

	dir := t.TempDir()
	ours := []string{web, api}

	// Tightening: web only in zone a; web batch pods held.
	tighten := writeObjects(t, dir, "tighten", zones("['impact-a']"),
		builder.MakePolicy("impact-web-batch-hold").NamespaceLabels(inNamespace(web)).PodLabels(map[string]string{"tier": "batch"}).
			PreEnqueue("no-batch", "false", "no batch in web").Obj())
	r := impactReport(t, "-f", tighten)
	want := map[string]impact.Change{
		web + "/on-b":    impact.EvictedWouldNotReturn,
		web + "/wants-c": impact.Held,
	}
	got := changes(r, ours...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tightening: changes (-want +got):\n%s", diff)
	}
	if p := pod(r, web+"/on-b"); p == nil || p.Draft.Reason != "CELFilter: node(s) rejected by SchedulingPolicy impact-web-zones, rule zones: not a zone of the web team" {
		t.Errorf("tightening: web/on-b %+v, want refused by rule zones", p)
	}
	if p := pod(r, web+"/wants-c"); p == nil || p.Draft.Reason != "CELPreEnqueue: held by SchedulingPolicy impact-web-batch-hold, rule no-batch: no batch in web" {
		t.Errorf("tightening: web/wants-c %+v, want held by rule no-batch", p)
	}

	// Loosening: web in every zone, and the api approval deleted.
	loosen := writeObjects(t, dir, "loosen", zones("['impact-a', 'impact-b', 'impact-c']"))
	r = impactReport(t, "-f", loosen, "--delete", "impact-api-approval")
	want = map[string]impact.Change{
		web + "/on-c":    impact.Readmitted,
		web + "/wants-c": impact.Placed,
		api + "/held":    impact.Placed,
		api + "/bound":   impact.Readmitted,
	}
	if diff := cmp.Diff(want, changes(r, ours...)); diff != "" {
		t.Errorf("loosening: changes (-want +got):\n%s", diff)
	}
	where := map[*corev1.Pod][]string{}
	for _, p := range []*corev1.Pod{wantsC, held} {
		if i := pod(r, p.Namespace+"/"+p.Name); i != nil {
			where[p] = i.Draft.Nodes
		}
	}
	if diff := cmp.Diff([]string{"impact-c1"}, where[wantsC]); diff != "" {
		t.Errorf("loosening: web/wants-c's nodes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"impact-b1"}, where[held]); diff != "" {
		t.Errorf("loosening: api/held's nodes (-want +got):\n%s", diff)
	}

	// The draft, applied: the live scheduler places the pods where impact
	// said.
	live := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: "impact-web-zones"}, live); err != nil {
		t.Fatal(err)
	}
	live.Spec = zones("['impact-a', 'impact-b', 'impact-c']").Spec
	if err := k8sClient.Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	deleteObject(t, &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "impact-api-approval"}})
	waitPolicyReady(t, live.Name, metav1.ConditionTrue)
	for p, nodes := range where {
		if got := waitForNode(t, p); !slices.Contains(nodes, got) {
			t.Errorf("the scheduler bound %s/%s to %s; impact said %v", p.Namespace, p.Name, got, nodes)
		}
	}
}

// impactReport runs `celsched impact` against the cluster with -o json.
func impactReport(t *testing.T, args ...string) *impact.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"impact", "--kubeconfig", kubeconfig, "-o", "json"}, args...)
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	r := &impact.Report{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		t.Fatalf("celsched impact: %v", err)
	}
	return r
}

// changes are the changed pods of the namespaces, by namespace/name.
func changes(r *impact.Report, namespaces ...string) map[string]impact.Change {
	out := map[string]impact.Change{}
	for i := range r.Pods {
		if ns, _, _ := strings.Cut(r.Pods[i].Pod, "/"); slices.Contains(namespaces, ns) {
			out[r.Pods[i].Pod] = r.Pods[i].Change
		}
	}
	return out
}

func pod(r *impact.Report, name string) *impact.PodImpact {
	for i := range r.Pods {
		if r.Pods[i].Pod == name {
			return &r.Pods[i]
		}
	}
	return nil
}

// TestImpactParamsAgreesWithScheduler runs `celsched impact` against the
// live cluster with parameterized policies: two tenants with a params
// ConfigMap each naming their zone, three running pods of which one runs
// outside its tenant's zone. A parameterized draft lists exactly that pod;
// applied, the scheduler sends that pod, recreated, where impact said. A
// ConfigMap draft lists the pods it refuses and the pending pod it places;
// applied, the scheduler binds that pod where impact said.
func TestImpactParamsAgreesWithScheduler(t *testing.T) {
	grantConfigMapParams(t)
	createNodes(t,
		nodeSpec{name: "impact-pa", labels: map[string]string{zoneLabel: "impact-pa"}},
		nodeSpec{name: "impact-pb", labels: map[string]string{zoneLabel: "impact-pb"}},
	)
	tenant := map[string]string{"impact-params": "tenant"}
	ten1 := createNamespace(t, "impact-ten-1", tenant)
	ten2 := createNamespace(t, "impact-ten-2", tenant)
	createParams(t, ten1, "place", "impact-pa", nil)
	place2 := createParams(t, ten2, "place", "impact-pb", nil)
	createPod(t, ten1, "x1", boundTo("impact-pa"))
	createPod(t, ten2, "y1", boundTo("impact-pb"))
	y2 := createPod(t, ten2, "y2", boundTo("impact-pa")) // outside ten-2's zone
	ours := []string{ten1, ten2}
	dir := t.TempDir()

	// A parameterized draft: only y2 is refused its node.
	policy := builder.MakePolicy("impact-tenant-zone").NamespaceLabels(tenant).
		ParamKind("v1", "ConfigMap").ParamRef("place", "", schedv1alpha1.DenyAction).
		Filter("zone", tenantZonesFilter).Obj()
	r := impactReport(t, "-f", writeObjects(t, dir, "policy", policy))
	if diff := cmp.Diff(map[string]impact.Change{ten2 + "/y2": impact.EvictedWouldNotReturn}, changes(r, ours...)); diff != "" {
		t.Errorf("parameterized draft: changes (-want +got):\n%s", diff)
	}
	y2Draft := pod(r, ten2+"/y2")
	if y2Draft == nil || y2Draft.Draft.Feasible != 1 {
		t.Fatalf("parameterized draft: y2 %+v, want one feasible node", y2Draft)
	}

	// Applied, y2 recreated goes to its tenant's zone: the only feasible
	// node impact counted.
	applyPolicy(t, policy)
	deleteObject(t, y2)
	expectNode(t, createPod(t, ten2, "y2"), "impact-pb")

	// A params draft: ten-2 moves to zone impact-pa. Its running pods are
	// refused their nodes; its pending pod that wants zone impact-pa is
	// placed there.
	wantsA := createPod(t, ten2, "wants-pa", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "impact-pa"} })
	waitPending(t, wantsA, reasonUnschedulable, "rejected by SchedulingPolicy impact-tenant-zone, rule zone")
	moved := place2.DeepCopy()
	moved.Data = map[string]string{"zones": "impact-pa"}
	moved.ResourceVersion, moved.UID, moved.ManagedFields = "", "", nil
	r = impactReport(t, "-f", writeObjects(t, dir, "params", moved))
	want := map[string]impact.Change{
		ten2 + "/y1":       impact.EvictedWouldNotReturn,
		ten2 + "/y2":       impact.EvictedWouldNotReturn,
		ten2 + "/wants-pa": impact.Placed,
	}
	if diff := cmp.Diff(want, changes(r, ours...)); diff != "" {
		t.Errorf("params draft: changes (-want +got):\n%s", diff)
	}
	object := "ConfigMap/" + ten2 + "/place"
	wantParams := []dryrun.ParamsChange{{Object: object, Change: dryrun.PolicyChanged, Policies: []string{"impact-tenant-zone"}}}
	if diff := cmp.Diff(wantParams, r.Params, cmpopts.IgnoreFields(dryrun.ParamsChange{}, "Key", "Labels")); diff != "" {
		t.Errorf("params draft: params (-want +got):\n%s", diff)
	}
	placed := pod(r, ten2+"/wants-pa")
	if placed == nil || !slices.Equal(placed.Params, []string{object}) {
		t.Fatalf("params draft: wants-pa %+v, want placed by %s", placed, object)
	}

	// Applied: the scheduler binds the pending pod where impact said.
	setZones(t, place2, "impact-pa")
	if got := waitForNode(t, wantsA); !slices.Contains(placed.Draft.Nodes, got) {
		t.Errorf("the scheduler bound %s/%s to %s; impact said %v", wantsA.Namespace, wantsA.Name, got, placed.Draft.Nodes)
	}
}

// TestAnalyzeNamesPoliciesThatStrand: two policies applied in turn, each
// fine alone, together leave a namespace no node. `celsched analyze`
// against the live cluster names both, and the namespace's pod is indeed
// unschedulable.
func TestAnalyzeNamesPoliciesThatStrand(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "analyze-a1", labels: map[string]string{zoneLabel: "analyze-a", "disk": "hdd"}},
		nodeSpec{name: "analyze-b1", labels: map[string]string{zoneLabel: "analyze-b", "disk": "ssd"}},
	)
	team := createNamespace(t, "analyze-team", nil)
	inNamespace := map[string]string{corev1.LabelMetadataName: team}
	applyPolicy(t, builder.MakePolicy("analyze-zone-a").NamespaceLabels(inNamespace).
		Filter("zone", "node.metadata.labels[?'"+zoneLabel+"'].orValue('') == 'analyze-a'").Obj())
	expectNode(t, createPod(t, team, "first"), "analyze-a1")
	if r := analyzeReport(t); findings(r, analyze.NoFeasibleNode, team) != nil {
		t.Fatalf("one policy: want no no-feasible-node finding for %s, got %+v", team, findings(r, analyze.NoFeasibleNode, team))
	}

	applyPolicy(t, builder.MakePolicy("analyze-ssd").NamespaceLabels(inNamespace).
		Filter("ssd", "node.metadata.labels[?'disk'].orValue('') == 'ssd'").Obj())
	stranded := createPod(t, team, "second")
	waitPending(t, stranded, reasonUnschedulable, "rejected by SchedulingPolicy")

	// Every class of the namespace's pods (the bound one carries a label
	// the pending one lacks) has no node, and the finding names both.
	r := analyzeReport(t)
	got := findings(r, analyze.NoFeasibleNode, team)
	if len(got) == 0 || !slices.ContainsFunc(got, func(f analyze.Finding) bool { return strings.HasSuffix(f.Subject, " like second") }) {
		t.Errorf("two policies: want a no-feasible-node finding for %s/second, got %+v", team, got)
	}
	for _, f := range got {
		if !slices.Equal(f.Policies, []string{"analyze-ssd", "analyze-zone-a"}) {
			t.Errorf("two policies: finding %+v does not name both policies", f)
		}
	}
}

// analyzeReport runs `celsched analyze` against the cluster with -o json
// and the other args.
func analyzeReport(t *testing.T, args ...string) *analyze.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"analyze", "--kubeconfig", kubeconfig, "-o", "json"}, args...)
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	r := &analyze.Report{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		t.Fatalf("celsched analyze: %v", err)
	}
	return r
}

// findings are the findings of a kind about a namespace's pods.
func findings(r *analyze.Report, kind analyze.Kind, namespace string) []analyze.Finding {
	var out []analyze.Finding
	for _, f := range r.Findings {
		if f.Kind == kind && strings.Contains(f.Subject, "namespace "+namespace+" ") {
			out = append(out, f)
		}
	}
	return out
}
