package engine

import (
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/go-cmp/cmp"

	"github.com/celsched/celsched/test/builder"
)

// TestCheck: Check returns every expression that checks, in spec order,
// with its field path; a variable is typed by its expression for those
// after it (variables.zones is a list: .exists checks); params are typed
// by the kinds celsched ships; an expression that does not check is left
// out, with the error Compile gives for it.
func TestCheck(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	policy := builder.MakePolicy("p").
		ParamKind("scheduling.celsched.io/v1alpha1", "TenantPlacement").ParamRef("placement", "", "").
		Variable("zones", "params.spec.zones").
		Variable("pool", "node.metadata.?labels[?'pool'].orValue('')").
		Condition("labelled", "has(pod.metadata.labels)").
		PreEnqueue("approved", "namespaceObject.metadata.name != ''", "").
		Filter("zone", "variables.zones.exists(z, z == node.metadata.labels['zone'])").
		Filter("broken", "pod.spec.nodeSelectr == {}").
		Score("pool", "variables.pool == 'a' ? 1 : 0", 1, "").Obj()
	checked, errs := env.Check(policy, nil)
	type expression struct{ Name, Field, Output string }
	var got []expression
	for _, list := range [][]CheckedExpression{checked.Variables, checked.Conditions, checked.PreEnqueue, checked.Filters, checked.Scores} {
		for _, e := range list {
			got = append(got, expression{e.Name, e.Field, e.AST.OutputType().String()})
		}
	}
	want := []expression{
		{"zones", "spec.variables[0].expression", "list(string)"},
		{"pool", "spec.variables[1].expression", "string"},
		{"labelled", "spec.match.conditions[0].expression", "bool"},
		{"approved", "spec.preEnqueue[0].expression", "bool"},
		{"zone", "spec.filters[0].expression", "bool"},
		{"pool", "spec.scores[0].expression", "int"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checked expressions (-want +got):\n%s", diff)
	}
	compiled := NewCompiler(env).Compile(policy, CompileOptions{Stored: true})
	if diff := cmp.Diff(compiled.Errors.ToAggregate().Error(), errs.ToAggregate().Error()); diff != "" {
		t.Errorf("errors (-Compile's +Check's):\n%s", diff)
	}
	if !checked.Filters[0].AST.IsChecked() || checked.Filters[0].AST.OutputType() != cel.BoolType {
		t.Errorf("the filter is not type-checked: %v", checked.Filters[0].AST.OutputType())
	}
}
