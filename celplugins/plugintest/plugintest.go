// Package plugintest builds what the CEL plugins' unit tests need: a
// Runtime over given policies and namespaces, without a scheduler.
package plugintest

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

var (
	envOnce sync.Once
	env     *engine.Environment
	envErr  error
)

// Runtime returns a runtime whose registry holds the policies (as the
// PolicyFeed would compile them) and whose namespace lister holds the
// namespaces.
func Runtime(t testing.TB, policies []*schedv1alpha1.SchedulingPolicy, namespaces ...*corev1.Namespace) *celplugins.Runtime {
	t.Helper()
	envOnce.Do(func() { env, envErr = engine.NewEnvironment() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	registry := engine.NewRegistry(engine.NewCompiler(env))
	for _, p := range policies {
		registry.Upsert(p)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaces {
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	rt := celplugins.NewRuntime(registry, engine.NewConverter(env, 0))
	rt.Inputs.UseNamespaces(corelisters.NewNamespaceLister(indexer))
	return rt
}

// Namespace is a namespace with its name label, as the API server sets it.
func Namespace(name string, labels map[string]string) *corev1.Namespace {
	ns := &corev1.Namespace{}
	ns.Name, ns.UID, ns.ResourceVersion = name, "uid-ns-"+ktypes.UID(name), "1"
	ns.Labels = map[string]string{corev1.LabelMetadataName: name}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	return ns
}

// CachedAndFresh returns the scheduler's view of a node twice: with a
// resourceVersion, so that the engine keeps its CEL value and memo, and
// without one, so that every evaluation starts afresh. Tests compare the
// plugins' answers on both.
func CachedAndFresh(node *corev1.Node) (cached, fresh fwk.NodeInfo) {
	versioned := node.DeepCopy()
	versioned.ResourceVersion = "1"
	ni := framework.NewNodeInfo()
	ni.SetNode(versioned)
	unversioned := node.DeepCopy()
	unversioned.ResourceVersion = ""
	fresh = framework.NewNodeInfo()
	fresh.(*framework.NodeInfo).SetNode(unversioned)
	return ni, fresh
}
