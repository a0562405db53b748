package app

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/celsched/celsched/test/golden"
)

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := Run(args, strings.NewReader(""), &out, &out)
	return code, out.String()
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		file     string
		wantCode int
	}{
		"valid":          {"valid.yaml", 0},
		"misspelt-field": {"misspelt-field.yaml", 1},
		"scope-and-type": {"scope-and-type.yaml", 1},
		"unknown-field":  {"unknown-field.yaml", 1},
		// The one strict decoder: duplicated keys and wrong types, each
		// at its line with its field path.
		"duplicate-key": {"duplicate-key.yaml", 1},
		"wrong-type":    {"wrong-type.yaml", 1},
		"malformed":     {"malformed.yaml", 2},
		"missing":       {"missing.yaml", 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, "validate", "-f", filepath.Join("testdata", "validate", tc.file))
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			golden.Compare(t, filepath.Join("testdata", "validate", name+".golden"), out)
		})
	}
}

// TestValidateParams: params is typed from a CRD given with --param-crd
// (and from the built-in ConfigMap), dyn with a warning without it.
func TestValidateParams(t *testing.T) {
	dir := filepath.Join("testdata", "validate")
	cases := map[string][]string{
		"params-crd":    {"validate", "-f", filepath.Join(dir, "params.yaml"), "--param-crd", filepath.Join(dir, "tenantplacement-crd.yaml")},
		"params-no-crd": {"validate", "-f", filepath.Join(dir, "params.yaml")},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if code, out := runCLI(t, args...); code != 1 {
				t.Errorf("exit code %d, want 1; output:\n%s", code, out)
			} else {
				golden.Compare(t, filepath.Join(dir, name+".golden"), out)
			}
		})
	}
}

// TestValidateSamples: every sample is valid, as a directory, without a
// warning: the params of TenantPlacement, celsched's own kind, are typed
// from its CRD, built into the CLI.
func TestValidateSamples(t *testing.T) {
	samples := filepath.Join("..", "..", "..", "config", "samples")
	code, out := runCLI(t, "validate", "-f", samples)
	if code != 0 || out != "13 SchedulingPolicies valid\n" {
		t.Errorf("exit code %d, output %q", code, out)
	}
}

func TestUsage(t *testing.T) {
	if code, out := runCLI(t, "validate"); code != 2 || !strings.Contains(out, "-f is required") {
		t.Errorf("exit code %d, output %q", code, out)
	}
	if code, _ := runCLI(t, "no-such-command"); code == 0 {
		t.Error("an unknown command succeeded")
	}
}

func TestEval(t *testing.T) {
	dir := filepath.Join("testdata", "eval")
	base := []string{"eval", "-f", filepath.Join("..", "..", "..", "config", "samples"),
		"--pod", filepath.Join(dir, "pod-trainer.yaml"), "--nodes", filepath.Join(dir, "nodes.yaml")}
	cases := map[string]struct {
		args     []string
		wantCode int
	}{
		"table": {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "--pods-on-nodes", filepath.Join(dir, "pods-on-nodes.yaml")}},
		"json":  {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "-o", "json"}},
		"yaml":  {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "-o", "yaml"}},
		// --why: the sub-expressions of the false filters, in the table
		// and in JSON.
		"why":      {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "--why"}},
		"why-json": {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "--why", "-o", "json"}},
		// Without the namespace file, the namespace has only its name
		// label: no cost-center, so the pod is held.
		"held":                  {},
		"pods-off-nodes":        {args: []string{"--namespace", filepath.Join(dir, "namespace-ml.yaml"), "--pods-on-nodes", filepath.Join(dir, "pods-off-nodes.yaml")}},
		"two-pods":              {args: []string{"--pod", filepath.Join(dir, "two-pods.yaml")}, wantCode: 2},
		"unknown-field":         {args: []string{"--pod", filepath.Join(dir, "pod-unknown-field.yaml")}, wantCode: 2},
		"missing-file":          {args: []string{"--nodes", filepath.Join(dir, "missing.yaml")}, wantCode: 2},
		"malformed-policy":      {args: []string{"-f", filepath.Join("testdata", "validate", "malformed.yaml")}, wantCode: 2},
		"nodes-file-with-a-pod": {args: []string{"--nodes", filepath.Join(dir, "pod-trainer.yaml")}, wantCode: 2},
		"unknown-output":        {args: []string{"-o", "xml"}, wantCode: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, append(slices.Clone(base), tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			if tc.wantCode != 0 && strings.Count(out, "\n") != 1 {
				t.Errorf("want one error line, got:\n%s", out)
			}
			golden.Compare(t, filepath.Join("testdata", "eval", name+".golden"), out)
		})
	}
}

