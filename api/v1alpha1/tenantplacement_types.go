package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantPlacementSpec is where a tenant's pods may run.
type TenantPlacementSpec struct {
	// zones are the zones (node label topology.kubernetes.io/zone) the
	// tenant's pods may use.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	Zones []string `json:"zones"`

	// pools are the node pools (node label celsched.io/pool) the tenant's
	// pods may use; empty or omitted means any pool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	Pools []string `json:"pools,omitempty"`
}

// TenantPlacement holds one tenant's placement, in the tenant's namespace,
// as the params of a parameterized SchedulingPolicy (paramKind
// scheduling.celsched.io/v1alpha1 TenantPlacement, a paramRef without a
// namespace: the pod's own). It is celsched's home for per-tenant params:
// the built-in admin and edit roles do not grant writing it (its RBAC is
// not aggregated to them), so a tenant cannot widen its own placement; the
// platform team writes it (ClusterRole celsched-tenantplacement-editor).
// docs/security.md says who can change what.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=celsched
// +kubebuilder:printcolumn:name="Zones",type=string,JSONPath=`.spec.zones`
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.pools`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenantPlacement struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the tenant's placement.
	// +required
	Spec TenantPlacementSpec `json:"spec"`
}

// TenantPlacementList is a list of TenantPlacements.
// +kubebuilder:object:root=true
type TenantPlacementList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the TenantPlacements.
	Items []TenantPlacement `json:"items"`
}
