// Package kubecontrollers runs, in-process, the controllers of
// kube-controller-manager that the envtest control plane lacks and that
// tests of evictions and `make run`'s cluster need: the ReplicaSet
// controller (an evicted pod is replaced), the disruption controller (it
// writes a PodDisruptionBudget's status, which the Eviction API reads:
// without it every eviction of a pod a PDB covers is refused), the
// garbage collector (deleting a ReplicaSet deletes its pods), and, where
// the API server serves PodGroups (GenericWorkload), the PodGroup
// protection controller (it removes the finalizer of a deleted PodGroup
// whose pods are gone). They are kube-controller-manager's own
// (k8s.io/kubernetes/pkg/controller/...), at the Kubernetes version
// celsched is built against.
package kubecontrollers

import (
	"context"
	"fmt"
	"sync"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/scheduling/podgroupprotection"
)

// workers per controller, as kube-controller-manager's defaults are
// (--concurrent-replicaset-syncs 5 would be more than tests need).
const workers = 2

// Start runs the ReplicaSet and disruption controllers against the
// control plane of cfg (a user that may write pods, ReplicaSets and PDB
// status: envtest's admin) until stop, which waits for them to return.
func Start(ctx context.Context, cfg *rest.Config) (stop func(), err error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "celsched-test-kube-controllers"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubecontrollers: creating the clientset: %w", err)
	}
	discovery := memory.NewMemCacheClient(cs.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(discovery)
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(discovery))
	if err != nil {
		return nil, fmt.Errorf("kubecontrollers: creating the scale client: %w", err)
	}

	ctx, cancel := context.WithCancel(klog.NewContext(ctx, klog.FromContext(ctx).WithName("kube-controllers")))
	factory := informers.NewSharedInformerFactory(cs, 0)
	rs := replicaset.NewReplicaSetController(ctx, factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), cs, replicaset.BurstReplicas)
	dc := disruption.NewDisruptionController(ctx,
		factory.Core().V1().Pods(),
		factory.Policy().V1().PodDisruptionBudgets(),
		factory.Core().V1().ReplicationControllers(),
		factory.Apps().V1().ReplicaSets(),
		factory.Apps().V1().Deployments(),
		factory.Apps().V1().StatefulSets(),
		cs, mapper, scales, cs.Discovery())
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kubecontrollers: creating the metadata client: %w", err)
	}
	metadataFactory := metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	started := make(chan struct{})
	gc, err := garbagecollector.NewGarbageCollector(ctx, cs, metadataClient, mapper, garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(factory, metadataFactory), started)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kubecontrollers: creating the garbage collector: %w", err)
	}
	var protection *podgroupprotection.Controller
	if served, err := servesPodGroups(cs); err != nil {
		cancel()
		return nil, err
	} else if served {
		if protection, err = podgroupprotection.NewPodGroupProtectionController(klog.FromContext(ctx),
			factory.Scheduling().V1beta1().PodGroups(), factory.Core().V1().Pods(), cs); err != nil {
			cancel()
			return nil, fmt.Errorf("kubecontrollers: creating the PodGroup protection controller: %w", err)
		}
	}
	factory.Start(ctx.Done())
	metadataFactory.Start(ctx.Done())
	close(started)

	var wg sync.WaitGroup
	wg.Go(func() { rs.Run(ctx, workers) })
	wg.Go(func() { dc.Run(ctx, workers) })
	wg.Go(func() { gc.Run(ctx, workers, gcSyncTimeout) })
	// New kinds (CRDs installed after start) join the collector's graph.
	wg.Go(func() { gc.Sync(ctx, cs.Discovery(), gcSyncPeriod) })
	if protection != nil {
		wg.Go(func() { protection.Run(ctx, workers) })
	}
	return func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
		metadataFactory.Shutdown()
	}, nil
}

// The garbage collector's first sync of its informers, and how often it
// looks for new kinds.
const (
	gcSyncTimeout = 30 * time.Second
	gcSyncPeriod  = 10 * time.Second
)

// servesPodGroups says whether the API server serves
// scheduling.k8s.io/v1beta1 PodGroups (GenericWorkload on).
func servesPodGroups(cs kubernetes.Interface) (bool, error) {
	list, err := cs.Discovery().ServerResourcesForGroupVersion(schedulingv1beta1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kubecontrollers: discovering %s: %w", schedulingv1beta1.SchemeGroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == "podgroups" {
			return true, nil
		}
	}
	return false, nil
}
