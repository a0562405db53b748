package failover

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

const (
	// schedulerName is the profile of config/scheduler/scheduler-config.yaml.
	schedulerName = "celsched"
	// zoneLabel is the label of the nodes' zone: a, b or c.
	zoneLabel = corev1.LabelTopologyZone
	// leaseNamespace holds the managers' leader election Leases.
	leaseNamespace = "celsched-system"
	// numNodes nodes, numNodes/3 in each zone.
	numNodes = 300
	// numOtherPolicies match no pod; each has a filter.
	numOtherPolicies = 200
	// noZoneC is the policy that keeps every celsched pod out of zone c.
	noZoneC = "no-zone-c"
	// waitTimeout bounds each wait: generous, as the machine running the
	// tests may be slow and shared; no test asserts a duration.
	waitTimeout = 60 * time.Second
	// workers create objects in parallel.
	workers = 16
)

// zoneOf is the zone of every node, set by createNodes.
var zoneOf = map[string]string{}

// createNodes creates numNodes nodes in zones a, b and c, with room for
// every pod of the tests.
func createNodes(ctx context.Context) error {
	names := make([]string, numNodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
		zoneOf[names[i]] = string(rune('a' + i%3))
	}
	return parallel(ctx, len(names), func(ctx context.Context, i int) error {
		name := names[i]
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{corev1.LabelHostname: name, zoneLabel: zoneOf[name]},
		}}
		if err := k8sClient.Create(ctx, node); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods:   resource.MustParse("250"),
		}
		node.Status = corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		}
		if err := k8sClient.Status().Update(ctx, node); err != nil {
			return fmt.Errorf("setting the status of node %s: %w", name, err)
		}
		return nil
	})
}

// createPolicies creates no-zone-c and numOtherPolicies policies that
// select no pod (a label no pod has), each with a filter.
func createPolicies(ctx context.Context) error {
	if err := k8sClient.Create(ctx, zonePolicy(noZoneC, nil, "c")); err != nil {
		return fmt.Errorf("creating policy %s: %w", noZoneC, err)
	}
	return parallel(ctx, numOtherPolicies, func(ctx context.Context, i int) error {
		p := &schedv1alpha1.SchedulingPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unmatched-%03d", i)},
			Spec: schedv1alpha1.SchedulingPolicySpec{
				Match: &schedv1alpha1.MatchResources{PodSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"celsched.test/unmatched": fmt.Sprint(i)},
				}},
				Filters: []schedv1alpha1.Rule{{
					Name:       "tier",
					Expression: fmt.Sprintf("node.metadata.?labels[?'tier'].orValue('') != 'tier-%d'", i),
				}},
			},
		}
		if err := k8sClient.Create(ctx, p); err != nil {
			return fmt.Errorf("creating policy %s: %w", p.Name, err)
		}
		return nil
	})
}

// zonePolicy is a policy named name, for the pods of podSelector (every
// pod when nil), with one filter (failurePolicy Fail) that rejects the
// nodes of zone.
func zonePolicy(name string, podSelector map[string]string, zone string) *schedv1alpha1.SchedulingPolicy {
	p := &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			FailurePolicy: schedv1alpha1.Fail,
			Filters: []schedv1alpha1.Rule{{
				Name:       "not-zone-" + zone,
				Expression: fmt.Sprintf("node.metadata.?labels[?'%s'].orValue('') != '%s'", zoneLabel, zone),
			}},
		},
	}
	if podSelector != nil {
		p.Spec.Match = &schedv1alpha1.MatchResources{PodSelector: &metav1.LabelSelector{MatchLabels: podSelector}}
	}
	return p
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// createNamespace creates a namespace with a generated name. It is not
// deleted: envtest runs no namespace controller, and the bound pods in it
// take nothing from the other tests.
func createNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8sClient.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// newPod is a pod for the celsched scheduler.
func newPod(namespace, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName: schedulerName,
			Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// createPods creates n pods named prefix-0000... in namespace.
func createPods(t *testing.T, namespace, prefix string, n int) {
	t.Helper()
	err := parallel(t.Context(), n, func(ctx context.Context, i int) error {
		return k8sClient.Create(ctx, newPod(namespace, fmt.Sprintf("%s-%04d", prefix, i), nil))
	})
	if err != nil {
		t.Fatalf("creating pods in %s: %v", namespace, err)
	}
}

// podCreator creates pods in a namespace at a steady rate, in the
// background, until it has created its total or is stopped.
type podCreator struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	count  int
	err    error
}

