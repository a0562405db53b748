package celplugins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/celsched/celsched/engine"
)

// defaultKindRetry is how long a param kind that the API server does not
// serve (its CRD is missing) is remembered as missing before the store
// looks it up again.
const defaultKindRetry = 5 * time.Second

// ParamsStore is the scheduler's view of the params objects of
// parameterized policies: one dynamic informer per param kind that a
// policy names, started when the first policy names the kind and stopped
// when the last one stops naming it. Informers of kube-scheduler's dynamic
// informer factory cannot be stopped one by one, so the store owns its
// informers (dynamicinformer.NewFilteredDynamicInformer, one stop channel
// each). Each object version is converted to a CEL value once, on first
// use, and the policies bound to it are kept with it.
//
// Its kinds are written by the store's own sync only: Sync, which the
// PolicyFeed calls after each policy event, as the registry is written, and
// the retry of kinds found not served, which Sync arms. The plugins only
// read it (Resolve, Bound, Namespace, KindError start nothing).
//
// What an answer read has a version (paramsReads): a Match records the
// versions of the parts of the store its pod's bindings read, and is kept
// while none of them moves. The parts are a param kind as a whole
// (paramKind.version), the objects of one namespace of the kind or one
// object (paramKind.scopes), and, for a kind not watched yet, the set of
// kinds watched (watched).
type ParamsStore struct {
	Env    *engine.Environment
	Client dynamic.Interface
	// Mapper maps a param kind to its resource and scope; a kind it does
	// not know is not served (its policies follow their failurePolicy and
	// are not Ready).
	Mapper meta.RESTMapper
	// Changed, when set, is told each params object that was added,
	// updated or deleted, after the store sees it (the queueing: see
	// Requeuer.ParamsChanged). It must not block for long.
	Changed func(kind schema.GroupVersionKind, oldObj, newObj *unstructured.Unstructured)
	// Listed, when set, is told when a kind's objects are listed (its
	// informer synced; Requeuer.ParamsListed): a pod the policies refused
	// while they were not, in a cycle that ran while the objects' add
	// events went by, has no other event to bring it back.
	Listed func(kind schema.GroupVersionKind)
	Logger klog.Logger

	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]*paramKind
	// watched moves, under mu, after a kind is added to kinds: a read
	// that found its kind not watched yet depends on it.
	watched atomic.Uint64
	// stopped is closed by Stop: informers started after it stop at once.
	stopped chan struct{}
	// retry, when set, looks the kinds that are not served up again
	// (retryMissing).
	retry *time.Timer
	// kindRetry is how long a kind found not served stays so before the
	// store looks it up again: defaultKindRetry when zero. Read and
	// written under mu.
	kindRetry time.Duration
	once      sync.Once
}

// retryAfter is kindRetry or its default; the caller holds s.mu.
func (s *ParamsStore) retryAfter() time.Duration {
	if s.kindRetry > 0 {
		return s.kindRetry
	}
	return defaultKindRetry
}

// paramKind is the informer of one param kind, and the CEL values of its
// objects.
type paramKind struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	informer   cache.SharedIndexInformer
	stop       chan struct{}
	// err is why the kind cannot be watched (not served), and checked when
	// it was found so.
	err     error
	checked time.Time
	// listErr is the informer's last list or watch error (e.g. the
	// manager may not read the kind: see RBAC for param kinds), *error.
	listErr atomic.Pointer[error]

	// version moves when what the store answers of the kind as a whole
	// may change: after its objects are listed (the informer synced), a
	// list or watch fails (listErr), and when the kind is retired
	// (stopped, or replaced by a new look-up). Retiring moves it under
	// the store's mu, where readers load it (ParamsStore.kind).
	version atomic.Uint64
	// scopes are the versions of the parts of the kind that reads looked
	// at: each moves on every event of an object in it. Key: a
	// paramsScope (a namespace's objects, or one object). Bound: the
	// namespaces and objects that the pods' paramRefs looked up while the
	// kind is watched. Invalidated with the kind: a new paramKind starts
	// empty, and retiring this one moves version, which every reader of a
	// scope recorded too. An entry is made at 0 by the first read that
	// records it (scope) and moved by the informer's events (changed);
	// a scope no read recorded is not tracked, since nothing depends on
	// it.
	scopes sync.Map // paramsScope -> *atomic.Uint64

	// values are the converted objects by namespace/name: *paramsValue.
	values sync.Map
}

