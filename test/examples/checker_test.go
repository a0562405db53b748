package examples

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBrokenExampleFails changes the example of a real doc (the
// preemption sample's README) to one that errors, a misspelt file, and
// checks that the checker reports it with the doc's line, as TestExamples
// would. kubectl stops at the missing file before it asks any cluster.
func TestBrokenExampleFails(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through make test, which builds kubectl beside kube-apiserver")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const path = "config/samples/preemption/README.md"
	text, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	good := "kubectl apply -f config/samples/preemption/tenant-preemption.yaml\n```"
	if !strings.Contains(string(text), good) {
		t.Fatalf("%s no longer has the example %q: change this test with it", path, good)
	}
	broken := strings.Replace(string(text), good, strings.Replace(good, "tenant-preemption", "tenant-preemptoin", 1), 1)
	doc, err := Extract(path, []byte(broken))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(doc.Examples, func(ex Example) bool { return strings.Contains(ex.Command, "tenant-preemptoin.yaml") })
	if i < 0 {
		t.Fatalf("the broken doc's examples do not include the broken command: %+v", doc.Examples)
	}
	shell := Shell{Dir: root, Env: []string{"PATH=" + assets + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"KUBECONFIG=" + filepath.Join(t.TempDir(), "none")}}
	ex := doc.Examples[i]
	out, code := shell.Run(ex)
	err = Check(ex, out, code)
	if err == nil {
		t.Fatalf("the checker accepts the broken example %q (exit code %d, output %q)", ex.Command, code, out)
	}
	for _, want := range []string{path + ":", "tenant-preemptoin.yaml", "exit code 1, want 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the checker's report does not say %q:\n%v", want, err)
		}
	}
}

// TestCheck: the checker's verdict on examples that run as their doc
// says, and on those that do not.
func TestCheck(t *testing.T) {
	cases := map[string]struct {
		doc string
		// wantErrs are, per example, a text its error holds, or "" when
		// it must pass.
		wantErrs []string
	}{
		"a shell block whose commands pass": {
			doc:      "```sh\ntrue\necho hello   # a comment\n```\n",
			wantErrs: []string{"", ""},
		},
		"a shell block with a command that errors": {
			doc:      "```sh\ntrue\ncat no-such-file\n```\n",
			wantErrs: []string{"", "exit code 1, want 0"},
		},
		"a transcript whose output is the doc's": {
			doc:      "```text\n$ printf 'a\\nb c\\n'\na\nb c\n```\n",
			wantErrs: []string{""},
		},
		"one space is not a column gap": {
			doc:      "```text\n$ printf 'a\\nb  c\\n'\na\nb c\n```\n",
			wantErrs: []string{"output differs"},
		},
		"a transcript with aligned columns": {
			doc:      "```text\n$ printf 'NAME   AGE\\nweb    37s\\n'\nNAME  AGE\nweb   5m2s\n```\n",
			wantErrs: []string{""},
		},
		"a transcript whose output differs": {
			doc:      "```text\n$ echo 13 SchedulingPolicies valid\n11 SchedulingPolicies valid\n```\n",
			wantErrs: []string{"output differs"},
		},
		"elided lines and text": {
			doc:      "```text\n$ printf 'a\\nb\\nc\\nd: long reason\\n'\na\n...\nd: long ...\n```\n",
			wantErrs: []string{""},
		},
		"an elision that hides too little": {
			doc:      "```text\n$ printf 'a\\nb\\n'\na\n...\nc\n```\n",
			wantErrs: []string{"output differs"},
		},
		"an exit code the doc shows with echo $?": {
			doc:      "```text\n$ sh -c 'echo invalid; exit 1'\ninvalid\n$ echo $?\n1\n```\n",
			wantErrs: []string{""},
		},
		"a transcript command with no output shown prints nothing": {
			doc:      "```text\n$ true\n$ echo surprise\n$ echo $?\n0\n```\n",
			wantErrs: []string{"", "output differs"},
		},
		"an exit code other than the one echo $? shows": {
			doc:      "```text\n$ sh -c 'exit 2'\n$ echo $?\n1\n```\n",
			wantErrs: []string{"exit code 2, want 1"},
		},
		"a directive's exit code": {
			doc:      "<!-- example: exit 3 -->\n```sh\nexit 3\n```\n",
			wantErrs: []string{""},
		},
		"cd applies to the commands after it in its block": {
			doc:      "```text\n$ cd /\n$ pwd\n/\n```\n\n```sh\ntest \"$PWD\" != /\n```\n",
			wantErrs: []string{"", ""},
		},
		"an illustrative block does not run": {
			doc:      "<!-- example: illustrative: needs a cloud -->\n```sh\nfalse\n```\n",
			wantErrs: nil,
		},
		"blocks that are not examples": {
			doc:      "```text\ncelsched eval -f POLICIES --pod POD.yaml\n```\n\n```yaml\nkind: Pod\n```\n",
			wantErrs: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc, err := Extract("doc.md", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if len(doc.Examples) != len(tc.wantErrs) {
				t.Fatalf("%d examples, want %d: %+v", len(doc.Examples), len(tc.wantErrs), doc.Examples)
			}
			shell := Shell{Dir: t.TempDir(), Env: []string{"PATH=" + os.Getenv("PATH")}}
			for i, ex := range doc.Examples {
				out, code := shell.Run(ex)
				err := Check(ex, out, code)
				switch want := tc.wantErrs[i]; {
				case want == "" && err != nil:
					t.Errorf("example %d (%s): %v", i, ex.Command, err)
				case want != "" && err == nil:
					t.Errorf("example %d (%s): no error, want one with %q", i, ex.Command, want)
				case want != "" && !strings.Contains(err.Error(), want):
					t.Errorf("example %d (%s): error without %q:\n%v", i, ex.Command, want, err)
				}
			}
		})
	}
}

