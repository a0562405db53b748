// Package controllers holds the SchedulingPolicy reconciler, which compiles
// policies into the engine's registry and writes their status.
//
// The RBAC markers below are the permissions of the celsched manager on its
// own API; config/rbac/role.yaml is generated from them by `make manifests`.
// The scheduler's permissions (pods, bindings, nodes, namespaces, events,
// ...) come from the system:kube-scheduler and system:volume-scheduler
// ClusterRoles (config/rbac/scheduler_role_binding.yaml). The leader
// election Lease is the manager's own, in its namespace
// (config/rbac/leader_election_role.yaml).
//
// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=schedulingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=schedulingpolicies/status,verbs=get;update;patch
package controllers
