// Package preenqueue is the kube-scheduler PreEnqueue plugin of celsched:
// a pod enters the scheduling queue only when the preEnqueue rules of every
// SchedulingPolicy that matches it are true.
package preenqueue

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "CELPreEnqueue"

// ReasonSchedulingGated is the reason of the event and of the PodScheduled
// condition of a pod held by a preEnqueue rule: like a pod with scheduling
// gates, it is not in the scheduling queue.
const ReasonSchedulingGated = corev1.PodReasonSchedulingGated

// maxReported bounds how many held pods the plugin remembers having
// reported, so that each hold is reported once and not on every retry.
const maxReported = 10000

// PreEnqueue holds pods whose matching policies' preEnqueue rules are not
// all true. kube-scheduler says nothing about PreEnqueue rejections, so the
// plugin reports each hold itself, in the background: an event on the pod
// and its PodScheduled condition name the policy, the rule and its message.
type PreEnqueue struct {
	rt       *celplugins.Runtime
	client   kubernetes.Interface
	pods     corelisters.PodLister
	recorder events.EventRecorder

	queue    workqueue.TypedRateLimitingInterface[hold]
	reported *lru.Cache // pod UID -> last reported message
}

var (
	_ fwk.PreEnqueuePlugin  = &PreEnqueue{}
	_ fwk.EnqueueExtensions = &PreEnqueue{}
)

// hold is a report to write: the pod and why it is held.
type hold struct {
	namespace, name string
	uid             ktypes.UID
	message         string
}

// New builds the plugin and starts its reporter, which stops with ctx; use
// celplugins.Factory(rt, New) to register it.
func New(ctx context.Context, _ runtime.Object, h fwk.Handle, rt *celplugins.Runtime) (*PreEnqueue, error) {
	if err := rt.Attach(h); err != nil {
		return nil, err
	}
	pl := &PreEnqueue{
		rt:       rt,
		client:   h.ClientSet(),
		pods:     h.SharedInformerFactory().Core().V1().Pods().Lister(),
		recorder: h.EventRecorder(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[hold](),
			workqueue.TypedRateLimitingQueueConfig[hold]{Name: "celsched-preenqueue-reports"}),
		reported: lru.New(maxReported),
	}
	go pl.report(ctx)
	return pl, nil
}

// Name implements fwk.Plugin.
func (pl *PreEnqueue) Name() string { return Name }

// PreEnqueue evaluates the preEnqueue rules of the matching policies. An
// enforced rule that is false (or an error with failurePolicy Fail) holds
// the pod; an Audit one is only logged.
//
// The policies are matched as the pod's scheduling cycle matches them
// (Runtime.Queued): the cycle then reuses the conversion and the match. A
// match that does not end within the default time budget is not the
// cycle's to reuse; the policies with preEnqueue rules are then matched
// here alone, without a time budget, as preEnqueue rules are evaluated.
func (pl *PreEnqueue) PreEnqueue(ctx context.Context, pod *corev1.Pod) *fwk.Status {
	snapshot := pl.rt.Inputs.Policies.Snapshot()
	if !anyPreEnqueue(snapshot) {
		return nil
	}
	logger := klog.FromContext(ctx)
	m, err := pl.rt.Queued(ctx, pod)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if m != nil {
		var held *fwk.Status
		m.ByPolicy(func(p *engine.CompiledPolicy, results []engine.MatchResult) bool {
			if !p.HasPreEnqueue() {
				return true // a broken policy without rules to hold is PreFilter's
			}
			matched, d := p.PreEnqueueMatched(ctx, m.Pod, results)
			held = pl.decided(ctx, logger, pod, p, matched, &d)
			return held == nil
		})
		return held
	}
	in, err := pl.rt.Inputs.PodInput(pod)
	if err != nil {
		return fwk.AsStatus(err)
	}
	for _, p := range snapshot.Policies() {
		if !p.HasPreEnqueue() {
			continue // a broken policy without rules to hold is PreFilter's
		}
		matched, d := p.MatchAndPreEnqueue(ctx, in)
		if held := pl.decided(ctx, logger, pod, p, matched, &d); held != nil {
			return held
		}
	}
	return nil
}

