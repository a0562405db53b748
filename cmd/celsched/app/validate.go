package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/celsched/celsched/api/manifest"
	"github.com/celsched/celsched/engine"
)

func newValidateCommand(streams *streams) *cobra.Command {
	var files, paramCRDs []string
	cmd := &cobra.Command{
		Use:   "validate -f FILE|DIR ... [--param-crd CRD.yaml ...]",
		Short: "Compile and type-check SchedulingPolicies offline",
		Long: `validate compiles every SchedulingPolicy of the files and directories given,
with the CEL environment and cost limits of the scheduler, and prints each
error with its file, YAML line, field path and CEL line and column. Documents
of other kinds are skipped. It exits non-zero on any error: use it as a
pre-commit hook or a CI step.

params is typed for built-in param kinds (ConfigMap) and celsched's own
(TenantPlacement); for another custom resource, give its
CustomResourceDefinition with --param-crd, so that a misspelt params field is
an error; otherwise params is dyn, with a warning.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usageError("-f is required")
			}
			return runValidate(streams, files, paramCRDs)
		},
	}
	cmd.Flags().StringSliceVarP(&files, "filename", "f", nil, "policy files or directories (- for standard input)")
	cmd.Flags().StringSliceVar(&paramCRDs, "param-crd", nil, "CustomResourceDefinition files of custom param kinds, to type params")
	return cmd
}

func runValidate(s *streams, files, paramCRDs []string) error {
	docs, err := manifest.ReadDocuments(files, s.in)
	if err != nil {
		return inputError(err)
	}
	paramTypes, err := readParamTypes(s, paramCRDs)
	if err != nil {
		return inputError(err)
	}
	compiler, err := newCompiler()
	if err != nil {
		return err
	}
	var policies, failed int
	for _, d := range docs {
		if !d.IsPolicy() {
			continue
		}
		policies++
		p, err := d.Policy()
		if err != nil {
			fmt.Fprintln(s.out, err)
			failed++
			continue
		}
		compiled := compiler.Compile(p, engine.CompileOptions{ParamTypes: paramTypes})
		for _, e := range compiled.Errors {
			fmt.Fprintf(s.out, "%s:%d: SchedulingPolicy %s: %s\n", d.File, d.Line(e.Field), p.Name, indentRest(e.Error()))
		}
		for _, w := range compiled.Warnings {
			fmt.Fprintf(s.out, "%s:%d: SchedulingPolicy %s: warning: %s: %s\n", d.File, d.Line(w.FieldRef), p.Name, w.FieldRef, w.Warning)
		}
		if len(compiled.Errors) > 0 {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d SchedulingPolicies are invalid", failed, policies)
	}
	fmt.Fprintf(s.out, "%d SchedulingPolicies valid\n", policies)
	return nil
}

// readParamTypes reads CustomResourceDefinitions and types params from
// their schemas.
func readParamTypes(s *streams, files []string) (engine.CRDParamTypes, error) {
	types := engine.CRDParamTypes{}
	crds, err := manifest.ReadObjects[*apiextensionsv1.CustomResourceDefinition](s.in, files, "CustomResourceDefinition")
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		if err := types.Add(crd); err != nil {
			return nil, err
		}
	}
	return types, nil
}

// indentRest indents the continuation lines of a multi-line message (CEL
// errors show the expression and a caret).
func indentRest(msg string) string {
	return strings.ReplaceAll(msg, "\n", "\n    ")
}

func newCompiler() (*engine.Compiler, error) {
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	return engine.NewCompiler(env), nil
}

// streams are the command's input and outputs.
type streams struct {
	in       io.Reader
	out, err io.Writer
}
