package analyze

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/simulate/verdict"
)

// crossTenantPreemption finds the namespaces whose pods may preempt pods
// of other namespaces because no enforced victim rule applies to them:
// kube-scheduler's DefaultPreemption then evicts any pod of lower
// priority. A namespace's priority is the highest of its pods' (placed by
// the profiles: pending or bound), the priority classes it uses now;
// pods at or above system-cluster-critical are left out (they may always
// preempt). The candidate victims are the pods on the nodes of lower
// priority in other namespaces. Namespaces to which victim rules apply are
// not reported: the rules decide there (eval and impact show for whom).
func crossTenantPreemption(ctx context.Context, s *dryrun.Scheduler, placed, onNodes []*corev1.Pod) ([]Finding, error) {
	top := map[string]*corev1.Pod{} // namespace -> its pod of the highest priority
	for _, p := range placed {
		if t := top[p.Namespace]; t == nil || corev1helpers.PodPriority(p) > corev1helpers.PodPriority(t) {
			top[p.Namespace] = p
		}
	}
	var out []Finding
	for _, ns := range slices.Sorted(maps.Keys(top)) {
		preemptor := top[ns]
		priority := corev1helpers.PodPriority(preemptor)
		if priority >= engine.SystemCriticalPriority {
			continue
		}
		victims := map[string]int{} // namespace -> pods of lower priority
		for _, v := range onNodes {
			if v.Namespace != ns && corev1helpers.PodPriority(v) < priority {
				victims[v.Namespace]++
			}
		}
		if len(victims) == 0 {
			continue
		}
		m, err := s.Runtime().Inputs.Match(ctx, verdict.Default(preemptor))
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", preemptor.Namespace, preemptor.Name, err)
		}
		if slices.ContainsFunc(m.Preemption, func(p *engine.CompiledPolicy) bool { return p.Enforced() }) {
			continue
		}
		names := slices.SortedFunc(maps.Keys(victims), func(a, b string) int { return cmp.Or(victims[b]-victims[a], strings.Compare(a, b)) })
		total := 0
		parts := make([]string, 0, 3)
		for i, v := range names {
			total += victims[v]
			if i < 3 {
				parts = append(parts, fmt.Sprintf("%s %d", v, victims[v]))
			}
		}
		if len(names) > 3 {
			parts = append(parts, fmt.Sprintf("%d more", len(names)-3))
		}
		out = append(out, Finding{Kind: CrossTenantPreemption, Subject: "namespace " + ns,
			Evidence: fmt.Sprintf("no enforced victim rule applies to its pods (priority up to %d, %s/%s): kube-scheduler may evict for them any of %d pod(s) of lower priority in %d other namespace(s): %s",
				priority, preemptor.Namespace, preemptor.Name, total, len(names), strings.Join(parts, ", ")),
			Suggestion: "fence preemption with spec.preemption.victims for these pods (config/samples/preemption/), and restrict at admission the priority classes this namespace's pods may name"})
	}
	return out, nil
}