// startPodCreator creates up to total pods named p-0000... in namespace,
// batch at a time (in parallel), a batch every interval.
func startPodCreator(t *testing.T, namespace string, total, batch int, interval time.Duration) *podCreator {
	ctx := context.WithoutCancel(t.Context())
	c := &podCreator{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for first := 0; first < total; first += batch {
			n := min(batch, total-first)
			err := parallel(ctx, n, func(ctx context.Context, i int) error {
				name := fmt.Sprintf("p-%04d", first+i)
				if err := k8sClient.Create(ctx, newPod(namespace, name, nil)); err != nil {
					return fmt.Errorf("creating pod %s: %w", name, err)
				}
				return nil
			})
			c.mu.Lock()
			if err == nil {
				c.count += n
			}
			c.err = err
			c.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-c.stopCh:
				return
			}
		}
	}()
	t.Cleanup(func() { c.stopOnce(); <-c.done })
	return c
}

func (c *podCreator) stopOnce() {
	select {
	case <-c.stopCh:
	default:
		close(c.stopCh)
	}
}

// created is how many pods the creator has created so far.
func (c *podCreator) created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// wait waits until the creator has created its total and returns it.
func (c *podCreator) wait(t *testing.T) int {
	t.Helper()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.count
}

// stop stops the creator and returns how many pods it created.
func (c *podCreator) stop(t *testing.T) int {
	t.Helper()
	c.stopOnce()
	return c.wait(t)
}

// placement summarizes the pods of a namespace.
type placement struct {
	pods    int
	pending []string       // pods not bound, sorted
	zones   map[string]int // bound pods by zone
	inZoneC []string       // bound pods in zone c, sorted
	nodeOf  map[string]string
}

func (p placement) bound() int { return p.pods - len(p.pending) }

func (p placement) String() string {
	zones := make([]string, 0, len(p.zones))
	for _, z := range slices.Sorted(maps.Keys(p.zones)) {
		zones = append(zones, fmt.Sprintf("%s=%d", z, p.zones[z]))
	}
	return fmt.Sprintf("%d pods, %d bound (zones %s), %d pending", p.pods, p.bound(), strings.Join(zones, " "), len(p.pending))
}

// placed lists the pods of namespace and where they are.
func placed(ctx context.Context, namespace string) (placement, error) {
	list := &corev1.PodList{}
	if err := k8sClient.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return placement{}, err
	}
	p := placement{pods: len(list.Items), zones: map[string]int{}, nodeOf: map[string]string{}}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName == "" {
			p.pending = append(p.pending, pod.Name)
			continue
		}
		zone := zoneOf[pod.Spec.NodeName]
		p.zones[zone]++
		p.nodeOf[pod.Name] = pod.Spec.NodeName
		if zone == "c" {
			p.inZoneC = append(p.inZoneC, pod.Name)
		}
	}
	slices.Sort(p.pending)
	slices.Sort(p.inZoneC)
	return p, nil
}

// waitPlaced waits until at least want pods of namespace are bound and
// returns their placement.
func waitPlaced(t *testing.T, namespace string, want int) placement {
	t.Helper()
	var p placement
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = placed(ctx, namespace)
		return err == nil && p.bound() >= want, err
	})
	if err != nil {
		t.Fatalf("waiting for %d bound pods in %s: %v; %s; pending: %s", want, namespace, err, p, podConditions(t, namespace, p.pending))
	}
	return p
}

// waitAllBound waits until every pod of namespace is bound.
func waitAllBound(t *testing.T, namespace string, pods int) placement {
	t.Helper()
	p := waitPlaced(t, namespace, pods)
	if p.pods != pods {
		t.Fatalf("%s has %d pods, want %d", namespace, p.pods, pods)
	}
	return p
}

