// Package v1alpha1 contains the API of the scheduling.celsched.io group:
// SchedulingPolicy, and TenantPlacement (per-tenant params).
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.celsched.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "scheduling.celsched.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &SchedulingPolicy{}, &SchedulingPolicyList{}, &TenantPlacement{}, &TenantPlacementList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
