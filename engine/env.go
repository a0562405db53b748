package engine

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/celsched/celsched/engine/celcost"
)

// Names of the CEL variables. The namespace is namespaceObject, as in
// ValidatingAdmissionPolicy, because namespace is a reserved word in CEL.
const (
	PodVar       = "pod"
	NodeVar      = "node"
	NamespaceVar = "namespaceObject"
	NodeInfoVar  = "nodeInfo"
	VariablesVar = "variables"
)

// Environment is the CEL environment of all policies: the Kubernetes base
// environment at the default compatibility version, cel.bind, the pod,
// node, namespace and nodeInfo variables typed from the Kubernetes OpenAPI
// schemas, and the pod's group (podGroup, podgroup.go). It is built once (it resolves large schemas) and shared; it is
// safe for concurrent use. Its CEL declarations are immutable; what it
// writes is its caches and numbering: the built-in param kinds resolved
// (paramKinds) and the numbers of the memo tables (memo).
type Environment struct {
	envSet *environment.EnvSet

	// declared types of the root variables, for cost estimation.
	roots map[string]*apiservercel.DeclType

	// converters of the objects to CEL values, from their OpenAPI schemas.
	podValues, nodeValues, namespaceValues *valueConverter

	// schemas resolves the built-in kinds' schemas, for params; paramKinds
	// caches what it resolved.
	schemas    resolver.SchemaResolver
	paramKinds paramKindCache
	// shippedParams types the param kinds celsched ships (TenantPlacement).
	shippedParams CRDParamTypes

	// placement are the environments of placement rules (placement.go).
	placement *placementEnvs
	// preemption is the environment of victim rules (preemption.go).
	preemption *placementEnv

	// memo numbers the memo slots and ids of everything compiled,
	// listed or converted over this environment (memoNumbers).
	memo *memoNumbers
}

// NewEnvironment builds the environment for the API server's default
// compatibility version: new expressions may use the CEL libraries of that
// version, stored expressions those of this build.
func NewEnvironment() (*Environment, error) {
	return NewEnvironmentFor(environment.DefaultCompatibilityVersion())
}

// NewEnvironmentFor builds the environment for a compatibility version (as
// kube-apiserver's --emulated-version would choose it); tests use it to
// exercise upgrade ratcheting.
func NewEnvironmentFor(compatibility *version.Version) (*Environment, error) {
	schemas := resolver.NewDefinitionsSchemaResolver(openAPIDefinitions, clientgoscheme.Scheme)
	shipped, err := shippedParamTypes()
	if err != nil {
		return nil, fmt.Errorf("typing celsched's own param kinds: %w", err)
	}
	e := &Environment{roots: map[string]*apiservercel.DeclType{}, schemas: schemas, shippedParams: shipped, memo: newMemoNumbers()}

	objects := []struct {
		variable string
		kind     string
		values   **valueConverter
	}{
		{PodVar, "Pod", &e.podValues},
		{NodeVar, "Node", &e.nodeValues},
		{NamespaceVar, "Namespace", &e.namespaceValues},
	}
	var declTypes []*apiservercel.DeclType
	var envOpts []cel.EnvOption
	for _, o := range objects {
		s, err := schemas.ResolveSchema(corev1.SchemeGroupVersion.WithKind(o.kind))
		if err != nil {
			return nil, fmt.Errorf("resolving the OpenAPI schema of %s: %w", o.kind, err)
		}
		declType := openapi.SchemaDeclType(s, true)
		if declType == nil {
			return nil, fmt.Errorf("no CEL type for the OpenAPI schema of %s", o.kind)
		}
		declType = declType.MaybeAssignTypeName("celsched." + o.variable)
		*o.values = newValueConverter(s)
		e.roots[o.variable] = declType
		declTypes = append(declTypes, declType)
		envOpts = append(envOpts, cel.Variable(o.variable, declType.CelType()))
	}
	nodeInfo := nodeInfoDeclType()
	e.roots[NodeInfoVar] = nodeInfo
	declTypes = append(declTypes, nodeInfo)
	envOpts = append(envOpts, cel.Variable(NodeInfoVar, nodeInfo.CelType()), ext.Bindings())
	podGroup, groupTypes := podGroupDeclType(true)
	e.roots[PodGroupVar] = podGroup
	declTypes = append(declTypes, groupTypes...)
	envOpts = append(envOpts, cel.Variable(PodGroupVar, podGroup.CelType()))

	base := environment.MustBaseEnvSet(compatibility)
	envSet, err := base.Extend(environment.VersionedOptions{
		// Always present, whatever the compatibility version.
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        envOpts,
		DeclTypes:         declTypes,
	})
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	e.envSet = envSet
	if e.placement, err = newPlacementEnvs(base); err != nil {
		return nil, err
	}
	if e.preemption, err = newPreemptionEnv(base, e.roots[PodVar], e.roots[NodeVar], e.roots[NamespaceVar]); err != nil {
		return nil, err
	}
	return e, nil
}

