package app

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"

	"github.com/celsched/celsched/api/policytest"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/celplugins/featuregates/featuregatestest"
	"github.com/celsched/celsched/simulate/dryrun"
	celverdict "github.com/celsched/celsched/simulate/verdict"
	"github.com/celsched/celsched/test/golden"
)

// TestEvalFeatureGates: --feature-gates reaches the dry run's built-in
// plugins as the manager's reaches the scheduler's. With the alpha gate
// TaintTolerationComparisonOperators, TaintToleration honours a toleration
// with operator Gt; without it, the tainted node is refused. A gate the CLI
// does not know, or a value that is not a boolean, is a usage error that
// names it.
func TestEvalFeatureGates(t *testing.T) {
	// Back at its default after the test, whatever the CLI set.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.TaintTolerationComparisonOperators, false)
	base := evalArgs("pod.yaml")
	for _, tc := range []struct {
		name        string
		gates       []string
		wantTainted bool // the tainted node is feasible
	}{
		{name: "default"},
		{name: "on", gates: []string{"--feature-gates=TaintTolerationComparisonOperators=true"}, wantTainted: true},
		{name: "off", gates: []string{"--feature-gates=TaintTolerationComparisonOperators=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]string{"plain": "feasible", "tainted": "rejected by TaintToleration"}
			if tc.wantTainted {
				want["tainted"] = "feasible"
			}
			if diff := cmp.Diff(want, evalNodes(t, append(slices.Clone(base), tc.gates...)...)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
	for value, want := range map[string]struct {
		code int
		err  string
	}{
		// Bad usage: exit code 2.
		"NoSuchGate=true": {2, "--feature-gates=NoSuchGate=true: unrecognized feature gate: NoSuchGate"},
		// A flag cobra cannot parse: exit code 1, as any other flag's.
		"TaintTolerationComparisonOperators=maybe": {1, `invalid argument "TaintTolerationComparisonOperators=maybe" for "--feature-gates" flag`},
	} {
		code, out := runCLI(t, append(slices.Clone(base), "--feature-gates="+value)...)
		if code != want.code || !strings.Contains(out, want.err) {
			t.Errorf("--feature-gates=%s: exit code %d, output %q; want %d and %q", value, code, out, want.code, want.err)
		}
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.TaintTolerationComparisonOperators) {
		t.Error("a rejected --feature-gates changed the gate")
	}
}

// TestEvalEmulatedVersion: --emulated-version reaches the dry run's
// framework as the manager's reaches the scheduler's. A pod on the host
// network in a user namespace needs nodes that declare the feature: at
// the binary's version (1.37) NodeDeclaredFeatures refuses a node that
// declares none; at 1.35, where the gate is alpha and off, the profile
// does not run the plugin and the node is feasible. A version out of
// range, or a gate that does not exist yet at the version, is a usage
// error that names the flag, and changes nothing.
func TestEvalEmulatedVersion(t *testing.T) {
	base := evalArgs("pod-hostnetwork-userns.yaml")
	for name, tc := range map[string]struct {
		args      []string
		wantPlain string
	}{
		"binary version": {wantPlain: "rejected by NodeDeclaredFeatures"},
		"1.37":           {args: []string{"--emulated-version=1.37"}, wantPlain: "rejected by NodeDeclaredFeatures"},
		"1.35":           {args: []string{"--emulated-version=1.35"}, wantPlain: "feasible"},
	} {
		t.Run(name, func(t *testing.T) {
			featuregatestest.Restore(t)
			want := map[string]string{"plain": tc.wantPlain, "tainted": "rejected by TaintToleration"}
			if diff := cmp.Diff(want, evalNodes(t, append(slices.Clone(base), tc.args...)...)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
	featuregatestest.Restore(t)
	for flags, want := range map[string]string{
		"--emulated-version=1.33": "--emulated-version=1.33: emulation version 1.33 is not between [1.34, 1.37.0]\n",
		"--emulated-version=1.35 --feature-gates=InterPodAffinityHostnameFastPath=true": "--feature-gates=InterPodAffinityHostnameFastPath=true at --emulated-version=1.35: " +
			"cannot set feature gate InterPodAffinityHostnameFastPath to true, feature is PreAlpha at emulated version 1.35",
	} {
		code, out := runCLI(t, append(slices.Clone(base), strings.Fields(flags)...)...)
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("%s: exit code %d, output %q; want 2 and %q", flags, code, out, want)
		}
		if v := featuregates.EffectiveVersion().EmulationVersion().String(); v != "1.37" {
			t.Errorf("%s: the process emulates %s after the error, want 1.37", flags, v)
		}
	}
}

// evalArgs are the arguments of celsched eval of pod (a file of
// testdata/featuregates) on its two nodes, a plain one and a tainted one,
// with a policy that allows every node, and a JSON report.
func evalArgs(pod string) []string {
	dir := filepath.Join("testdata", "featuregates")
	return []string{"eval", "-f", filepath.Join(dir, "policy.yaml"), "--pod", filepath.Join(dir, pod),
		"--nodes", filepath.Join(dir, "cluster.yaml"), "-o", "json"}
}

// evalNodes runs celsched eval with args (-o json) and returns, per node,
// "feasible" or "rejected by" the plugin that refused it.
func evalNodes(t *testing.T, args ...string) map[string]string {
	t.Helper()
	code, out := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, out)
	}
	var report struct {
		Nodes []struct {
			Name       string `json:"name"`
			Feasible   bool   `json:"feasible"`
			RejectedBy *struct {
				Plugin string `json:"plugin"`
			} `json:"rejectedBy"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("reading the report: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, n := range report.Nodes {
		got[n.Name] = "feasible"
		if !n.Feasible {
			got[n.Name] = "rejected by <nil>"
			if n.RejectedBy != nil {
				got[n.Name] = "rejected by " + n.RejectedBy.Plugin
			}
		}
	}
	return got
}

// TestImpactGroups: with the workload gates on (--feature-gates), impact
// on a dump with PodGroups lists the pod groups whose outcome changes
// (kube-scheduler places them with the live policies and with the draft),
// in the table and the pull-request comment; --fail-on counts groups.
// The gates off, a note says the groups are not evaluated as groups.
func TestImpactGroups(t *testing.T) {
	dir := filepath.Join("testdata", "impact", "groups")
	runGroupGoldens(t, dir, []string{"impact", "--dump", filepath.Join("..", "..", "..", "simulate", "impact", "testdata", "groups-cluster.yaml"),
		"--policies", filepath.Join(dir, "live.yaml"), "-f", filepath.Join(dir, "draft.yaml"), "--delete", "freeze"}, []groupGolden{
		{name: "table", args: []string{workloadGatesOn}},
		{name: "markdown", args: []string{workloadGatesOn, "-o", "markdown"}},
		{name: "fail-on", args: []string{workloadGatesOn, "--fail-on", "held,stranded"}, wantCode: 1},
		{name: "gates-off", args: []string{workloadGatesOff}},
	})
}

// The workload gates, as the manager's --feature-gates set them.
const (
	workloadGatesOn  = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
	workloadGatesOff = "--feature-gates=GenericWorkload=false,TopologyAwareWorkloadScheduling=false"
)

// groupGolden is a command line's last arguments, its exit code and its
// golden file's name.
type groupGolden struct {
	name     string
	args     []string
	wantCode int
}

// runGroupGoldens runs base and each case's arguments in-process, and
// compares the output (stdout, then stderr) with dir/NAME.golden. The
// workload gates, which the CLI sets in the process, are back at their
// defaults after the test.
func runGroupGoldens(t *testing.T, dir string, base []string, cases []groupGolden) {
	t.Helper()
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: false, features.TopologyAwareWorkloadScheduling: false,
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(append(slices.Clone(base), tc.args...), strings.NewReader(""), &out, &errOut)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s%s", code, tc.wantCode, out.String(), errOut.String())
			}
			golden.Compare(t, filepath.Join(dir, tc.name+".golden"), out.String()+errOut.String())
		})
	}
}

// TestCheckGroup: a case's group expectations fail with the field and
// the difference: another domain, another state, a reason that does not
// match, other refused placements, and no group at all.
func TestCheckGroup(t *testing.T) {
	placed := &dryrun.GroupResult{Group: "ml/g", State: "placed", Placement: "y",
		Members: []celverdict.GroupMember{{Pod: "g-0", Node: "y1"}}}
	held := &dryrun.GroupResult{Group: "ml/g", State: "unschedulable", Reason: "rule one-block refused z1",
		Refused: []celplugins.RefusedPlacement{{Placement: "z1", Refusal: "refused"}}}
	for name, tc := range map[string]struct {
		want *policytest.GroupExpectation
		got  *dryrun.GroupResult
		fail string // "" passes
	}{
		"placed as expected":   {want: &policytest.GroupExpectation{State: "placed", Placement: "y"}, got: placed},
		"another domain":       {want: &policytest.GroupExpectation{Placement: "x"}, got: placed, fail: "group.placement (members: g-0 on y1 )"},
		"another state":        {want: &policytest.GroupExpectation{State: "placed"}, got: held, fail: "group.state"},
		"reason matches":       {want: &policytest.GroupExpectation{Reason: "one-block", Refused: []string{"z1"}}, got: held},
		"reason does not":      {want: &policytest.GroupExpectation{Reason: "one-rack"}, got: held, fail: `group.reason: "rule one-block refused z1" does not match "one-rack"`},
		"other refused":        {want: &policytest.GroupExpectation{Refused: []string{}}, got: held, fail: "group.refused"},
		"no group in the case": {want: &policytest.GroupExpectation{State: "placed"}, fail: "group (the case needs podGroup, and the suite featureGates GenericWorkload: true)"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := check(policytest.Expectation{Group: tc.want}, &dryrun.Report{Group: tc.got})
			if err != nil {
				t.Fatal(err)
			}
			if (got == "") != (tc.fail == "") || !strings.Contains(got, tc.fail) {
				t.Errorf("check: %q, want a failure containing %q (none when empty)", got, tc.fail)
			}
		})
	}
}

// TestEvalGroups: with the workload gates on, eval places the pod's group
// (--pod-groups, the other pending members in --group-pods) with
// kube-scheduler: a gang of two placed in the rack that takes it, the
// same gang left unschedulable by a placement filter that names its rule,
// in the table and JSON. Without the pod's PodGroup, or with the gates
// off, a note says so. A member that is in another group, or bound, or
// --group-pods for a pod in no group, is bad input that names the file
// and the field.
func TestEvalGroups(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: false, features.TopologyAwareWorkloadScheduling: false,
	})
	dir := filepath.Join("testdata", "eval", "groups")
	file := func(name string) string { return filepath.Join(dir, name) }
	gates := workloadGatesOn
	base := []string{"eval", "--pod", file("pod.yaml"), "--nodes", file("nodes.yaml")}
	gang := []string{"--pod-groups", file("podgroup.yaml"), "--group-pods", file("group-pods.yaml")}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // in the output
	}{
		{name: "placed", args: append([]string{gates}, gang...), want: "Pod group ml/train (minCount 2, 2 pending): placed in a\n"},
		{name: "refused", args: append([]string{gates, "-f", file("rack-b.yaml")}, gang...),
			want: "placement a rejected by SchedulingPolicy trainers-in-rack-b, rule placement.filters/rack-b: trainer gangs go to rack b"},
		{name: "refused-json", args: append([]string{gates, "-f", file("rack-b.yaml"), "-o", "json"}, gang...), want: `"rule": "rack-b"`},
		{name: "no-podgroup", args: []string{gates, "--group-pods", file("group-pods.yaml")},
			want: "Note: 2 pending pod(s) name a PodGroup that is not in the input (ml/train): kube-scheduler holds them until it exists\n"},
		{name: "gates-off", args: append([]string{workloadGatesOff}, gang...), want: "Note: 1 pod group(s) with pending members are not placed as groups, their pods one by one: the feature gate GenericWorkload is off"},
		{name: "other-group", args: []string{gates, "--pod-groups", file("podgroup.yaml"), "--group-pods", file("other-group.yaml")}, wantCode: 2,
			want: `other-group.yaml: pod ml/serve-0: spec.schedulingGroup.podGroupName: "serve", want the pod's group "train"`},
		{name: "bound", args: []string{gates, "--pod-groups", file("podgroup.yaml"), "--group-pods", file("bound.yaml")}, wantCode: 2,
			want: "bound.yaml: pod ml/train-1: spec.nodeName: bound to a1, not pending"},
		{name: "no-group", args: []string{"--pod", filepath.Join("testdata", "eval", "pod-trainer.yaml"), "--group-pods", file("group-pods.yaml")}, wantCode: 2,
			want: "--group-pods: the pod is in no pod group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, append(slices.Clone(base), tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			if !strings.Contains(unwrapped(out), unwrapped(tc.want)) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			if tc.wantCode != 0 && strings.Count(out, "\n") != 1 {
				t.Errorf("want one error line, got:\n%s", out)
			}
			golden.Compare(t, filepath.Join(dir, tc.name+".golden"), membersInOrder(out))
		})
	}
}

// membersInOrder gives the members of a placed pod group, in the output of
// eval, the group's nodes in their order: kube-scheduler picks among nodes
// of equal score at random (here a1 and a2, 423 each), so which member of
// the group lands on which of them changes from run to run; the nodes the
// group takes do not.
func membersInOrder(out string) string {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "Pod group ") || !strings.Contains(line, ": placed in ") {
			continue
		}
		var members, nodes []string
		j := i + 1
		for ; j < len(lines) && strings.HasPrefix(lines[j], "  "); j++ {
			member, node, ok := strings.Cut(strings.TrimSpace(lines[j]), ": ")
			if !ok {
				break
			}
			members, nodes = append(members, member), append(nodes, node)
		}
		slices.Sort(nodes)
		for k := range members {
			lines[i+1+k] = "  " + members[k] + ": " + nodes[k]
		}
	}
	return strings.Join(lines, "\n")
}

// TestAnalyzeGroups: analyze on a dump with pod groups (analyze's
// testdata/groups-cluster.yaml), the workload gates on: three groups the
// policies keep from a placement (group-unplaceable, naming the rule) and
// one no placement fits (group-no-placement), in the table, Markdown and
// JSON; --fail-on counts them. The gates off, a note says the groups are
// not analyzed as groups.
func TestAnalyzeGroups(t *testing.T) {
	dir := filepath.Join("testdata", "analyze")
	runGroupGoldens(t, dir, []string{"analyze", "--dump", filepath.Join("..", "..", "..", "simulate", "analyze", "testdata", "groups-cluster.yaml"),
		"--policies", filepath.Join(dir, "groups-policies.yaml")}, []groupGolden{
		{name: "groups", args: []string{workloadGatesOn}},
		{name: "groups-markdown", args: []string{workloadGatesOn, "-o", "markdown"}},
		{name: "groups-json", args: []string{workloadGatesOn, "-o", "json"}},
		{name: "groups-fail-on", args: []string{workloadGatesOn, "--fail-on", "group-unplaceable,group-no-placement"}, wantCode: 1},
		{name: "groups-gates-off", args: []string{workloadGatesOff, "--fail-on", "group-unplaceable"}},
	})
}
