package engine

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/compile")

// TestCompileGolden compiles each policy of testdata/compile/NAME.yaml (with
// the new-expressions environment) and compares its errors and warnings,
// one per line with field path and CEL line and column, to NAME.golden.
// `go test ./engine -run TestCompileGolden -update` rewrites the golden files.
func TestCompileGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "compile", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test policies: %v", err)
	}
	compiler := NewCompiler(testEnv(t))
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var policy schedv1alpha1.SchedulingPolicy
			if err := yaml.UnmarshalStrict(data, &policy); err != nil {
				t.Fatal(err)
			}
			policy.Name = name
			compiled := compiler.Compile(&policy, CompileOptions{})
			var b strings.Builder
			for _, e := range compiled.Errors {
				b.WriteString("error: " + e.Error() + "\n")
			}
			for _, w := range compiled.Warnings {
				b.WriteString("warning: " + w.FieldRef + ": " + w.Warning + "\n")
			}
			got := b.String()

			golden := filepath.Join("testdata", "compile", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("compile output differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestNamespaceFieldEstimate: pod.metadata.namespace (declared escaped, as
// __namespace__) has the length the API server validates, so a message
// naming it compiles, as one naming the pod does.
func TestNamespaceFieldEstimate(t *testing.T) {
	t.Parallel()
	for _, expression := range []string{"'tenant ' + pod.metadata.namespace", "pod.metadata.namespace + '/' + pod.metadata.name"} {
		p := NewCompiler(testEnv(t)).Compile(builder.MakePolicy("p").FilterMsg("f", "true", "", expression).Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Errorf("%s: %v", expression, err)
		}
	}
}