// TestEvalParams: a tenant's pod evaluated with the tenants' params
// ConfigMaps; the report names the params object the policy used.
func TestEvalParams(t *testing.T) {
	dir := filepath.Join("testdata", "eval")
	samples := filepath.Join("..", "..", "..", "config", "samples")
	base := []string{"eval", "-f", samples, "--pod", filepath.Join(dir, "pod-tenant.yaml"), "--nodes", filepath.Join(dir, "nodes.yaml"),
		"--namespace", filepath.Join(dir, "namespace-team-a.yaml")}
	cases := map[string]struct {
		args     []string
		wantCode int
	}{
		// team-a's zone is zone-a.
		"params": {args: []string{"--params", filepath.Join(samples, "tenant-placement-params.yaml")}},
		// Without params, the tenant's pod gets no node (Deny).
		"params-missing":  {},
		"params-bad-file": {args: []string{"--params", filepath.Join(dir, "missing.yaml")}, wantCode: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, append(slices.Clone(base), tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			golden.Compare(t, filepath.Join(dir, name+".golden"), out)
		})
	}
}

func TestSampleSuites(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "junit.xml")
	code, out := runCLI(t, "test", filepath.Join("..", "..", "..", "config", "samples", "tests"), "--junit", junit)
	if code != 0 || !strings.HasSuffix(out, "40 passed, 0 failed\n") {
		t.Errorf("exit code %d, output:\n%s", code, out)
	}
	golden.Compare(t, filepath.Join("testdata", "test", "samples.golden"), out)
	data, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(data), `<testsuite name="ml-on-gpu-nodes" tests="4" failures="0">`) {
		t.Errorf("JUnit report (%v):\n%s", err, data)
	}
}

// TestBrokenSampleFails breaks a copy of a sample: its suite fails with a
// diff, and the exit code and the JUnit report say so.
func TestBrokenSampleFails(t *testing.T) {
	dir := t.TempDir()
	samples := filepath.Join("..", "..", "..", "config", "samples")
	if err := os.CopyFS(dir, os.DirFS(samples)); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "scheduling_v1alpha1_ml-on-gpu-nodes.yaml")
	data, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(data), "'nvidia.com/gpu.present'", "'nvidia.com/gpu.product'", 1)
	if err := os.WriteFile(policy, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(dir, "junit.xml")
	code, out := runCLI(t, "test", filepath.Join(dir, "tests", "ml-on-gpu-nodes.yaml"), "--junit", junit)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	golden.Compare(t, filepath.Join("testdata", "test", "broken-sample.golden"), strings.ReplaceAll(out, dir, "DIR"))
	for _, want := range []string{
		"FAIL  ml-on-gpu-nodes / a GPU pod of an approved namespace goes to the GPU node only\n",
		"feasible: want [b-gpu], got []\n",
		"  b-gpu: rejected by CELFilter: node(s) rejected by SchedulingPolicy ml-on-gpu-nodes, rule gpu-node: node has no GPU\n",
		"3 passed, 1 failed\n",
		"error: celsched test: 1 of 4 cases failed\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	report, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(report), `failures="1"`) {
		t.Errorf("JUnit report (%v):\n%s", err, report)
	}
}

func TestTestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := map[string]struct{ file, want string }{
		"no suites":     {write("empty.yaml", "apiVersion: v1\nkind: ConfigMap\n"), "no PolicyTest suites"},
		"unknown field": {write("typo.yaml", "apiVersion: celsched.io/v1alpha1\nkind: PolicyTest\ncasses: []\n"), `typo.yaml:3: casses: unknown field (did you mean "cases"?)`},
		"missing policy file": {write("missing.yaml", "apiVersion: celsched.io/v1alpha1\nkind: PolicyTest\npolicies: [nope.yaml]\ncases: []\n"),
			"nope.yaml: no such file or directory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out := runCLI(t, "test", tc.file)
			if code != 2 || !strings.Contains(out, tc.want) || strings.Count(out, "\n") != 1 {
				t.Errorf("exit code %d, output %q; want 2 and one line with %q", code, out, tc.want)
			}
		})
	}
}