// TestExtract: what the convention makes of a doc.
func TestExtract(t *testing.T) {
	doc := "# A doc\n\n" +
		"<!-- example: illustrative: needs a cloud -->\n```sh\nkubectl apply -k config/default\n```\n\n" +
		"<!-- example: make run output -->\n```\nPOD  NODE\n...\n```\n\n" +
		"- a list item:\n\n  ```text\n  $ celsched validate -f a.yaml \\\n      -f b.yaml\n  2 SchedulingPolicies valid\n  ```\n\n" +
		"```yaml\napiVersion: scheduling.celsched.io/v1alpha1\nkind: SchedulingPolicy\n```\n"
	got, err := Extract("doc.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := Doc{
		Examples: []Example{
			{Kind: MakeRunOutput, Doc: "doc.md", Line: 10, Shown: true, Want: []string{"POD  NODE", "..."}},
			{Kind: Command, Doc: "doc.md", Line: 17, Command: "celsched validate -f a.yaml \\\n    -f b.yaml", Shown: true,
				Want: []string{"2 SchedulingPolicies valid"}},
			{Kind: Policy, Doc: "doc.md", Line: 23, Command: "celsched validate -f -",
				Stdin: "apiVersion: scheduling.celsched.io/v1alpha1\nkind: SchedulingPolicy\n"},
		},
		Illustrative: []Illustrative{{Doc: "doc.md", Line: 4, Reason: "needs a cloud"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Extract (-want +got):\n%s", diff)
	}

	for name, bad := range map[string]string{
		"no reason":       "<!-- example: illustrative -->\n```sh\nfalse\n```\n",
		"unknown":         "<!-- example: skip -->\n```sh\nfalse\n```\n",
		"unclosed":        "```sh\nfalse\n",
		"output before $": "```text\nhello\n$ echo hello\n```\n",
	} {
		if _, err := Extract("doc.md", []byte(bad)); err == nil {
			t.Errorf("%s: Extract accepts %q", name, bad)
		}
	}
}

// TestCheckCounts: the counts of make run's cluster a doc's prose states.
func TestCheckCounts(t *testing.T) {
	facts := Facts{Policies: make([]string, 11), Nodes: 6}
	cases := map[string]struct {
		text        string
		wantChecked int
		wantErrs    int
	}{
		"right":               {"starts six KWOK nodes and applies the eleven policies of\n`config/samples/`", 2, 0},
		"wrong policies":      {"applies the twelve policies of `config/samples/`", 1, 1},
		"wrong nodes":         {"with 5 KWOK nodes", 1, 1},
		"no number, no claim": {"the KWOK nodes, and the policies of `config/samples/`", 0, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checked, errs := CheckCounts("doc.md", []byte(tc.text), facts)
			if checked != tc.wantChecked || len(errs) != tc.wantErrs {
				t.Errorf("checked %d with errors %v, want %d checked and %d errors", checked, errs, tc.wantChecked, tc.wantErrs)
			}
		})
	}
}