// paramsScope is a part of a kind's objects that a read looks at: those of
// a namespace ("" for a cluster-scoped kind) when name is empty (a
// paramRef's selector), else the one object of that name.
type paramsScope struct {
	namespace, name string
}

// scope returns the version of a part of the kind, tracked from now on.
func (k *paramKind) scope(namespace, name string) *atomic.Uint64 {
	key := paramsScope{namespace: namespace, name: name}
	if v, ok := k.scopes.Load(key); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := k.scopes.LoadOrStore(key, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// touch moves the versions of the parts of the kind that hold an object:
// its namespace's objects and itself. The informer has already stored the
// event's object, so that a read that loads a version before reading the
// objects never records a version newer than what it read.
func (k *paramKind) touch(namespace, name string) {
	for _, key := range []paramsScope{{namespace: namespace}, {namespace: namespace, name: name}} {
		if v, ok := k.scopes.Load(key); ok {
			v.(*atomic.Uint64).Add(1)
		}
	}
}

// retire moves the kind's version when the store stops watching it or
// replaces it; the caller holds the store's mu.
func (k *paramKind) retire() { k.version.Add(1) }

// paramsReads are the versions of the parts of a ParamsStore that the
// bindings of a Match read, each loaded before the part was read: while
// every one is current, the store answers those reads as it did, so a
// Match never holds answers newer than its versions say, only older (and
// it is then made again).
type paramsReads []paramsRead

type paramsRead struct {
	version *atomic.Uint64
	at      uint64
}

// add records a part's version now, unless the part is recorded already
// (the earlier version is kept: if the part moved in between, the reads
// are not current). A nil receiver records nothing.
func (r *paramsReads) add(version *atomic.Uint64) {
	if r == nil {
		return
	}
	for _, x := range *r {
		if x.version == version {
			return
		}
	}
	*r = append(*r, paramsRead{version: version, at: version.Load()})
}

// current says whether no part read has moved since.
func (r paramsReads) current() bool {
	for _, x := range r {
		if x.version.Load() != x.at {
			return false
		}
	}
	return true
}

// paramsValue is one object version's CEL value and the policies bound to
// it (*engine.CompiledPolicy by *engine.CompiledPolicy).
type paramsValue struct {
	params *engine.Params
	bound  sync.Map
}

func (s *ParamsStore) init() {
	s.once.Do(func() {
		s.kinds = map[schema.GroupVersionKind]*paramKind{}
		s.stopped = make(chan struct{})
	})
}

// Sync starts the informers of the param kinds that the snapshot's
// policies name and stops those of kinds no policy names any more.
func (s *ParamsStore) Sync(snapshot *engine.Snapshot) {
	s.init()
	want := sets.New[schema.GroupVersionKind]()
	for _, p := range snapshot.Policies() {
		if spec := p.ParamSpec(); spec != nil && p.Err() == nil {
			want.Insert(spec.Kind)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for gvk, k := range s.kinds {
		if !want.Has(gvk) {
			if k.stop != nil {
				close(k.stop)
			}
			k.retire()
			delete(s.kinds, gvk)
			s.Logger.V(2).Info("Stopped watching a param kind", "kind", gvk)
		}
	}
	added := false
	for gvk := range want {
		k, ok := s.kinds[gvk]
		switch {
		case !ok:
			s.kinds[gvk] = s.start(gvk)
			added = true
		case k.err != nil && time.Since(k.checked) > s.retryAfter():
			k.retire()
			s.kinds[gvk] = s.start(gvk)
		}
	}
	if added {
		s.watched.Add(1)
	}
	s.armRetry()
}

// armRetry makes retryMissing run in kindRetry when a kind is not served
// and no retry is due; the caller holds s.mu.
func (s *ParamsStore) armRetry() {
	if s.retry != nil {
		return
	}
	select {
	case <-s.stopped:
		return
	default:
	}
	for _, k := range s.kinds {
		if k.err != nil {
			s.retry = time.AfterFunc(s.retryAfter(), s.retryMissing)
			return
		}
	}
}

// retryMissing looks the kinds that were not served up again (their CRD
// may be installed now) and starts their informers, whose initial list
// requeues the pods their objects concern (Changed).
func (s *ParamsStore) retryMissing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry = nil
	for gvk, k := range s.kinds {
		if k.err != nil && time.Since(k.checked) >= s.retryAfter() {
			k.retire()
			s.kinds[gvk] = s.start(gvk)
		}
	}
	s.armRetry()
}

// start starts the informer of a kind; the caller holds s.mu.
func (s *ParamsStore) start(gvk schema.GroupVersionKind) *paramKind {
	k := &paramKind{gvk: gvk, checked: time.Now()}
	mapping, err := s.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		k.err = fmt.Errorf("paramKind %s is not served by the API server: %w", gvk, err)
		s.Logger.Info("A param kind is not served; the policies naming it follow their failurePolicy", "kind", gvk, "err", err)
		return k
	}
	k.namespaced = mapping.Scope.Name() == meta.RESTScopeNameNamespace
	k.informer = dynamicinformer.NewFilteredDynamicInformer(s.Client, mapping.Resource, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	if _, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.changed(k, nil, obj) },
		UpdateFunc: func(oldObj, newObj any) { s.changed(k, oldObj, newObj) },
		DeleteFunc: func(obj any) { s.changed(k, obj, nil) },
	}); err != nil {
		k.err = fmt.Errorf("watching paramKind %s: %w", gvk, err)
		return k
	}
	if err := k.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		k.listErr.Store(&err)
		k.version.Add(1)
	}); err != nil {
		k.err = fmt.Errorf("watching paramKind %s: %w", gvk, err)
		return k
	}
	k.stop = make(chan struct{})
	ctx := stopContext(k.stop, s.stopped)
	go k.informer.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) {
			k.version.Add(1)
			if s.Listed != nil {
				s.Listed(gvk)
			}
		}
	}()
	s.Logger.V(2).Info("Watching a param kind", "kind", gvk, "resource", mapping.Resource)
	return k
}

