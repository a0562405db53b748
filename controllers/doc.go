// Package controllers holds the SchedulingPolicy reconciler, which compiles
// policies into the engine's registry and writes their status.
//
// The RBAC markers below are the permissions of the celsched manager on its
// own API; config/rbac/role.yaml is generated from them by `make manifests`.
// The scheduler's permissions come from the system:kube-scheduler and
// system:volume-scheduler ClusterRoles (config/rbac/scheduler_role_binding.yaml).
//
// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=schedulingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=schedulingpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
package controllers
