package gangs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/impact"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/testenv"
)

// This file's name puts its test last in the package. Run before
// TestGangHeldAtPreEnqueue, the CLI's in-process dry run once left that
// test's first member without its SchedulingGated condition (3 times in
// 3, in an earlier session). That is the symptom of the race fixed in
// CELPreEnqueue's GroupMemberEvents (a member held by GangScheduling
// first was never evaluated by the policy again); with the dry run first
// the package passed 3 times in 3 with the fix, and also 3 in 3 without
// it, so the link is likely but not shown: the order stays until a run
// shows it does not matter.
//
// TestDryRunGroupsLive: `celsched impact` and `celsched explain` read the
// live cluster's PodGroups and pending members, and kube-scheduler, run by
// the CLI, places the groups with the live policies and with a draft. Two
// 4-member gangs of trainers are held by a live policy (so they stay
// pending); a draft deletes it and keeps trainer gangs in one rack:
// impact lists the gang that asks for a block as placed in block b2 (the
// only one-rack block that takes it), and the gang that asks for no
// domain as released but unschedulable; explain of one of its members
// names the rule that refused its only placement. The scheduler then,
// given the same change, does what impact said.
func TestDryRunGroupsLive(t *testing.T) {
	createRacks(t)
	ns := createNamespace(t, "dryrun", nil)
	inNamespace := map[string]string{corev1.LabelMetadataName: ns}
	freeze := builder.MakePolicy("freeze-"+ns).NamespaceLabels(inNamespace).PreEnqueue("thawed", "false", "frozen for the test").Obj()
	applyPolicy(t, freeze)
	waitReady(t, freeze.Name)
	trainer := withLabels(map[string]string{"app": "trainer"})
	createGang(t, ns, "train", 4, blockLabel)
	createGang(t, ns, "wide", 4, "")
	var train, wide []*corev1.Pod
	for i := range 4 {
		train = append(train, createPod(t, ns, "train-"+string(rune('0'+i)), inGroup("train"), trainer, withCPU("1")))
		wide = append(wide, createPod(t, ns, "wide-"+string(rune('0'+i)), inGroup("wide"), trainer, withCPU("1")))
	}

	oneRack := builder.MakePolicy("one-rack-"+ns).NamespaceLabels(inNamespace).PodLabels(map[string]string{"app": "trainer"}).
		PlacementFilter("one-rack", oneRack, "a gang stays in one rack").Obj()
	draft := writePolicy(t, oneRack)
	gates := "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"

	var out, errOut bytes.Buffer
	args := []string{"impact", "--kubeconfig", kubeconfig, "-o", "json", gates, "-f", draft, "--delete", freeze.Name}
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	r := &impact.Report{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		t.Fatalf("celsched impact: %v", err)
	}
	got := map[string]*impact.GroupImpact{}
	for i := range r.Groups {
		g := &r.Groups[i]
		got[g.Group] = g
		t.Logf("impact: %s %s: now %s %+v, draft %s %+v", g.Group, g.Change, g.Now.Outcome(), g.Now.Members, g.Draft.Outcome(), g.Draft.Members)
	}
	t.Logf("impact notes %v, summary %+v", r.Notes, r.Summary.Groups)
	trainImpact, wideImpact := got[ns+"/train"], got[ns+"/wide"]
	if trainImpact == nil || trainImpact.Change != impact.Placed || trainImpact.Draft.Placement != "b2" {
		t.Fatalf("impact on %s/train: %+v, want placed in block b2; groups: %+v", ns, trainImpact, r.Groups)
	}
	refusal := "placement (all nodes) rejected by SchedulingPolicy " + oneRack.Name + ", rule placement.filters/one-rack: a gang stays in one rack"
	if wideImpact == nil || wideImpact.Change != impact.Released || !strings.Contains(wideImpact.Draft.Reason, refusal) {
		t.Fatalf("impact on %s/wide: %+v, want released, unschedulable naming %q", ns, wideImpact, refusal)
	}

	out.Reset()
	errOut.Reset()
	args = []string{"explain", "pod/wide-2", "-n", ns, "--kubeconfig", kubeconfig, "-o", "json", gates, "-f", draft}
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	report := &dryrun.Report{}
	if err := json.Unmarshal(out.Bytes(), report); err != nil {
		t.Fatalf("celsched explain: %v", err)
	}
	// The live freeze still holds the group: explain sees what the
	// scheduler would do now, with the draft added.
	if g := report.Group; g == nil || g.Group != ns+"/wide" || len(g.Members) != 4 || !strings.Contains(g.Reason, "frozen for the test") {
		t.Fatalf("explain's group %+v, want %s/wide's 4 members held by the freeze", report.Group, ns)
	}

	// The change applied: the scheduler places train in rack c and keeps
	// wide wholly pending with the rule, as impact said.
	applyPolicy(t, oneRack)
	waitReady(t, oneRack.Name)
	deleteObject(t, freeze)
	for _, node := range nodesOf(t, train) {
		if node != "c1" && node != "c2" {
			t.Errorf("train member on %s, want rack c (block b2), as impact said", node)
		}
	}
	for _, pod := range wide {
		waitPending(t, pod, reasonUnschedulable, refusal)
	}

	// explain now, live: the member's group, held by the rule.
	out.Reset()
	errOut.Reset()
	args = []string{"explain", "pod/wide-2", "-n", ns, "--kubeconfig", kubeconfig, "-o", "json", gates}
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	report = &dryrun.Report{}
	if err := json.Unmarshal(out.Bytes(), report); err != nil {
		t.Fatalf("celsched explain: %v", err)
	}
	if g := report.Group; g == nil || len(g.Refused) != 1 || g.Refused[0].Refusal != refusal {
		t.Fatalf("explain's group %+v, want the refused placement %q", report.Group, refusal)
	}
}

// writePolicy writes a policy to a file of the test's temporary
// directory, as a draft for the CLI.
func writePolicy(t *testing.T, p *schedv1alpha1.SchedulingPolicy) string {
	t.Helper()
	p = p.DeepCopy()
	p.APIVersion, p.Kind = schedv1alpha1.GroupVersion.String(), "SchedulingPolicy"
	data, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), p.Name+".yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
