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
// match the policies once for it (kube-scheduler signs one pod at a time).
type signed struct {
	uid             ktypes.UID
	resourceVersion string
	snapshot        *engine.Snapshot
	fragments       []fwk.SignFragment
	status          *fwk.Status
	// paramsVersion is the params store's version the signature was made
	// with: a params change changes the signature of the pods it concerns.
	paramsVersion uint64
}

// paramsVersion is the version of the params objects (ParamsStore.Version),
// 0 when the resolver has none.
func (rt *Runtime) paramsVersion() uint64 {
	if v, ok := rt.Params.(interface{ Version() uint64 }); ok {
		return v.Version()
	}
	return 0
}

// SignPod implements fwk.SignPlugin for CELFilter and CELScore, so that the
// profile keeps kube-scheduler's opportunistic batching: the signature is
// the policies that apply to the pod and what their filters, scores and
// variables read of it (engine.PodSignature). It declines (Unschedulable)
// when no signature is correct: a policy that applies reads nodeInfo.pods,
// or the pod as a whole.
func (rt *Runtime) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	snapshot := rt.Policies.Snapshot()
	paramsVersion := rt.paramsVersion()
	if last := rt.lastSigned.Load(); last != nil && last.uid == pod.UID && last.resourceVersion == pod.ResourceVersion &&
		last.snapshot == snapshot && last.paramsVersion == paramsVersion && pod.ResourceVersion != "" {
		return last.fragments, last.status
	}
	s := &signed{uid: pod.UID, resourceVersion: pod.ResourceVersion, snapshot: snapshot, paramsVersion: paramsVersion}
	in, err := rt.PodInput(pod)
	switch {
	case err != nil:
		s.status = fwk.AsStatus(err)
	default:
		if sig, ok := snapshot.Signature(ctx, in); ok {
			s.fragments = []fwk.SignFragment{{Key: SignatureKey, Value: sig}}
		} else {
			s.status = fwk.NewStatus(fwk.Unschedulable, "a SchedulingPolicy that applies reads nodeInfo.pods or the whole pod")
		}
	}
	rt.lastSigned.Store(s)
	return s.fragments, s.status
}

// lastSigned is kept in the Runtime.
type lastSigned = atomic.Pointer[signed]
