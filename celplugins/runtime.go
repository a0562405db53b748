// Package celplugins holds what the CEL plugins of kube-scheduler share: the
// Runtime (the policies, the converter that caches node and namespace
// values, metrics and the Audit log), the PolicyFeed that fills the
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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

// Runtime is what the plugins share: the policies, the converter that
// caches node and namespace values, the metrics and the Audit log. One
// Runtime serves every profile. It only reads the policies; PolicyFeed
// writes them.
type Runtime struct {
	Policies  Policies
	Converter *engine.Converter
	// AuditLog collects what Audit policies would have done, for their
	// status.
	AuditLog *audit.Log
	// Slow keeps the rules that a cycle's time budget cut off, for the
	// policies' status.
	Slow *metrics.SlowLog
	// Errors keeps each policy's last evaluation error, for its status
	// (pods see only CEL's own error texts).
	Errors *metrics.ErrorLog
	// Notify, when set, is told the name of a policy whose status has news
	// (a rule cut off by the time budget). It must not block.
	Notify func(name string)
	// Params, when set, finds the params objects of parameterized
	// policies (the scheduler's ParamsStore); without it they follow their
	// failurePolicy.
	Params engine.ParamsResolver

	counters metrics.Counters
	// tallies are the current cycle's tallies of filter and score
	// decisions (Tally).
	tallies [2]atomic.Pointer[metrics.Tally]
	// lastSigned is the last pod signed. Key: pod UID, resourceVersion and
	// policy snapshot. Bound: one. Written by SignPod.
	lastSigned lastSigned
	once       sync.Once
	namespaces *namespaces
	// activator requeues pods (the scheduling queue, through the first
	// framework handle attached), and pods lists them: for params events.
	activator atomic.Pointer[podActivator]
}

// podActivator is what ParamsChanged needs of the scheduler.
type podActivator struct {
	activate func(logger klog.Logger, pods map[string]*corev1.Pod)
	// pods lists the pods of a namespace, or of all when it is empty.
	pods func(namespace string) ([]*corev1.Pod, error)
}

// NewRuntime returns a runtime over policies and a converter.
func NewRuntime(policies Policies, converter *engine.Converter) *Runtime {
	return &Runtime{Policies: policies, Converter: converter, AuditLog: &audit.Log{}, Slow: &metrics.SlowLog{}, Errors: &metrics.ErrorLog{}}
}

// NoteErrors records the errors of a decision of the cycle: the last one
// per policy for its status (EvaluationError), and a rule that the cycle's
// time budget cut off while it ran (the slow rule) in
// celsched_policy_time_budget_exceeded_total, the log and the policy's
// status (Slow).
func (rt *Runtime) NoteErrors(ctx context.Context, budget time.Duration, d *engine.Decision, pod *corev1.Pod, node string) {
	if d.Err == nil && len(d.Ignored) == 0 {
		return
	}
	if rt.Errors.Record(d, time.Now()) && rt.Notify != nil {
		klog.FromContext(ctx).V(2).Info("A SchedulingPolicy rule failed", "pod", klog.KObj(pod), "node", node, "policy", d.Policy.Name, "err", d.Err, "ignored", d.Ignored)
		rt.Notify(d.Policy.Name)
	}
	err := metrics.CutOff(d)
	if err == nil {
		return
	}
	klog.FromContext(ctx).Info("A SchedulingPolicy rule was cut off by the cycle's CEL time budget", "pod", klog.KObj(pod), "node", node,
		"policy", d.Policy.Name, "budget", budget, "err", err)
	rt.Slow.Record(d, err, pod.Namespace+"/"+pod.Name, node, budget, time.Now())
	if rt.Notify != nil {
		rt.Notify(d.Policy.Name)
	}
}

// Count counts a decision's rule evaluations in celsched_policy_evaluations_total.
func (rt *Runtime) Count(d *engine.Decision) { rt.counters.Count(d) }