// checkNoneInZoneC reports the pods of namespace bound against no-zone-c,
// and which of the managers bound them.
func checkNoneInZoneC(t *testing.T, namespace string, p placement, managers ...*managerProcess) {
	t.Helper()
	n := len(p.inZoneC)
	if n == 0 {
		return
	}
	byManager := map[string]int{}
	var examples []string
	for _, pod := range p.inZoneC {
		by := "an unknown manager"
		for _, m := range managers {
			if m.firstLine(logBound, fmt.Sprintf(`pod="%s/%s"`, namespace, pod)) != "none" {
				by = m.name
				break
			}
		}
		byManager[by]++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("%s on %s by %s", pod, p.nodeOf[pod], by))
		}
	}
	var counts []string
	for _, by := range slices.Sorted(maps.Keys(byManager)) {
		counts = append(counts, fmt.Sprintf("%d by %s", byManager[by], by))
	}
	t.Errorf("%d pods were bound in zone c, against policy %s (%s): %s", n, noZoneC, strings.Join(counts, ", "), strings.Join(examples, ", "))
}

// podConditions describes the PodScheduled condition of the first pods.
func podConditions(t *testing.T, namespace string, names []string) string {
	var out []string
	for _, name := range names[:min(len(names), 3)] {
		pod := &corev1.Pod{}
		if err := k8sClient.Get(context.WithoutCancel(t.Context()), client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		c := "no PodScheduled condition"
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				c = fmt.Sprintf("PodScheduled=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		out = append(out, name+": "+c)
	}
	return strings.Join(out, "; ")
}

// waitPolicyReady waits until the policy with this UID reports Ready=True
// for its generation.
func waitPolicyReady(t *testing.T, p *schedv1alpha1.SchedulingPolicy) {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return false, err
		}
		if got.UID != p.UID {
			return false, fmt.Errorf("policy %s was replaced: UID %s, want %s", p.Name, got.UID, p.UID)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && c != nil &&
			c.Status == metav1.ConditionTrue && c.ObservedGeneration == got.Generation, nil
	})
	if err != nil {
		t.Fatalf("policy %s (UID %s, generation %d) did not become Ready: %v; status %+v", p.Name, p.UID, got.Generation, err, got.Status)
	}
}

// bindOrder is the order in which the API server bound the pods of a
// namespace: a watch delivers a namespace's changes in the order the API
// server made them.
type bindOrder struct {
	mu sync.Mutex
	// positions maps each bound pod to its place in the order, from 1.
	positions map[string]int
	err       error
}

// watchBinds records the order of the binds in namespace from now until
// the test ends.
func watchBinds(t *testing.T, namespace string) *bindOrder {
	t.Helper()
	ctx := t.Context()
	pods := clientset.CoreV1().Pods(namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%s has %d pods before the watch, want none", namespace, len(list.Items))
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, opts)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := &bindOrder{positions: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			o.mu.Lock()
			switch pod, ok := ev.Object.(*corev1.Pod); {
			case ev.Type == watch.Error:
				o.err = fmt.Errorf("watching the pods of %s: %v", namespace, apierrors.FromObject(ev.Object))
			case ok && pod.Spec.NodeName != "" && o.positions[pod.Name] == 0:
				o.positions[pod.Name] = len(o.positions) + 1
			}
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return o
}

// position is where pod is in the order; it waits until the watch has
// seen the pod bound.
func (o *bindOrder) position(t *testing.T, pod string) int {
	t.Helper()
	var pos int
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		pos = o.positions[pod]
		return pos != 0, o.err
	})
	if err != nil {
		t.Fatalf("the watch did not see pod %s bound: %v", pod, err)
	}
	return pos
}

// first is the earliest position of pods; 0 for none.
func (o *bindOrder) first(t *testing.T, pods []string) int {
	t.Helper()
	first := 0
	for _, pod := range pods {
		if pos := o.position(t, pod); first == 0 || pos < first {
			first = pos
		}
	}
	return first
}

// len is how many binds the watch has seen.
func (o *bindOrder) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.positions)
}
