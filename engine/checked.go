package engine

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// CheckedPolicy is a policy's expressions, parsed and type-checked: what
// an analysis of what the expressions read walks (celsched analyze's
// tenant-controlled inputs). Nothing evaluates it; Compile builds what the
// scheduler runs.
type CheckedPolicy struct {
	// Each list is in spec order.
	Variables, Conditions, PreEnqueue, Filters, Scores []CheckedExpression
}

// CheckedExpression is one expression of a policy, type-checked.
type CheckedExpression struct {
	// Name is the variable's, match condition's or rule's name; Field the
	// expression's path (spec.filters[0].expression).
	Name, Field string
	AST         *cel.Ast
}

// Check parses and type-checks a policy's expressions as Compile does for
// stored policies: over the environment of every policy, with params typed
// by paramTypes (else the kinds celsched ships and the built-in kinds) and
// each variable typed by its expression for the expressions after it. It
// returns the expressions that check, and the errors of those that do
// not; it checks nothing but types (Compile checks scopes and costs too).
func (e *Environment) Check(policy *schedv1alpha1.SchedulingPolicy, paramTypes ParamTypes) (*CheckedPolicy, field.ErrorList) {
	spec := &policy.Spec
	paramSpec, errs := newParamSpec(spec)
	paramsType, _ := e.paramsDeclType(paramSpec, paramTypes)
	pe, err := e.newParamsPolicyEnv(paramsType)
	if err != nil {
		return nil, append(errs, field.InternalError(field.NewPath("spec"), err))
	}
	out := &CheckedPolicy{}
	check := func(path *field.Path, name, text string) *CheckedExpression {
		env, err := pe.envSet.Env(environment.StoredExpressions)
		if err != nil {
			errs = append(errs, field.InternalError(path, err))
			return nil
		}
		ast, issues := env.CompileSource(textSource{common.NewTextSource(text)})
		if len(issues.Errors()) > 0 {
			errs = append(errs, field.Invalid(path, quoted(text), "compilation failed: "+issuesText(issues, text)))
			return nil
		}
		return &CheckedExpression{Name: name, Field: path.String(), AST: ast}
	}
	add := func(list *[]CheckedExpression, c *CheckedExpression) {
		if c != nil {
			*list = append(*list, *c)
		}
	}
	specPath := field.NewPath("spec")
	for i, v := range spec.Variables {
		c := check(specPath.Child("variables").Index(i).Child("expression"), v.Name, v.Expression)
		// A variable that does not check is dyn for the expressions after
		// it, as in Compile.
		var t *cel.Type
		if c != nil {
			t = c.AST.OutputType()
		}
		pe.addVariable(v.Name, t)
		add(&out.Variables, c)
	}
	if m := spec.Match; m != nil {
		for i, c := range m.Conditions {
			add(&out.Conditions, check(specPath.Child("match", "conditions").Index(i).Child("expression"), c.Name, c.Expression))
		}
	}
	for i, r := range spec.PreEnqueue {
		add(&out.PreEnqueue, check(specPath.Child("preEnqueue").Index(i).Child("expression"), r.Name, r.Expression))
	}
	for i, r := range spec.Filters {
		add(&out.Filters, check(specPath.Child("filters").Index(i).Child("expression"), r.Name, r.Expression))
	}
	for i, r := range spec.Scores {
		add(&out.Scores, check(specPath.Child("scores").Index(i).Child("expression"), r.Name, r.Expression))
	}
	return out, errs
}
