package remediation

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/kwok"
)

var (
	randomCases = flag.Int("remediation.cases", 200, "workloads of TestRemediationRandomized")
	randomSeed  = flag.Uint64("remediation.seed", 0, "seed of TestRemediationRandomized (0: the time)")
)

// randomCase is one workload of TestRemediationRandomized: a ReplicaSet
// in a namespace of its own.
type randomCase struct {
	namespace, name string
	replicas        int32
	// pinned: the template sets nodeName to a node the policy refuses
	// once the namespace moves.
	pinned bool
	pdb    bool
	policy int
}

// TestRemediationRandomized: -remediation.cases ReplicaSets (1-3
// replicas, on enough nodes for all of them on either side, some pinned by their template's nodeName, some with a
// PodDisruptionBudget), each in a namespace of its own under one of four
// remediating policies, run on the red nodes; every namespace then moves
// to the blue tenant, and while remediation works, policies are switched
// to Audit and back. A watch on every pod records each eviction (the
// only deletions the test does not make). Invariants: no pinned
// workload's pod is ever evicted (its replacement is known to come back
// to the refused node); no workload has more evictions than pods (each
// pod's replacement lands admitted, so nothing is evicted again for the
// same drift: no eviction loop); every
// unpinned workload ends on blue nodes; and every pod still on a red node
// (the pinned ones) is reported in status.drift, with the reason
// ReplacementPinned.
func TestRemediationRandomized(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-remediation.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	id := fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)
	// Room for every pod on either side (a KWOK node takes 110 pods).
	var reds, blues []string
	for i := range 1 + *randomCases*3/110 {
		reds = append(reds, fmt.Sprintf("%s-red-%d", id, i))
		blues = append(blues, fmt.Sprintf("%s-blue-%d", id, i))
	}
	for _, n := range reds {
		create(t, kwok.Node(n, map[string]string{"drift-tenant": "red-" + id}))
	}
	for _, n := range blues {
		create(t, kwok.Node(n, map[string]string{"drift-tenant": "blue-" + id}))
	}
	const policies = 4
	policyName := func(i int) string { return fmt.Sprintf("random-%s-%d", id, i) }
	for i := range policies {
		applyPolicy(t, tenantPolicy(policyName(i), fmt.Sprintf("%s-%d", id, i),
			&schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict, Rate: 600, MaxUnavailable: ptr.To(intstr.FromInt32(1))}))
	}

	// Every eviction, by pod UID, and the pods' workloads, from a watch.
	ev := &evictions{byPod: map[types.UID]int{}, owner: map[types.UID]types.UID{}}
	clientset, err := kubernetes.NewForConfig(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	defer cancel()
	factory := informers.NewSharedInformerFactory(clientset, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, pod := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
			if old.DeletionTimestamp == nil && pod.DeletionTimestamp != nil && strings.HasPrefix(pod.Namespace, "random-") {
				ev.record(pod)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	cases := make([]randomCase, *randomCases)
	for i := range cases {
		c := &cases[i]
		c.policy = rng.IntN(policies)
		c.replicas = int32(1 + rng.IntN(3))
		c.pinned = rng.IntN(4) == 0
		c.pdb = rng.IntN(2) == 0
		c.namespace = createNamespace(t, "random", map[string]string{"drift-test": fmt.Sprintf("%s-%d", id, c.policy), "tenant": "red-" + id})
		c.name = fmt.Sprintf("w%d", i)
		labels := map[string]string{"app": c.name}
		rs := replicaSet(c.namespace, c.name, c.replicas, labels, nil)
		if c.pinned {
			rs.Spec.Template.Spec.NodeName = reds[rng.IntN(len(reds))]
		}
		create(t, rs)
		if c.pdb {
			create(t, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}})
		}
	}
	// Every pod running on a red node.
	running := func(prefix string, c randomCase, pods []corev1.Pod) bool {
		n := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && strings.HasPrefix(p.Spec.NodeName, id+"-"+prefix) && ready(&p) {
				n++
			}
		}
		return n == int(c.replicas)
	}
	waitCases(t, "every workload Ready on red nodes", cases, func(c randomCase, pods []corev1.Pod) bool { return running("red", c, pods) })

	// The tenants move; policies go to Audit and back while remediation works.
	for _, c := range cases {
		setNamespaceLabel(t, c.namespace, "tenant", "blue-"+id)
	}
	var flips sync.WaitGroup
	for i := range policies {
		if rng.IntN(2) == 0 {
			continue
		}
		after := time.Duration(rng.IntN(3000)) * time.Millisecond
		flips.Go(func() {
			time.Sleep(after)
			setEnforcement(t, policyName(i), schedv1alpha1.Audit)
			time.Sleep(2 * time.Second)
			setEnforcement(t, policyName(i), schedv1alpha1.Enforce)
		})
	}
	flips.Wait()
	defer func() {
		if t.Failed() {
			for i := range policies {
				p := waitPolicy(t, policyName(i), "read", func(*schedv1alpha1.SchedulingPolicy) bool { return true })
				data, _ := json.Marshal(p.Status)
				t.Logf("%s: spec.enforcement %q, status %s", p.Name, p.Spec.Enforcement, data)
			}
		}
	}()
	waitCases(t, "every unpinned workload Ready on blue nodes", cases, func(c randomCase, pods []corev1.Pod) bool {
		return c.pinned || running("blue", c, pods)
	})
	// Every pinned pod reported, and nothing else.
	pinnedPods := map[string]map[string]bool{}
	for _, c := range cases {
		if !c.pinned {
			continue
		}
		name := policyName(c.policy)
		if pinnedPods[name] == nil {
			pinnedPods[name] = map[string]bool{}
		}
		for _, p := range podsOf(t, c.namespace, map[string]string{"app": c.name}) {
			pinnedPods[name][p.Namespace+"/"+p.Name] = true
		}
	}
	for i := range policies {
		name := policyName(i)
		want := pinnedPods[name]
		waitPolicy(t, name, fmt.Sprintf("reporting exactly its %d pinned pods", len(want)), func(p *schedv1alpha1.SchedulingPolicy) bool {
			d := p.Status.Drift
			if d == nil || int(d.Count) != len(want) {
				return false
			}
			for _, dp := range d.Pods {
				if !want[dp.Namespace+"/"+dp.Name] || dp.NotEvicted != schedv1alpha1.BlockedReplacementPinned {
					return false
				}
			}
			return true
		})
	}

	// The evictions, per workload.
	perWorkload := ev.perWorkload()
	for _, c := range cases {
		rs := &appsv1.ReplicaSet{}
		if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: c.namespace, Name: c.name}, rs); err != nil {
			t.Fatal(err)
		}
		n := perWorkload[rs.UID]
		switch {
		case c.pinned && n > 0:
			t.Errorf("%s/%s (pinned to a refused node): %d eviction(s), want none", c.namespace, c.name, n)
		case n > int(c.replicas):
			t.Errorf("%s/%s (%d pods): %d evictions", c.namespace, c.name, c.replicas, n)
		}
	}
}