// stopContext is a context done when either channel is closed.
func stopContext(a, b chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		select {
		case <-a:
		case <-b:
		}
	}()
	return ctx
}

// Stop stops every informer.
func (s *ParamsStore) Stop() {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
	}
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
}

// changed forgets an object's old value, moves the versions of the parts
// of the kind that hold it, and tells Changed.
func (s *ParamsStore) changed(k *paramKind, oldObj, newObj any) {
	var oldU, newU *unstructured.Unstructured
	if o, ok := tombstoned[*unstructured.Unstructured](oldObj); ok {
		oldU = o
	}
	if o, ok := newObj.(*unstructured.Unstructured); ok {
		newU = o
	}
	if newU == nil && oldU != nil {
		k.values.Delete(oldU.GetNamespace() + "/" + oldU.GetName())
	}
	if oldU != nil {
		k.touch(oldU.GetNamespace(), oldU.GetName())
	}
	if newU != nil && (oldU == nil || newU.GetNamespace() != oldU.GetNamespace() || newU.GetName() != oldU.GetName()) {
		k.touch(newU.GetNamespace(), newU.GetName())
	}
	if s.Changed != nil {
		s.Changed(k.gvk, oldU, newU)
	}
}

// WaitForSync waits until the informers of the kinds named so far have
// listed their objects, or failed to (kinds that are not served, or that
// the manager may not read, do not hold the scheduler up: their policies
// reject their pods until they can be read), or ctx is done.
func (s *ParamsStore) WaitForSync(ctx context.Context) bool {
	s.init()
	s.mu.Lock()
	var synced []cache.InformerSynced
	for _, k := range s.kinds {
		if k.informer != nil {
			synced = append(synced, func() bool { return k.informer.HasSynced() || k.listErr.Load() != nil })
		}
	}
	s.mu.Unlock()
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// KindError says why a param kind cannot be read: it is not served, or its
// objects cannot be listed (engine.ErrParamsNotReadable); an error wrapping
// engine.ErrParamsNotReady while they are not listed yet; nil once they
// are.
func (s *ParamsStore) KindError(gvk schema.GroupVersionKind) error {
	k, err := s.kind(gvk, nil)
	if err != nil {
		return err
	}
	if !k.informer.HasSynced() {
		if listErr := k.listErr.Load(); listErr != nil {
			return fmt.Errorf("%w: the objects of paramKind %s cannot be listed: %w", engine.ErrParamsNotReadable, gvk, *listErr)
		}
		return fmt.Errorf("%w: the objects of paramKind %s are not listed yet", engine.ErrParamsNotReady, gvk)
	}
	return nil
}

// kind returns the watched kind, and records in reads the version of the
// answer, loaded under the lock that retiring a kind or adding one takes:
// the kind's, or the set of kinds' when it is not watched. It only reads:
// a kind found not served is looked up again by the store's retry
// (retryMissing), not here.
func (s *ParamsStore) kind(gvk schema.GroupVersionKind, reads *paramsReads) (*paramKind, error) {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kinds[gvk]
	if !ok {
		// A policy that the feed has not synced yet: the registry has it,
		// the store's Sync comes next.
		reads.add(&s.watched)
		return nil, fmt.Errorf("%w: paramKind %s is not watched yet", engine.ErrParamsNotReady, gvk)
	}
	reads.add(&k.version)
	return k, k.err
}

// Namespace implements engine.ParamsResolver.
func (s *ParamsStore) Namespace(spec *engine.ParamSpec, pod *corev1.Pod) string {
	return s.namespace(spec, pod, nil)
}

// namespace is Namespace, recording in reads what it read.
func (s *ParamsStore) namespace(spec *engine.ParamSpec, pod *corev1.Pod, reads *paramsReads) string {
	k, err := s.kind(spec.Kind, reads)
	return spec.LookupNamespace(pod, err != nil || k.namespaced)
}

// Resolve implements engine.ParamsResolver from the informers' caches.
func (s *ParamsStore) Resolve(spec *engine.ParamSpec, pod *corev1.Pod) ([]*engine.Params, error) {
	return s.resolve(spec, pod, nil)
}

// resolve is Resolve, recording in reads the version of each part of the
// store it reads before reading it: the kind, then the object named or the
// namespace's objects (a selector).
func (s *ParamsStore) resolve(spec *engine.ParamSpec, pod *corev1.Pod, reads *paramsReads) ([]*engine.Params, error) {
	k, err := s.kind(spec.Kind, reads)
	if err != nil {
		return nil, err
	}
	if !k.informer.HasSynced() {
		if listErr := k.listErr.Load(); listErr != nil {
			return nil, fmt.Errorf("%w: the objects of paramKind %s cannot be listed: %w", engine.ErrParamsNotReady, spec.Kind, *listErr)
		}
		return nil, fmt.Errorf("%w: the objects of paramKind %s are not listed yet", engine.ErrParamsNotReady, spec.Kind)
	}
	ns := spec.LookupNamespace(pod, k.namespaced)
	if reads != nil {
		// spec.Name is empty with a selector: the namespace's objects.
		reads.add(k.scope(ns, spec.Name))
	}
	var objs []any
	if spec.Selector == nil {
		key := spec.Name
		if ns != "" {
			key = ns + "/" + spec.Name
		}
		obj, exists, err := k.informer.GetIndexer().GetByKey(key)
		if err != nil {
			return nil, err
		}
		if exists {
			objs = append(objs, obj)
		}
	} else {
		objs, err = k.informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		if err != nil {
			return nil, err
		}
	}
	var out []*engine.Params
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !spec.Selects(u.GetName(), u.GetLabels()) {
			continue
		}
		v, err := k.value(s.Env, u)
		if err != nil {
			return nil, err
		}
		out = append(out, v.params)
	}
	slices.SortFunc(out, func(a, b *engine.Params) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// value returns the converted object, converting it once per version.
func (k *paramKind) value(env *engine.Environment, u *unstructured.Unstructured) (*paramsValue, error) {
	key := u.GetNamespace() + "/" + u.GetName()
	if v, ok := k.values.Load(key); ok {
		pv := v.(*paramsValue)
		if pv.params.UID == u.GetUID() && pv.params.ResourceVersion == u.GetResourceVersion() {
			return pv, nil
		}
	}
	params, err := env.ParamsValue(u)
	if err != nil {
		return nil, err
	}
	pv := &paramsValue{params: params}
	k.values.Store(key, pv)
	return pv, nil
}

// Bound implements engine.ParamsResolver: the policy bound to the params
// version, made once per policy and params version.
func (s *ParamsStore) Bound(policy *engine.CompiledPolicy, params *engine.Params) *engine.CompiledPolicy {
	k, err := s.kind(params.Kind, nil)
	if err != nil {
		return policy.WithParams(params)
	}
	v, ok := k.values.Load(params.Namespace + "/" + params.Name)
	if !ok || v.(*paramsValue).params != params {
		return policy.WithParams(params)
	}
	pv := v.(*paramsValue)
	if b, ok := pv.bound.Load(policy); ok {
		return b.(*engine.CompiledPolicy)
	}
	b, _ := pv.bound.LoadOrStore(policy, policy.WithParams(params))
	return b.(*engine.CompiledPolicy)
}

// IsParamsNotReady says whether an error is a params informer that has not
// synced yet.
func IsParamsNotReady(err error) bool { return errors.Is(err, engine.ErrParamsNotReady) }

// selectedByAny says whether one of the policies' selectors select the pod
// (or its namespace is not known: it may).
func (q *Requeuer) selectedByAny(policies []*engine.CompiledPolicy, pod *corev1.Pod) bool {
	ns, _ := q.inputs.namespace(pod.Namespace)
	for _, p := range policies {
		if p.NamespaceSelector != nil && ns == nil {
			return true
		}
		if p.Select(pod, ns) {
			return true
		}
	}
	return false
}

// ParamsListed requeues, once the objects of a param kind are listed, the
// pending pods that a policy reading that kind selects: those it refused or
// held while they were not listed ("not listed yet"). The objects' add
// events requeue pods too (ParamsChanged), but they may go by while such a
// pod's cycle runs, before the kind counts as listed. Only pods that are
// unschedulable or held move (Activate leaves the others).
func (q *Requeuer) ParamsListed(kind schema.GroupVersionKind) {
	a := q.activator.Load()
	if a == nil {
		return
	}
	var affecting []*engine.CompiledPolicy
	for _, p := range q.inputs.Policies.Snapshot().Policies() {
		if spec := p.ParamSpec(); spec != nil && spec.Kind == kind {
			affecting = append(affecting, p)
		}
	}
	if len(affecting) == 0 {
		return
	}
	q.requeue(a, affecting, "", "A param kind is listed, requeueing pending pods", "kind", kind)
}

// requeue activates the pending pods of a namespace (all when empty) that
// one of the policies selects, and logs the message with the count.
func (q *Requeuer) requeue(a *podActivator, policies []*engine.CompiledPolicy, namespace, msg string, kv ...any) {
	pods, err := a.pods(namespace)
	if err != nil {
		return
	}
	pending := map[string]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && q.selectedByAny(policies, pod) {
			pending[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(pending) == 0 {
		return
	}
	logger := klog.Background().WithName("params")
	logger.V(4).Info(msg, append(kv, "pods", len(pending))...)
	a.activate(logger, pending)
}

// ParamsChanged requeues the pending pods that a params object's change may
// affect, as a queueing hint would (kube-scheduler's queueing hints are
// registered once, for fixed resources, so the param kinds, which come and
// go with policies, requeue through the queue's Activate): for a policy
// that looks its params up in the pod's namespace, the pending pods of the
// object's namespace; for one that reads a fixed object, every pending pod;
// in both cases only those the selectors of a policy reading the object
// select. Only pods that are unschedulable or held move (Activate leaves
// the others). It only reads: the store saw the event first.
func (q *Requeuer) ParamsChanged(kind schema.GroupVersionKind, oldObj, newObj *unstructured.Unstructured) {
	a := q.activator.Load()
	if a == nil {
		return
	}
	obj := newObj
	if obj == nil {
		obj = oldObj
	}
	if obj == nil {
		return
	}
	var affecting []*engine.CompiledPolicy
	perNamespace := true
	for _, p := range q.inputs.Policies.Snapshot().Policies() {
		spec := p.ParamSpec()
		if spec == nil || spec.Kind != kind || (spec.Namespace != "" && spec.Namespace != obj.GetNamespace()) {
			continue
		}
		selected := newObj != nil && spec.Selects(newObj.GetName(), newObj.GetLabels())
		selected = selected || (oldObj != nil && spec.Selects(oldObj.GetName(), oldObj.GetLabels()))
		if !selected {
			continue
		}
		affecting = append(affecting, p)
		if spec.Namespace != "" || obj.GetNamespace() == "" {
			perNamespace = false
		}
	}
	if len(affecting) == 0 {
		return
	}
	namespace := ""
	if perNamespace {
		namespace = obj.GetNamespace()
	}
	q.requeue(a, affecting, namespace, "A params object changed, requeueing pending pods", "kind", kind, "object", klog.KObj(obj))
}
