// Package kubecontrollers runs, in-process, the controllers of
// kube-controller-manager that the envtest control plane lacks and that
// tests of evictions need: the ReplicaSet controller (an evicted pod is
// replaced) and the disruption controller (it writes a
// PodDisruptionBudget's status, which the Eviction API reads: without it
// every eviction of a pod a PDB covers is refused). They are
// kube-controller-manager's own (k8s.io/kubernetes/pkg/controller/...), at
// the Kubernetes version celsched is built against.
package kubecontrollers

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/replicaset"
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
	factory.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() { rs.Run(ctx, workers) })
	wg.Go(func() { dc.Run(ctx, workers) })
	return func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	}, nil
}
