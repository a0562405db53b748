package engine

import (
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// CRDParamTypes types params from CustomResourceDefinitions' schemas, as
// the API server types a custom resource's CEL rules: a misspelt field of
// a custom param kind is then a compile error.
type CRDParamTypes map[schema.GroupVersionKind]*apiservercel.DeclType

// ParamType implements ParamTypes.
func (c CRDParamTypes) ParamType(gvk schema.GroupVersionKind) (*apiservercel.DeclType, bool) {
	d, ok := c[gvk]
	return d, ok
}

// Add types the kind of every version of a CRD that has a schema.
func (c CRDParamTypes) Add(crd *apiextensionsv1.CustomResourceDefinition) error {
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return fmt.Errorf("CRD %s, version %s: converting its schema: %w", crd.Name, v.Name, err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			return fmt.Errorf("CRD %s, version %s: its schema is not structural: %w", crd.Name, v.Name, err)
		}
		decl := model.SchemaDeclType(s, true)
		if decl == nil {
			return fmt.Errorf("CRD %s, version %s: no CEL type for its schema", crd.Name, v.Name)
		}
		c[schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}] = decl
	}
	return nil
}
