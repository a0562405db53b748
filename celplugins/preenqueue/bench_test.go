package preenqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/api/manifest"
	"github.com/celsched/celsched/celplugins/plugintest"
)

// BenchmarkQueuedAndPrepareMixed100: what CELPreEnqueue and CELFilter's
// PreFilter cost a new pod under Mixed100's hundred policies (the
// scheduler_perf workload of test/performance): the pod queued, then its
// cycle prepared.
func BenchmarkQueuedAndPrepareMixed100(b *testing.B) {
	policies, err := manifest.ReadPolicies(nil, []string{"../../test/performance/testdata/Mixed100.yaml"})
	if err != nil {
		b.Fatal(err)
	}
	if len(policies) != 100 {
		b.Fatalf("%d policies in Mixed100.yaml, want 100", len(policies))
	}
	rt := plugintest.Runtime(b, policies, plugintest.Namespace("celsched-1", nil))
	pl := &PreEnqueue{
		rt:       rt,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[hold]()),
		reported: lru.New(10),
	}
	defer pl.queue.ShutDown()
	quantity := resource.MustParse
	template := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "celsched", Containers: []corev1.Container{{
		Name: "pause", Image: "registry.k8s.io/pause:3.10.2",
		Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: quantity("100m"), corev1.ResourceMemory: quantity("500Mi")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: quantity("100m"), corev1.ResourceMemory: quantity("500Mi")},
		},
		TerminationMessagePath: "/dev/termination-log", ImagePullPolicy: corev1.PullIfNotPresent,
	}}}}
	template.Namespace = "celsched-1"
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		p := template.DeepCopy()
		p.Name, p.UID, p.ResourceVersion = fmt.Sprintf("pod-%d", i), ktypes.UID(fmt.Sprintf("uid-%d", i)), "1"
		pods[i] = p
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, p := range pods {
		ctx, cancel := context.WithCancel(context.Background())
		if st := pl.PreEnqueue(ctx, p); !st.IsSuccess() {
			b.Fatalf("held: %v", st)
		}
		c, err := rt.Prepare(ctx, p, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Filters) == 0 {
			b.Fatal("no policy with filters applies")
		}
		cancel()
	}
}
