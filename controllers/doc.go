// Package controllers holds what writes SchedulingPolicy objects and acts
// on the cluster: the status reconciler (Ready and Stalled, warnings, from
// the policies the scheduler compiled), the Audit status writer, the
// rollout controller, the drift tracker and its reconciler with
// remediation (DriftController: status.drift, evictions, the circuit
// breaker per workload), the OpenReports writer, and the validating
// webhook with its own compiler. Controllers never feed the scheduler: its
// registry has one writer, the scheduler's own informer
// (celplugins.PolicyFeed).
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
//
// The scheduler reads TenantPlacements, celsched's own param kind, as the
// params of the policies that name it (celplugins.ParamsStore); other param
// kinds are granted through the celsched-params ClusterRole.
// +kubebuilder:rbac:groups=scheduling.celsched.io,resources=tenantplacements,verbs=get;list;watch
//
// The webhook reads the CustomResourceDefinition of a custom param kind to
// type params (LiveParamTypes); only get, by name.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get
package controllers