// TestImpact runs impact on a dump of make run's cluster (testdata/impact)
// with the samples as the live policies: a draft that moves the shop
// namespace to zone a, a loosening one, --fail-on and bad input.
func TestImpact(t *testing.T) {
	dir := filepath.Join("testdata", "impact")
	base := []string{"impact", "--dump", filepath.Join(dir, "cluster.yaml"), "--policies", filepath.Join("..", "..", "..", "config", "samples")}
	shop := []string{"-f", filepath.Join(dir, "shop-in-zone-a.yaml")}
	loosen := []string{"-f", filepath.Join(dir, "ml-any-namespace.yaml"), "--delete", "require-cost-center"}
	cases := map[string]struct {
		args     []string
		wantCode int
	}{
		"table": {args: shop},
		"json":  {args: append(slices.Clone(shop), "-o", "json")},
		// A pull-request comment: the changed pods capped at 2, the rest
		// counted.
		"markdown": {args: append(slices.Clone(shop), "-o", "markdown", "--max-pods", "2", "--why")},
		"yaml":     {args: append(slices.Clone(shop), "-o", "yaml")},
		"loosen":   {args: loosen},
		// --why: the false rules behind refusals and holds.
		"why":      {args: append(slices.Clone(shop), "--why")},
		"why-held": {args: []string{"-f", filepath.Join(dir, "shop-in-zone-a.yaml"), "-f", filepath.Join(dir, "hold-shop.yaml"), "--why", "-o", "yaml"}},
		// A draft Audit everywhere but enforced in shop: only shop's pods
		// change, and --why names the override.
		"override": {args: []string{"-f", filepath.Join(dir, "zone-a-enforced-in-shop.yaml"), "--why"}},
		// A draft that does not compile rejects what it matches; a note
		// says why.
		"broken-draft": {args: []string{"-f", filepath.Join(dir, "broken-draft.yaml")}},
		// --prune: the drafts are the whole set; the samples not among
		// them are deleted.
		"prune": {args: []string{"-f", filepath.Join("..", "..", "..", "config", "samples", "scheduling_v1alpha1_zone-preference.yaml"),
			"-f", filepath.Join(dir, "shop-in-zone-a.yaml"), "--prune"}},
		"fail-on":         {args: append(slices.Clone(shop), "--fail-on", "stranded,evicted-would-not-return"), wantCode: 1},
		"fail-on-other":   {args: append(slices.Clone(shop), "--fail-on", "stranded,held")},
		"no-draft":        {wantCode: 2},
		"unknown-fail-on": {args: append(slices.Clone(shop), "--fail-on", "evicted"), wantCode: 2},
		"unknown-delete":  {args: []string{"--delete", "nope"}, wantCode: 2},
		"missing-draft":   {args: []string{"-f", filepath.Join(dir, "missing.yaml")}, wantCode: 2},
		"wrong-kind":      {args: append(slices.Clone(shop), "--nodes", filepath.Join("testdata", "eval", "pod-trainer.yaml")), wantCode: 2},
		// A misspelt field in a List's second item: its line and path.
		"list-item-typo": {args: append(slices.Clone(shop), "--nodes", filepath.Join(dir, "nodes-typo.yaml")), wantCode: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(append(slices.Clone(base), tc.args...), strings.NewReader(""), &out, &errOut)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s%s", code, tc.wantCode, out.String(), errOut.String())
			}
			if tc.wantCode == 2 && (out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1) {
				t.Errorf("want one error line on stderr and nothing on stdout, got:\n%s\n---\n%s", out.String(), errOut.String())
			}
			golden.Compare(t, filepath.Join(dir, name+".golden"), out.String()+errOut.String())
		})
	}
}