// evictions are the pods the test saw deleted (evicted: it deletes none
// itself until it ends).
type evictions struct {
	mu sync.Mutex
	// byPod counts each pod's deletions (one: a pod is deleted once).
	byPod map[types.UID]int
	owner map[types.UID]types.UID
}

func (e *evictions) record(pod *corev1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byPod[pod.UID]++
	if ref := metav1.GetControllerOf(pod); ref != nil {
		e.owner[pod.UID] = ref.UID
	}
}

func (e *evictions) perWorkload() map[types.UID]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[types.UID]int{}
	for pod, n := range e.byPod {
		out[e.owner[pod]] += n
	}
	return out
}

// waitCases waits until ok holds for every case's pods.
func waitCases(t *testing.T, what string, cases []randomCase, ok func(randomCase, []corev1.Pod) bool) {
	t.Helper()
	var failing string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*waitTimeout, true, func(ctx context.Context) (bool, error) {
		for _, c := range cases {
			pods := podsOf(t, c.namespace, map[string]string{"app": c.name})
			if !ok(c, pods) {
				failing = fmt.Sprintf("%s/%s (pinned %v): %v", c.namespace, c.name, c.pinned, podPlaces(pods))
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not %s: %v; first failing: %s", what, err, failing)
	}
}

// setEnforcement sets a policy's spec.enforcement.
func setEnforcement(t *testing.T, name string, e schedv1alpha1.EnforcementAction) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return false, err
		}
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		p.Spec.Enforcement = e
		return k8sClient.Patch(ctx, p, patch) == nil, nil
	})
	if err != nil {
		t.Errorf("setting %s's enforcement to %s: %v", name, e, err)
	}
}
