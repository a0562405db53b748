package controllers

import (
	"context"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/engine"
)

// crdLookupTimeout bounds the read of a param kind's CRD by the webhook.
const crdLookupTimeout = time.Second

// LiveParamTypes types params from the CustomResourceDefinition of a custom
// param kind, read from the API server when the webhook compiles a policy
// (engine.ParamTypes): a misspelt params field is then denied, with its
// field path and CEL position. Built-in kinds (ConfigMap) are the engine's;
// a kind it cannot read stays dyn, with the engine's warning.
type LiveParamTypes struct {
	// Reader reads CustomResourceDefinitions (uncached: the webhook is
	// called rarely, and the manager does not watch CRDs).
	Reader client.Reader
	Mapper meta.RESTMapper
}

var _ engine.ParamTypes = &LiveParamTypes{}

// ParamType implements engine.ParamTypes.
func (l *LiveParamTypes) ParamType(gvk schema.GroupVersionKind) (*apiservercel.DeclType, bool) {
	if gvk.Group == "" || l.Reader == nil || l.Mapper == nil {
		return nil, false // core kinds have no CRD
	}
	mapping, err := l.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), crdLookupTimeout)
	defer cancel()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := l.Reader.Get(ctx, client.ObjectKey{Name: mapping.Resource.Resource + "." + gvk.Group}, u); err != nil {
		return nil, false
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		return nil, false
	}
	types := engine.CRDParamTypes{}
	if err := types.Add(crd); err != nil {
		return nil, false
	}
	return types.ParamType(gvk)
}
