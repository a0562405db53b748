package filter

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// BenchmarkPreFilterNodeOnlyPolicies: CELFilter's PreFilter for a new pod
// (a new UID each time, so nothing is kept from an earlier cycle) that ten
// node-only policies match: the pod's conversion, the match and the
// cycle's tally, once per pod. Its allocations are per pod, beside the
// scheduler's own.
func BenchmarkPreFilterNodeOnlyPolicies(b *testing.B) {
	pl := nodeOnlyPlugin(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		pod := st.MakePod().Namespace("ns").Name(fmt.Sprint("p", i)).UID(fmt.Sprint("u", i)).SchedulerName("celsched").Obj()
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}
