package verdict

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestWaitForSyncBounded: an informer that never syncs (its list always
// fails) fails the wait within its timeout, naming its type, instead of
// hanging the dry run.
func TestWaitForSyncBounded(t *testing.T) {
	client := fake.NewSimpleClientset() //nolint:staticcheck // as the Evaluator's
	// A reactor that blocked would hold the fake clientset's lock, and
	// every other informer's list with it: this one fails at once.
	client.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("unavailable")
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	factory.Core().V1().Nodes().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), namespaces.HasSynced) {
		t.Fatal("the namespace informer did not sync")
	}
	start := time.Now()
	err := waitForSync(ctx, factory, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not synced within 200ms: *v1.Node") || strings.Contains(err.Error(), "Namespace") {
		t.Fatalf("waitForSync: %v; want the Node informer named as not synced within 200ms, and only it", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("waitForSync returned after %s, want about 200ms", d)
	}
}
