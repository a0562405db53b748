package filter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/plugintest"
	"github.com/celsched/celsched/test/builder"
)

// BenchmarkPreFilterNodeOnlyPolicies: CELFilter's PreFilter for a new pod
// (a new UID each time, so nothing is kept from an earlier cycle) that ten
// node-only policies match: the pod's conversion, the match and the
// cycle's tally, once per pod. Its allocations are per pod, beside the
// scheduler's own.
func BenchmarkPreFilterNodeOnlyPolicies(b *testing.B) {
	var policies []*schedv1alpha1.SchedulingPolicy
	for i := range 10 {
		policies = append(policies, builder.MakePolicy(fmt.Sprintf("p%02d", i)).
			Filter("zone", "node.metadata.?labels[?'topology.kubernetes.io/zone'].orValue('') in ['a', 'b']").Obj())
	}
	pl := &Filter{rt: plugintest.Runtime(b, policies, plugintest.Namespace("ns", nil))}
	pl.args.EvaluationBudget.Duration = time.Minute
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
