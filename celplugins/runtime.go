// Package celplugins holds what the CEL plugins of kube-scheduler share: the
// Runtime (Inputs: the policies and the converter that caches pod, node and
// namespace values; Reporter: metrics, error, slow and Audit logs;
// Requeuer: queueing hints and params events), the PolicyFeed that fills the
// registry from the scheduler's own SchedulingPolicy informer, the cycle
// state shared by the plugins, and the queueing hints. The plugins
// themselves are thin adapters in celplugins/preenqueue, celplugins/filter
// and celplugins/score; the semantics are the engine's Decisions.
package celplugins

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	"github.com/celsched/celsched/engine/metrics"
)

// Policies is where the plugins read the policies in force: one immutable
// snapshot per use. *engine.Registry is one; a dry run passes a fixed
// snapshot.
type Policies interface {
	Snapshot() *engine.Snapshot
}

// Runtime is what the CEL plugins of every profile share, in three parts
// with one job each: Inputs is what they read (the policies, the converted
// pod and nodes, namespaces, params), Report what they report (metrics,
// error, slow and Audit logs), Requeue what they requeue (queueing hints and
// params events). The plugins only read the policies; PolicyFeed writes
// them.
type Runtime struct {
	Inputs  *Inputs
	Report  *Reporter
	Requeue *Requeuer
	// EveryNode has CELFilter's PreFilter leave every node to Filter, so
	// that each node a policy refuses gets the policy's reason: the dry
	// run's evaluators set it. The scheduler's PreFilter may hand
	// kube-scheduler only the nodes the policies admit (filter.narrow).
	EveryNode bool
	// PercentageOfNodesToScore is the scheduler's (its configuration's;
	// 0: adaptive), for profiles without one: CELFilter's PreFilter
	// narrows the nodes when that saves kube-scheduler work
	// (filter.worthNarrowing), which depends on how many feasible nodes
	// it looks for.
	PercentageOfNodesToScore int32
	// QueuedBudget bounds the match that Queued makes of a pod the queue
	// adds (0: DefaultEvaluationBudget); a match that does not end within
	// it is not kept, and CELPreEnqueue matches its policies alone, as it
	// does with a negative QueuedBudget (Queued then makes no Match).
	QueuedBudget time.Duration

	once sync.Once
	// lastCause is the error the cycles' contexts end with at their
	// deadline (budgetCause). Key: the budget. Bound: one, the last
	// budget's. Invalidated by a cycle with another budget, which
	// replaces it. Written by Prepare; equal budgets make equal errors, so
	// concurrent writers race harmlessly.
	lastCause atomic.Pointer[budgetError]
}

// NewRuntime returns a runtime over policies and a converter.
func NewRuntime(policies Policies, converter *engine.Converter) *Runtime {
	in := &Inputs{Policies: policies, Converter: converter}
	return &Runtime{
		Inputs:  in,
		Report:  &Reporter{AuditLog: &audit.Log{}, Slow: &metrics.SlowLog{}, Errors: &metrics.ErrorLog{}},
		Requeue: &Requeuer{inputs: in},
	}
}

// Factory adapts a plugin constructor that needs the Runtime to
// kube-scheduler's PluginFactory, for app.WithPlugin or an out-of-tree
// registry.
func Factory[T fwk.Plugin](rt *Runtime, newPlugin func(context.Context, runtime.Object, fwk.Handle, *Runtime) (T, error)) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, h, rt)
	}
}

// Attach connects the runtime to a scheduler's informers, once for all
// plugins and profiles: namespaces are read from the scheduler's namespace
// informer, pod groups from its pod group state (unless the Inputs have
// theirs), and nodes and namespaces that are deleted leave the converter's
// caches, and so do the Matches of pods bound or deleted.
func (rt *Runtime) Attach(h fwk.Handle) error {
	var err error
	rt.once.Do(func() {
		podLister := h.SharedInformerFactory().Core().V1().Pods().Lister()
		rt.Requeue.activator.Store(&podActivator{activate: h.Activate, pods: func(namespace string) ([]*corev1.Pod, error) {
			if namespace == "" {
				return podLister.List(labels.Everything())
			}
			return podLister.Pods(namespace).List(labels.Everything())
		}})
		// A dry run's evaluator gives its cluster's groups.
		if rt.Inputs.PodGroups == nil {
			rt.Inputs.PodGroups, rt.Inputs.CycleGroups = LivePodGroups(h), CyclePodGroups(h)
		}
		nsInformer := h.SharedInformerFactory().Core().V1().Namespaces()
		rt.Inputs.UseNamespaces(nsInformer.Lister())
		if _, err = nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if ns, ok := tombstoned[*corev1.Namespace](obj); ok {
					rt.Inputs.forgetNamespace(ns.Name)
				}
			},
		}); err != nil {
			return
		}
		if _, err = h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if node, ok := tombstoned[*corev1.Node](obj); ok {
					rt.Inputs.Converter.ForgetNode(node.Name)
				}
			},
		}); err != nil {
			return
		}
		// A pod's kept Match (Inputs.Match) leaves when the pod is bound or
		// deleted: it has no cycle to come; so does its record as a refused
		// preemptor.
		_, err = h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				oldPod, okOld := oldObj.(*corev1.Pod)
				pod, ok := newObj.(*corev1.Pod)
				if ok && okOld && oldPod.Spec.NodeName == "" && pod.Spec.NodeName != "" {
					rt.Inputs.forgetPod(pod.UID)
					rt.Requeue.PreemptorDone(pod.UID)
				}
			},
			DeleteFunc: func(obj any) {
				if pod, ok := tombstoned[*corev1.Pod](obj); ok {
					rt.Inputs.forgetPod(pod.UID)
					rt.Requeue.PreemptorDone(pod.UID)
				}
			},
		})
	})
	if err != nil {
		return fmt.Errorf("watching nodes and namespaces: %w", err)
	}
	return nil
}

// tombstoned returns the object of a delete event, which may come wrapped
// in a DeletedFinalStateUnknown.
func tombstoned[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}