// Tally returns the tally of a new cycle's decisions at point (PointFilter
// or PointScore) for policies, and flushes the previous cycle's: the
// plugins flush a cycle's tally when its evaluations are done (Reserve,
// NormalizeScore), and a cycle that ended otherwise (no node fits, an
// error) is flushed here. kube-scheduler runs one scheduling cycle at a
// time, so the previous cycle's evaluations are done.
func (rt *Runtime) Tally(point engine.Point, policies []*engine.CompiledPolicy) *metrics.Tally {
	t := rt.counters.Tally(point, policies)
	i := 0
	if point == engine.PointScore {
		i = 1
	}
	rt.tallies[i].Swap(t).Flush()
	return t
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
// informer, and nodes and namespaces that are deleted leave the converter's
// caches.
func (rt *Runtime) Attach(h fwk.Handle) error {
	var err error
	rt.once.Do(func() {
		podLister := h.SharedInformerFactory().Core().V1().Pods().Lister()
		rt.activator.Store(&podActivator{activate: h.Activate, pods: func(namespace string) ([]*corev1.Pod, error) {
			if namespace == "" {
				return podLister.List(labels.Everything())
			}
			return podLister.Pods(namespace).List(labels.Everything())
		}})
		nsInformer := h.SharedInformerFactory().Core().V1().Namespaces()
		rt.UseNamespaces(nsInformer.Lister())
		if _, err = nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if ns, ok := tombstoned[*corev1.Namespace](obj); ok {
					rt.Converter.ForgetNamespace(ns.Name)
					rt.namespaces.forget(ns.Name)
				}
			},
		}); err != nil {
			return
		}
		_, err = h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if node, ok := tombstoned[*corev1.Node](obj); ok {
					rt.Converter.ForgetNode(node.Name)
				}
			},
		})
	})
	if err != nil {
		return fmt.Errorf("watching nodes and namespaces: %w", err)
	}
	return nil
}

// UseNamespaces reads the pods' namespaces from a lister: the scheduler's
// (Attach), or a test's.
func (rt *Runtime) UseNamespaces(lister interface {
	Get(name string) (*corev1.Namespace, error)
}) {
	rt.namespaces = &namespaces{lister: lister, seen: map[string]*corev1.Namespace{}}
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

// PodInput converts a pod and its namespace for the engine. A namespace
// that is not known yet leaves the namespace unset: expressions that read
// it fail and follow their policy's failurePolicy.
func (rt *Runtime) PodInput(pod *corev1.Pod) (*engine.PodInput, error) {
	ns, err := rt.namespaces.get(pod.Namespace)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
	}
	in, err := rt.Converter.Pod(pod, ns)
	if err != nil {
		return nil, err
	}
	in.Params = rt.Params
	return in, nil
}

// namespaces is the scheduler's namespace lister, plus the namespace
// versions that queueing hints saw before the lister did: a pod requeued
// because its namespace's labels changed must be evaluated against the new
// labels, although the scheduler's dynamic informer (which fires the hint)
// and its typed informer (behind the lister) may deliver the change in
// either order.
type namespaces struct {
	lister interface {
		Get(name string) (*corev1.Namespace, error)
	}
	mu   sync.Mutex
	seen map[string]*corev1.Namespace
}

func (n *namespaces) get(name string) (*corev1.Namespace, error) {
	ns, err := n.lister.Get(name)
	n.mu.Lock()
	defer n.mu.Unlock()
	seen, ok := n.seen[name]
	if !ok {
		return ns, err
	}
	if err == nil && !newerVersion(seen, ns) {
		delete(n.seen, name) // the lister caught up
		return ns, nil
	}
	return seen, nil
}

// ObserveNamespace records a namespace version the scheduler's dynamic
// informer delivered, for pods evaluated before the typed lister has it
// (PolicyFeed.Namespace).
func (rt *Runtime) ObserveNamespace(ns *corev1.Namespace) {
	if rt.namespaces != nil {
		rt.namespaces.observe(ns)
	}
}

// observe records a namespace version seen in an event.
func (n *namespaces) observe(ns *corev1.Namespace) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.seen[ns.Name]; !ok || newerVersion(ns, old) {
		n.seen[ns.Name] = ns
	}
}

func (n *namespaces) forget(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.seen, name)
}

// newerVersion says whether a is a later version of the same namespace
// than b.
func newerVersion(a, b *corev1.Namespace) bool {
	if a.UID != b.UID {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion)
	return err == nil && c > 0
}
