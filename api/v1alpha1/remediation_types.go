package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RemediationAction is what remediation does to a drifted pod.
// +kubebuilder:validation:Enum=Evict
type RemediationAction string

// RemediationEvict evicts a drifted pod through the Eviction API
// (policy/v1), so that PodDisruptionBudgets hold; its controller creates
// the replacement, which the scheduler places under the policy.
const RemediationEvict RemediationAction = "Evict"

// Remediation asks the leader to move the pods the policy's enforced
// filters refuse on the node they run on (status.drift). It is off unless
// set, and the manager's --remediation=false turns it off for every policy.
// Only pods owned by a controller that replaces them (ReplicaSet,
// StatefulSet, Job, ReplicationController) are evicted. The replacement
// is judged as its controller will create it (the controller's pod
// template: nodeName, nodeSelector, affinity, tolerations,
// schedulerName): a pod is evicted only when that replacement is placed
// by a profile that enforces the policy, is not pinned to a node the
// policy refuses, and the scheduler's framework finds it a node under the
// policies in force. After an eviction the leader checks where the
// workload's replacement landed: one that landed on a refused node (or
// none within ReplacementDeadline) stops the remediation of that workload
// (ReplacementRefused) until its template or the policy changes. Never
// more than maxUnavailable of a workload's pods are unavailable at once,
// counting the evicted ones, and the rate is shared between namespaces:
// the pods of the namespace evicted from longest ago go first.
type Remediation struct {
	// action is what is done to a drifted pod: Evict.
	// +required
	Action RemediationAction `json:"action"`

	// maxUnavailable is how many pods of one workload (the pods of one
	// controller) may be unavailable (not Ready, or being deleted) when a
	// pod of it is evicted: an integer, or a percentage of the workload's
	// pods (rounded down, at least 1). Defaults to 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// rate is the most pods of the policy evicted per minute, spaced
	// evenly (one every minute/rate). Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	Rate int32 `json:"rate,omitempty"`

	// minAge is how long a pod must have been running (since its
	// creation) before it is evicted; pods younger than that wait.
	// Defaults to 0.
	// +optional
	MinAge *metav1.Duration `json:"minAge,omitempty"`
}

// ReplacementDeadline is how long after an eviction the workload's
// replacement has to land on a node the policy admits before the
// workload's remediation stops (ReplacementRefused).
const ReplacementDeadline = 5 * time.Minute

// MaxDriftedPods bounds status.drift.pods.
const MaxDriftedPods = 10

// DriftStatus is what the leader keeps of the running pods that the
// policy's enforced filters now refuse on their node, and what its
// remediation did about them.
type DriftStatus struct {
	// observedGeneration is the generation of the policy the pods were
	// evaluated with.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// count is the number of running pods (bound, not terminating) that
	// the policy's enforced filters refuse on their node.
	Count int32 `json:"count"`

	// pods are the first of them, by namespace and name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Pods []DriftedPod `json:"pods,omitempty"`

	// since is when the count last went from 0 to more.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// lastUpdateTime is when the leader last wrote status.drift.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`

	// remediation is what spec.remediation did, while it is set.
	// +optional
	Remediation *RemediationStatus `json:"remediation,omitempty"`
}

// DriftedPod is a running pod the policy refuses on its node.
type DriftedPod struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// message is the policy's reason for refusing the node.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// placedBy says who placed the pod: Profile (one of the scheduler's
	// profiles) or OtherScheduler (another scheduler, or none: it was
	// created with spec.nodeName).
	// +optional
	PlacedBy PodPlacement `json:"placedBy,omitempty"`
	// notEvicted is why remediation does not evict the pod (yet), when
	// set: a RemediationBlockReason.
	// +optional
	NotEvicted RemediationBlockReason `json:"notEvicted,omitempty"`
}

// RemediationBlockReason says why a drifted pod is not evicted.
type RemediationBlockReason string

// The reasons a drifted pod is not evicted.
const (
	// BlockedNoController: the pod has no controller that would replace
	// it (a bare pod, or a DaemonSet's, which comes back on its node).
	BlockedNoController RemediationBlockReason = "NoController"
	// BlockedNoFeasibleNode: the scheduler's framework finds the
	// replacement no node under the policies in force.
	BlockedNoFeasibleNode RemediationBlockReason = "NoFeasibleNode"
	// BlockedTooYoung: the pod is younger than minAge.
	BlockedTooYoung RemediationBlockReason = "TooYoung"
	// BlockedBudget: its workload has maxUnavailable pods unavailable.
	BlockedBudget RemediationBlockReason = "WorkloadBudget"
	// BlockedDisruptionBudget: the Eviction API refused it (a
	// PodDisruptionBudget).
	BlockedDisruptionBudget RemediationBlockReason = "DisruptionBudget"
	// BlockedRate: the policy's rate of evictions is used up for now.
	BlockedRate RemediationBlockReason = "Rate"
	// BlockedReplacementPinned: the pod's controller would create its
	// replacement with spec.nodeName set to a node the policy refuses
	// (the template pins it): no scheduler would place it elsewhere.
	BlockedReplacementPinned RemediationBlockReason = "ReplacementPinned"
	// BlockedOtherScheduler: the replacement would be placed by a
	// scheduler (its template's schedulerName) that does not enforce the
	// policy.
	BlockedOtherScheduler RemediationBlockReason = "ReplacementOtherScheduler"
	// BlockedReplacementRefused: after an eviction, a pod of the same
	// workload created since came back to the node the policy refuses
	// that the evicted pod was on (or no replacement landed within
	// ReplacementDeadline): remediation of that workload stopped (its
	// circuit breaker is open) until the workload's template or the
	// policy changes.
	BlockedReplacementRefused RemediationBlockReason = "ReplacementRefused"
)

// DriftScope says which running pods a policy's drift covers.
type DriftScope string

const (
	// DriftAllPods: every running pod the policy matches, whatever its
	// schedulerName, including pods created with spec.nodeName.
	DriftAllPods DriftScope = "AllPods"
	// DriftProfilePods: only the pods of the scheduler's profiles.
	DriftProfilePods DriftScope = "ProfilePods"
)

// PodPlacement says who placed a running pod.
type PodPlacement string

const (
	// PlacedByProfile: the pod's schedulerName is one of the
	// scheduler's profiles.
	PlacedByProfile PodPlacement = "Profile"
	// PlacedByOtherScheduler: another scheduler placed the pod (its
	// schedulerName is none of the profiles'), or it was created with
	// spec.nodeName: no celsched profile judged it.
	PlacedByOtherScheduler PodPlacement = "OtherScheduler"
)

// RemediationStatus is what remediation did.
type RemediationStatus struct {
	// active is false while remediation does not act: the policy is not
	// enforced, its rollout is paused, or the manager's --remediation is
	// false; reason says which.
	Active bool `json:"active"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
	// evicted counts the pods evicted since remediation was set.
	// +optional
	Evicted int64 `json:"evicted,omitempty"`
	// lastEvictionTime is when the last pod was evicted.
	// +optional
	LastEvictionTime *metav1.Time `json:"lastEvictionTime,omitempty"`
}

// ConditionDrifted is True while running pods are on nodes the policy's
// enforced filters refuse (status.drift.count > 0), with reason
// PodsDrifted; False with reason NoDrift otherwise. kstatus does not read
// it.
const (
	ConditionDrifted  = "Drifted"
	ReasonPodsDrifted = "PodsDrifted"
	ReasonNoDrift     = "NoDrift"
)
