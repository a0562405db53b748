package celplugins

import (
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

// PolicyGVR is the resource of SchedulingPolicy, as the scheduler's dynamic
// informer watches it (SchedulingPolicyResource).
var PolicyGVR = schedv1alpha1.GroupVersion.WithResource("schedulingpolicies")

// NamespaceGVR is the resource of Namespace, as the scheduler's dynamic
// informer watches it (NamespaceResource).
var NamespaceGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// PolicyFeed is the one writer of a Registry: it applies the events of the
// scheduler's own SchedulingPolicy informer, in the order the informer
// delivers them.
//
// Ordering: the feed runs inside the event handler that kube-scheduler adds
// to that informer for its queueing hints (WrapInformers), before the
// handler: a pod requeued by a policy event is evaluated against a registry
// that already holds that event. And the handler's registration syncs only
// once the feed has compiled the informer's initial list, so a scheduler
// that waits for its handlers (Scheduler.WaitForHandlersSync) never
// schedules before every stored policy is compiled.
type PolicyFeed struct {
	Registry *engine.Registry
	// Compiled, when set, is told the name of each policy the feed
	// compiled or removed (e.g. to write its status). It must not block.
	Compiled func(name string)
	// Namespace, when set, is given each Namespace version the scheduler's
	// dynamic namespace informer delivers, before its queueing hints run
	// (Runtime.ObserveNamespace: a pod requeued because its namespace's
	// labels changed is evaluated with the new labels, even when the typed
	// namespace lister has not caught up).
	Namespace func(*corev1.Namespace)
	// Params, when set, is given the registry's snapshot after each
	// policy event, to watch the param kinds the policies name
	// (ParamsStore.Sync).
	Params interface{ Sync(*engine.Snapshot) }
	// Preemptors, when set, is told of each policy event, to requeue the
	// pods whose preemption a victim rule refused (Requeuer.PreemptorsChanged).
	Preemptors interface{ PreemptorsChanged(why string) }
	Logger     klog.Logger

	attached atomic.Bool
}

// Attached says whether a handler of the wrapped informer factory carries
// the feed (WrapInformers): whether the scheduler watches SchedulingPolicies.
func (f *PolicyFeed) Attached() bool { return f.attached.Load() }

// Handler returns an event handler that only feeds the registry, for a
// scheduler none of whose profiles runs the CEL plugins (so that it adds no
// handler of its own to wrap).
func (f *PolicyFeed) Handler() cache.ResourceEventHandler {
	return f.wrap(cache.ResourceEventHandlerDetailedFuncs{})
}

// WrapInformers returns factory with the SchedulingPolicy (and Namespace)
// informers' event handlers wrapped so that the feed sees each event before
// them.
func (f *PolicyFeed) WrapInformers(factory dynamicinformer.DynamicSharedInformerFactory) dynamicinformer.DynamicSharedInformerFactory {
	return &feedFactory{DynamicSharedInformerFactory: factory, feed: f}
}

// wrap returns h preceded by the feed.
func (f *PolicyFeed) wrap(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			f.apply(obj)
			h.OnAdd(obj, initial)
		},
		UpdateFunc: func(oldObj, newObj any) {
			f.apply(newObj)
			h.OnUpdate(oldObj, newObj)
		},
		DeleteFunc: func(obj any) {
			f.remove(obj)
			h.OnDelete(obj)
		},
	}
}

func (f *PolicyFeed) apply(obj any) {
	policy, err := convert[schedv1alpha1.SchedulingPolicy](obj)
	if err != nil || policy == nil {
		// The API server validated the object against the CRD's schema,
		// so this cannot happen short of a version skew; the previous
		// version, if any, stays in force.
		f.Logger.Error(err, "Reading a SchedulingPolicy event; the previous version stays in force", "object", fmt.Sprintf("%T", obj))
		return
	}
	start := time.Now()
	before := f.Registry.Snapshot().Get(policy.Name)
	if compiled := f.Registry.Upsert(policy); compiled != before {
		f.Logger.V(2).Info("SchedulingPolicy compiled", "policy", policy.Name, "generation", policy.Generation,
			"errors", len(compiled.Errors), "warnings", len(compiled.Warnings), "duration", time.Since(start))
	}
	f.notify(policy.Name)
}

func (f *PolicyFeed) remove(obj any) {
	obj, _ = tombstoned[any](obj)
	var name string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		name = o.GetName()
	case *schedv1alpha1.SchedulingPolicy:
		name = o.Name
	default:
		f.Logger.Error(nil, "Unexpected SchedulingPolicy delete event", "object", fmt.Sprintf("%T", obj))
		return
	}
	if f.Registry.Delete(name) {
		f.Logger.V(2).Info("SchedulingPolicy removed", "policy", name)
	}
	f.notify(name)
}

func (f *PolicyFeed) notify(name string) {
	if f.Params != nil {
		f.Params.Sync(f.Registry.Snapshot())
	}
	if f.Preemptors != nil {
		f.Preemptors.PreemptorsChanged("SchedulingPolicy " + name + " changed")
	}
	if f.Compiled != nil {
		f.Compiled(name)
	}
}

// feedFactory is a dynamic informer factory whose SchedulingPolicy informer
// puts the feed before every event handler added to it.
type feedFactory struct {
	dynamicinformer.DynamicSharedInformerFactory
	feed *PolicyFeed
}

func (f *feedFactory) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	inf := f.DynamicSharedInformerFactory.ForResource(gvr)
	switch {
	case gvr == PolicyGVR:
		return &feedGenericInformer{GenericInformer: inf, wrap: f.feed.wrap, attached: &f.feed.attached}
	case gvr == NamespaceGVR && f.feed.Namespace != nil:
		return &feedGenericInformer{GenericInformer: inf, wrap: f.feed.wrapNamespaces, attached: &atomic.Bool{}}
	default:
		return inf
	}
}

type feedGenericInformer struct {
	informers.GenericInformer
	wrap     func(cache.ResourceEventHandler) cache.ResourceEventHandler
	attached *atomic.Bool
}

func (g *feedGenericInformer) Informer() cache.SharedIndexInformer {
	return &feedInformer{SharedIndexInformer: g.GenericInformer.Informer(), wrap: g.wrap, attached: g.attached}
}

type feedInformer struct {
	cache.SharedIndexInformer
	wrap     func(cache.ResourceEventHandler) cache.ResourceEventHandler
	attached *atomic.Bool
}

func (i *feedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.attached.Store(true)
	return i.SharedIndexInformer.AddEventHandler(i.wrap(h))
}

func (i *feedInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	i.attached.Store(true)
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(i.wrap(h), resync)
}

func (i *feedInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	i.attached.Store(true)
	return i.SharedIndexInformer.AddEventHandlerWithOptions(i.wrap(h), opts)
}

// wrapNamespaces returns h preceded by giving the namespace to Namespace.
func (f *PolicyFeed) wrapNamespaces(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	observe := func(obj any) {
		ns, err := convert[corev1.Namespace](obj)
		if err != nil || ns == nil {
			f.Logger.Error(err, "Reading a Namespace event", "object", fmt.Sprintf("%T", obj))
			return
		}
		f.Namespace(ns)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			observe(obj)
			h.OnAdd(obj, initial)
		},
		UpdateFunc: func(oldObj, newObj any) {
			observe(newObj)
			h.OnUpdate(oldObj, newObj)
		},
		DeleteFunc: h.OnDelete,
	}
}