// TestImpactParams: impact reads the params objects of parameterized
// policies (from --dump, --params and -f), and a params draft is a change:
// two tenants with a place ConfigMap each, three running pods of which one
// (ten-2/y2) is outside its tenant's zone.
func TestImpactParams(t *testing.T) {
	dir := filepath.Join("testdata", "impact", "params")
	file := func(name string) string { return filepath.Join(dir, name) }
	crd := file("placement-crd.yaml")
	cluster := []string{"impact", "--dump", file("cluster.yaml")}
	live := append(slices.Clone(cluster), "--params", file("configmaps.yaml"), "--policies", file("tenant-zone.yaml"))
	cases := map[string]struct {
		args     []string
		wantCode int
	}{
		// The draft policy refuses exactly the pod outside its zone.
		"policy-draft":          {args: append(slices.Clone(cluster), "--dump", file("configmaps.yaml"), "-f", file("tenant-zone.yaml"))},
		"params-files":          {args: append(slices.Clone(cluster), "--params", file("configmaps.yaml"), "-f", file("tenant-zone.yaml"))},
		"custom-kind":           {args: append(slices.Clone(cluster), "--dump", crd, "--params", file("placements.yaml"), "-f", file("custom-kind.yaml"))},
		"tenantplacement":       {args: append(slices.Clone(cluster), "--dump", file("tenantplacements.yaml"), "-f", file("tenantplacement-policy.yaml"))},
		"params-draft":          {args: append(slices.Clone(live), "-f", file("ten-2-zone-a.yaml"))},
		"params-draft-markdown": {args: append(slices.Clone(live), "-f", file("ten-2-zone-a.yaml"), "-o", "markdown")},
		"delete-params":         {args: append(slices.Clone(live), "--delete-params", "ConfigMap/ten-1/place")},
		// Bad input: one line, exit 2.
		"custom-kind-no-crd":    {args: append(slices.Clone(cluster), "--params", file("placements.yaml"), "-f", file("custom-kind.yaml")), wantCode: 2},
		"delete-params-unknown": {args: append(slices.Clone(live), "--delete-params", "ConfigMap/ten-1/nope"), wantCode: 2},
		"delete-params-bad":     {args: append(slices.Clone(live), "--delete-params", "ConfigMap"), wantCode: 2},
	}
	outputs := map[string]string{}
	for name, tc := range cases {
		var out, errOut bytes.Buffer
		code := Run(tc.args, strings.NewReader(""), &out, &errOut)
		if code != tc.wantCode {
			t.Errorf("%s: exit code %d, want %d; output:\n%s%s", name, code, tc.wantCode, out.String(), errOut.String())
		}
		if tc.wantCode == 2 && (out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1) {
			t.Errorf("%s: want one error line on stderr and nothing on stdout, got:\n%s\n---\n%s", name, out.String(), errOut.String())
		}
		outputs[name] = out.String() + errOut.String()
		if name != "params-files" && name != "custom-kind" && name != "tenantplacement" {
			golden.Compare(t, filepath.Join(dir, name+".golden"), outputs[name])
		}
	}
	// The same params from --dump, from --params, or as custom resources,
	// celsched's TenantPlacement without its CRD (but for the policy's name
	// and message): the same verdicts.
	if outputs["params-files"] != outputs["policy-draft"] {
		t.Errorf("--params and --dump disagree:\n%s\n---\n%s", outputs["params-files"], outputs["policy-draft"])
	}
	for _, name := range []string{"policy-draft", "custom-kind", "tenantplacement"} {
		if !strings.Contains(outputs[name], "ten-2/y2 on p-a: evicted-would-not-return") || strings.Count(outputs[name], ": evicted-would-not-return (") != 1 {
			t.Errorf("%s: want ten-2/y2 and only it evicted-would-not-return, got:\n%s", name, outputs[name])
		}
	}
}

// TestAnalyze runs analyze on a small dump whose policies show every kind
// of finding (testdata/analyze): goldens for the table, Markdown and JSON,
// --fail-on, and bad input (errors name the command: celsched analyze).
func TestAnalyze(t *testing.T) {
	dir := filepath.Join("testdata", "analyze")
	dump := []string{"analyze", "--dump", filepath.Join(dir, "cluster.yaml"), "--min-feasible", "2"}
	base := append(slices.Clone(dump), "--policies", filepath.Join(dir, "policies.yaml"))
	cases := map[string]struct {
		args     []string
		wantCode int
		full     bool // args are the whole command line
	}{
		"table":    {},
		"markdown": {args: []string{"-o", "markdown"}},
		"json":     {args: []string{"-o", "json"}},
		"fail-on":  {args: []string{"--fail-on", "no-feasible-node,params-mismatch"}, wantCode: 1},
		// The kinds that are not found do not fail.
		"fail-on-absent": {args: append(slices.Clone(dump), "--fail-on", "no-feasible-node", "--policies", filepath.Join(dir, "policies-ok.yaml")), full: true},
		"unknown-kind":   {args: []string{"--fail-on", "stranded"}, wantCode: 2},
		"min-feasible-0": {args: []string{"--min-feasible", "0"}, wantCode: 2},
		// Unreadable input: one line, exit 2, naming analyze, the
		// command run.
		"wrong-kind":        {args: []string{"--nodes", filepath.Join("testdata", "eval", "pod-trainer.yaml")}, wantCode: 2},
		"unknown-dump-kind": {args: []string{"--dump", filepath.Join(dir, "deployment.yaml")}, wantCode: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append(slices.Clone(base), tc.args...)
			if tc.full {
				args = tc.args
			}
			code := Run(args, strings.NewReader(""), &out, &errOut)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s%s", code, tc.wantCode, out.String(), errOut.String())
			}
			if tc.wantCode == 2 && (out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1) {
				t.Errorf("want one error line on stderr and nothing on stdout, got:\n%s\n---\n%s", out.String(), errOut.String())
			}
			golden.Compare(t, filepath.Join(dir, name+".golden"), out.String()+errOut.String())
		})
	}
	// Every kind of finding is in the table's golden.
	table, err := os.ReadFile(filepath.Join(dir, "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"no-feasible-node", "params-mismatch", "running-in-violation", "always-false", "always-true", "constant-score", "matches-nothing", "capacity", "no-node-fits", "tenant-writable-input"} {
		if !strings.Contains(string(table), "\n"+kind+": ") {
			t.Errorf("no %s finding in table.golden", kind)
		}
	}
}

// unwrapped is output with the table's folded lines joined: its words
// separated by single spaces.
func unwrapped(out string) string { return strings.Join(strings.Fields(out), " ") }
