package integration

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/celsched/celsched/test/golden"
	"github.com/celsched/celsched/test/testenv"
)

// TestExplain runs `celsched explain` against the live cluster: a pod held
// by a sample policy, the same with a draft that switches the policy to
// Audit, a bound pod, and bad input. Outputs are compared with
// testdata/explain/*.golden, with the generated namespace name replaced.
func TestExplain(t *testing.T) {
	createNodes(t,
		nodeSpec{name: "explain-a", labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}},
		nodeSpec{name: "explain-b", labels: map[string]string{corev1.LabelTopologyZone: "zone-b"}, cpu: "8"},
	)
	applyPolicy(t, loadSample(t, "require-cost-center"))
	sandbox := createNamespace(t, "sandbox", nil)
	held := createPod(t, sandbox, "scratch", withRequests("500m", "1Gi"))
	live := waitPending(t, held, "SchedulingGated")
	accounted := createNamespace(t, "accounted", map[string]string{"cost-center": "cc-1"})
	running := createPod(t, accounted, "app", withRequests("1", "2Gi"))
	waitForNode(t, running)

	draft := filepath.Join("testdata", "explain", "require-cost-center-audit.yaml")
	cases := map[string]struct {
		args     []string
		wantCode int
	}{
		"held":          {args: []string{"pod/scratch", "-n", sandbox}},
		"held-json":     {args: []string{"pod/scratch", "-n", sandbox, "-o", "json"}},
		"held-why":      {args: []string{"pod/scratch", "-n", sandbox, "--why"}},
		"draft-audit":   {args: []string{"scratch", "--namespace", sandbox, "-f", draft, "-o", "yaml"}},
		"bound":         {args: []string{"pods/app", "-n", accounted}},
		"missing-pod":   {args: []string{"pod/nope", "-n", sandbox}, wantCode: 2},
		"not-a-pod":     {args: []string{"deployment/scratch", "-n", sandbox}, wantCode: 2},
		"missing-draft": {args: []string{"pod/scratch", "-n", sandbox, "-f", "no-such-file.yaml"}, wantCode: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"explain", "--kubeconfig", kubeconfig}, tc.args...)
			if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &out); code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out.String())
			}
			got := strings.NewReplacer(sandbox, "SANDBOX", accounted, "ACCOUNTED").Replace(out.String())
			if tc.wantCode != 0 && strings.Count(got, "\n") != 1 {
				t.Errorf("want one error line, got:\n%s", got)
			}
			golden.Compare(t, filepath.Join("testdata", "explain", name+".golden"), got)
		})
	}

	// The acceptance check, spelled out: explain names the policy and
	// rule that hold the pod, with the live condition's message.
	report := cliReport(t, "explain", "--kubeconfig", kubeconfig, "-n", sandbox, "pod/scratch", "-o", "json")
	if report.PreEnqueue == nil || report.PreEnqueue.Message != live {
		t.Errorf("explain: held by %+v, the live pod's condition says %q", report.PreEnqueue, live)
	}
}
