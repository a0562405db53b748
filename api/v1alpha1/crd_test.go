package v1alpha1

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestCRDLimitsMatchConstants checks that the limits in the generated CRD,
// which come from the validation markers, are the exported constants that the
// engine and the docs use.
func TestCRDLimitsMatchConstants(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "scheduling.celsched.io_schedulingpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("want one version in the CRD, got %d", len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	match := spec.Properties["match"]

	lists := map[string]apiextensionsv1.JSONSchemaProps{
		"spec.match.conditions":  match.Properties["conditions"],
		"spec.variables":         spec.Properties["variables"],
		"spec.preEnqueue":        spec.Properties["preEnqueue"],
		"spec.filters":           spec.Properties["filters"],
		"spec.scores":            spec.Properties["scores"],
		"spec.placement.filters": spec.Properties["placement"].Properties["filters"],
		"spec.placement.scores":  spec.Properties["placement"].Properties["scores"],
	}
	for path, list := range lists {
		if list.MaxItems == nil || *list.MaxItems != MaxRulesPerList {
			t.Errorf("%s: maxItems %v, want %d", path, list.MaxItems, MaxRulesPerList)
		}
		if list.Items == nil || list.Items.Schema == nil {
			t.Fatalf("%s: no item schema", path)
		}
		item := list.Items.Schema.Properties
		if got := item["expression"].MaxLength; got == nil || *got != MaxExpressionLength {
			t.Errorf("%s[].expression: maxLength %v, want %d", path, got, MaxExpressionLength)
		}
		if got := list.XListType; got == nil || *got != "map" || len(list.XListMapKeys) != 1 || list.XListMapKeys[0] != "name" {
			t.Errorf("%s: want x-kubernetes-list-type map keyed by name, got %v %v", path, got, list.XListMapKeys)
		}
	}
	for _, path := range []string{"spec.preEnqueue", "spec.filters", "spec.placement.filters"} {
		item := lists[path].Items.Schema.Properties
		if got := item["message"].MaxLength; got == nil || *got != MaxMessageLength {
			t.Errorf("%s[].message: maxLength %v, want %d", path, got, MaxMessageLength)
		}
		if path == "spec.placement.filters" {
			continue
		}
		if got := item["messageExpression"].MaxLength; got == nil || *got != MaxExpressionLength {
			t.Errorf("%s[].messageExpression: maxLength %v, want %d", path, got, MaxExpressionLength)
		}
	}
	for _, path := range []string{"spec.scores", "spec.placement.scores"} {
		weight := lists[path].Items.Schema.Properties["weight"]
		if weight.Minimum == nil || *weight.Minimum != MinScoreWeight || weight.Maximum == nil || *weight.Maximum != MaxScoreWeight {
			t.Errorf("%s[].weight: range %v..%v, want %d..%d", path, weight.Minimum, weight.Maximum, MinScoreWeight, MaxScoreWeight)
		}
		// Placement scores normalize as score rules do: the same values,
		// the same default.
		normalization := lists[path].Items.Schema.Properties["normalization"]
		var values []string
		for _, v := range normalization.Enum {
			values = append(values, string(v.Raw))
		}
		if diff := cmp.Diff([]string{`"MinMax"`, `"MinMaxReverse"`, `"None"`}, values); diff != "" {
			t.Errorf("%s[].normalization: enum (-want +got):\n%s", path, diff)
		}
		if normalization.Default == nil || string(normalization.Default.Raw) != `"MinMax"` {
			t.Errorf("%s[].normalization: default %v, want MinMax", path, normalization.Default)
		}
	}
	if got := spec.Properties["schedulerNames"].MaxItems; got == nil || *got != MaxSchedulerNames {
		t.Errorf("spec.schedulerNames: maxItems %v, want %d", got, MaxSchedulerNames)
	}
}
