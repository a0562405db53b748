package celplugins

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/celsched/celsched/engine"
)

// SignatureKey is the key of the CEL plugins' signature fragment: CELFilter
// and CELScore return the same one, and kube-scheduler keeps one.
const SignatureKey = "celsched.io/SchedulingPolicies"

// signed is the last pod signed, so that the filter and the score plugin
// sign it once (kube-scheduler signs one pod at a time, asking every
// plugin).
type signed struct {
	uid             ktypes.UID
	resourceVersion string
	snapshot        *engine.Snapshot
	fragments       []fwk.SignFragment
	status          *fwk.Status
}

// SignPod implements fwk.SignPlugin for CELFilter and CELScore, so that the
// profile keeps kube-scheduler's opportunistic batching. The signature is
// the pod's namespace and every field a policy may read but its name
// (engine.Snapshot.Signature): kube-scheduler keeps it while the pod waits,
// and it stays true while policies, params objects and namespaces change.
// It declines (Unschedulable) when a policy that may apply reads the pod's
// name, the whole pod or nodeInfo.pods.
func (in *Inputs) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	snapshot := in.Policies.Snapshot()
	if last := in.lastSigned.Load(); last != nil && last.uid == pod.UID && last.resourceVersion == pod.ResourceVersion &&
		last.snapshot == snapshot && pod.ResourceVersion != "" {
		return last.fragments, last.status
	}
	s := &signed{uid: pod.UID, resourceVersion: pod.ResourceVersion, snapshot: snapshot}
	if sig, ok := snapshot.Signature(pod); ok {
		s.fragments = []fwk.SignFragment{{Key: SignatureKey, Value: sig}}
	} else {
		s.status = fwk.NewStatus(fwk.Unschedulable, "a SchedulingPolicy that may apply reads the pod's name, the whole pod or nodeInfo.pods")
	}
	in.lastSigned.Store(s)
	return s.fragments, s.status
}

// lastSigned is kept in the Inputs.
type lastSigned = atomic.Pointer[signed]