// openAPIDefinitions are Kubernetes' OpenAPI definitions with the types that
// have no OpenAPI v3 "type" (only a oneOf, which CEL cannot type) replaced as
// kube-openapi's v2 builder replaces them: resource.Quantity becomes a string
// (use quantity() on it), and IntOrString becomes x-kubernetes-int-or-string
// (dyn), as in CRD schemas. Without this, fields such as
// pod.spec.containers[].resources.limits would be undefined.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := generatedopenapi.GetOpenAPIDefinitions(ref)
	for name := range defs {
		def := defs[name]
		if len(def.Schema.Type) > 0 || len(def.Schema.OneOf) == 0 {
			continue
		}
		oneOf := sets.New[string]()
		for i := range def.Schema.OneOf {
			oneOf.Insert(def.Schema.OneOf[i].Type...)
		}
		switch {
		case oneOf.Has("integer") && oneOf.Has("string"):
			s := spec.Schema{}
			s.Description = def.Schema.Description
			s.AddExtension("x-kubernetes-int-or-string", true)
			def.Schema = s
		default:
			v2, ok := def.Schema.Extensions[common.ExtensionV2Schema].(spec.Schema)
			if !ok {
				continue
			}
			def.Schema = v2
		}
		defs[name] = def
	}
	return defs
}

// nodeInfoDeclType is the type of nodeInfo, the scheduler's view of a node.
func nodeInfoDeclType() *apiservercel.DeclType {
	resources := apiservercel.NewMapType(apiservercel.StringType, apiservercel.IntType, 64)
	podRef := apiservercel.NewObjectType("celsched.nodeInfo.pod", map[string]*apiservercel.DeclField{
		"namespace": apiservercel.NewDeclField("namespace", apiservercel.StringType, true, nil, nil),
		"name":      apiservercel.NewDeclField("name", apiservercel.StringType, true, nil, nil),
		"labels": apiservercel.NewDeclField("labels",
			apiservercel.NewMapType(apiservercel.StringType, apiservercel.StringType, 64), true, nil, nil),
	})
	return apiservercel.NewObjectType("celsched.nodeInfo", map[string]*apiservercel.DeclField{
		"allocatable": apiservercel.NewDeclField("allocatable", resources, true, nil, nil),
		"requested":   apiservercel.NewDeclField("requested", resources, true, nil, nil),
		"podCount":    apiservercel.NewDeclField("podCount", apiservercel.IntType, true, nil, nil),
		"pods": apiservercel.NewDeclField("pods",
			apiservercel.NewListType(podRef, celcost.MaxPodsPerNodeInfo), true, nil, nil),
	})
}

// policyEnv is the environment of one policy: the shared one plus the
// policy's own variables type, whose fields are added as its variables
// compile (as ValidatingAdmissionPolicy's composition does).
type policyEnv struct {
	envSet    *environment.EnvSet
	variables *apiservercel.DeclType
	// worst estimates with the largest sizes objects can have; typical with
	// lists and maps of at most celcost.TypicalMaxItems elements.
	worst, typical *celcost.Estimator
}

func (e *Environment) newPolicyEnv() (*policyEnv, error) {
	return e.newParamsPolicyEnv(apiservercel.DynType)
}

// newParamsPolicyEnv is newPolicyEnv with params of the given type.
func (e *Environment) newParamsPolicyEnv(params *apiservercel.DeclType) (*policyEnv, error) {
	variables := apiservercel.NewObjectType("celsched.variables", map[string]*apiservercel.DeclField{})
	declTypes := []*apiservercel.DeclType{variables}
	if params.IsObject() {
		declTypes = append(declTypes, params)
	}
	envSet, err := e.envSet.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable(VariablesVar, variables.CelType()), cel.Variable(ParamsVar, params.CelType())},
		DeclTypes:         declTypes,
	})
	if err != nil {
		return nil, fmt.Errorf("building the policy's CEL environment: %w", err)
	}
	roots := make(map[string]*apiservercel.DeclType, len(e.roots)+2)
	for k, v := range e.roots {
		roots[k] = v
	}
	roots[VariablesVar] = variables
	roots[ParamsVar] = params
	vars := celcost.Vars{Objects: []string{PodVar, NodeVar, NamespaceVar}, Params: ParamsVar, NodeInfo: NodeInfoVar}
	return &policyEnv{
		envSet:    envSet,
		variables: variables,
		worst:     celcost.NewEstimator(roots, vars, false),
		typical:   celcost.NewEstimator(roots, vars, true),
	}, nil
}

// addVariable declares variables.<name> with the given type for the
// expressions compiled after it.
func (p *policyEnv) addVariable(name string, t *cel.Type) {
	p.variables.Fields[name] = apiservercel.NewDeclField(name, declTypeOf(t), true, nil, nil)
}

// declTypeOf maps a CEL type to a DeclType, as the ValidatingAdmissionPolicy
// composition does: well-known simple types keep their sizes, the rest is dyn.
func declTypeOf(t *cel.Type) *apiservercel.DeclType {
	if t == nil {
		return apiservercel.DynType
	}
	for _, d := range []*apiservercel.DeclType{
		apiservercel.BoolType, apiservercel.IntType, apiservercel.UintType, apiservercel.DoubleType,
		apiservercel.StringType, apiservercel.BytesType, apiservercel.DurationType, apiservercel.TimestampType,
	} {
		if t.IsExactType(d.CelType()) {
			return d
		}
	}
	// Lists and maps built by a variable have no declared bound; assume
	// celcost.MaxPodsPerNodeInfo elements for estimates, and track at runtime every
	// expression that reads them (see references.unboundedVariable).
	d := apiservercel.NewSimpleTypeWithMinSize(t.String(), t, nil, 1)
	d.MaxElements = celcost.MaxPodsPerNodeInfo
	return d
}

// isScalar says whether values of the type have a size bounded by their
// declaration (everything but lists, maps and dyn built by variables).
func isScalar(t *cel.Type) bool {
	for _, d := range []*cel.Type{cel.BoolType, cel.IntType, cel.UintType, cel.DoubleType,
		cel.StringType, cel.BytesType, cel.DurationType, cel.TimestampType} {
		if t.IsExactType(d) {
			return true
		}
	}
	return false
}