// decided reports what a policy decided for the pod at preEnqueue and
// returns the status that holds it, nil when it is not held.
func (pl *PreEnqueue) decided(ctx context.Context, logger klog.Logger, pod *corev1.Pod, p *engine.CompiledPolicy, matched bool, d *engine.Decision) *fwk.Status {
	if !matched {
		return nil
	}
	pl.rt.Report.Count(d)
	pl.rt.Report.NoteErrors(ctx, 0, d, pod, "")
	if len(d.Ignored) > 0 {
		logger.V(4).Info("Ignoring preEnqueue errors (failurePolicy Ignore)", "pod", klog.KObj(pod), "policy", p.Name, "errs", d.Ignored)
	}
	switch {
	case d.Acts():
		msg := d.String()
		pl.enqueueReport(pod, msg)
		return celplugins.Status(d, msg)
	case d.WouldAct():
		if v := logger.V(2); v.Enabled() {
			v.Info("SchedulingPolicy would hold the pod (Audit)", "pod", klog.KObj(pod), "policy", p.Name, "reason", d.String())
		}
	}
	return nil
}

func anyPreEnqueue(s *engine.Snapshot) bool {
	for _, p := range s.Policies() {
		if p.HasPreEnqueue() {
			return true
		}
	}
	return false
}

// EventsToRegister implements fwk.EnqueueExtensions: a held pod is
// re-evaluated when a policy that may apply to it changes, when the
// labels of the pod or its namespace change, when its PodGroup is
// created or changes, and when another member of its group is added
// (GroupMemberEvents says why).
func (pl *PreEnqueue) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return append([]fwk.ClusterEventWithHint{
		pl.rt.Requeue.PolicyEvents(),
		pl.rt.Requeue.NamespaceEvents(),
		pl.rt.Requeue.PodLabelEvents(),
		pl.rt.Requeue.PodGroupEvents(),
	}, pl.rt.Requeue.GroupMemberEvents()...), nil
}

// enqueueReport queues a report unless this hold of the pod was reported.
func (pl *PreEnqueue) enqueueReport(pod *corev1.Pod, msg string) {
	if last, ok := pl.reported.Get(pod.UID); ok && last == msg {
		return
	}
	pl.reported.Add(pod.UID, msg)
	pl.queue.Add(hold{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, message: msg})
}

// report writes the queued reports until ctx is done.
func (pl *PreEnqueue) report(ctx context.Context) {
	go func() {
		<-ctx.Done()
		pl.queue.ShutDown()
	}()
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	for {
		h, shutdown := pl.queue.Get()
		if shutdown {
			return
		}
		if err := pl.write(ctx, h); err != nil {
			logger.V(2).Info("Reporting a held pod failed, retrying", "pod", klog.KRef(h.namespace, h.name), "err", err)
			pl.queue.AddRateLimited(h)
		} else {
			pl.queue.Forget(h)
		}
		pl.queue.Done(h)
	}
}

// write sets the pod's PodScheduled condition and records an event, unless
// the pod is gone or was scheduled meanwhile. The update carries the pod's
// resourceVersion, so a pod bound in between is never marked held.
func (pl *PreEnqueue) write(ctx context.Context, h hold) error {
	pod, err := pl.pods.Pods(h.namespace).Get(h.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the pod: %w", err)
	}
	if pod.UID != h.uid || pod.Spec.NodeName != "" {
		return nil
	}
	pod = pod.DeepCopy()
	podutil.UpdatePodCondition(&pod.Status, &corev1.PodCondition{
		Type:               corev1.PodScheduled,
		Status:             corev1.ConditionFalse,
		Reason:             ReasonSchedulingGated,
		Message:            h.message,
		LastTransitionTime: metav1.NewTime(time.Now()),
	})
	updated, err := pl.client.CoreV1().Pods(h.namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("updating the pod's status: %w", err)
	}
	pl.recorder.Eventf(updated, nil, corev1.EventTypeWarning, ReasonSchedulingGated, "PreEnqueue", h.message)
	return nil
}
