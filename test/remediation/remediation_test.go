package remediation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/simulate/analyze"
	"github.com/celsched/celsched/test/kwok"
	"github.com/celsched/celsched/test/testenv"
)

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// healthWatch follows a ReplicaSet's pods through a watch (every change,
// not samples) and keeps the fewest of them Ready and not being deleted
// seen since armed.
type healthWatch struct {
	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	armed  bool
	lowest int
}

func watchHealth(t *testing.T, namespace string, selector map[string]string) *healthWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	t.Cleanup(cancel)
	h := &healthWatch{pods: map[types.UID]*corev1.Pod{}, lowest: -1}
	clientset, err := kubernetes.NewForConfig(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labels.Set(selector).String() }))
	inf := factory.Core().V1().Pods().Informer()
	update := func(pod *corev1.Pod, gone bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if gone {
			delete(h.pods, pod.UID)
		} else {
			h.pods[pod.UID] = pod
		}
		if !h.armed {
			return
		}
		n := h.healthy()
		if h.lowest < 0 || n < h.lowest {
			h.lowest = n
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { update(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { update(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			update(obj.(*corev1.Pod), true)
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return h
}

func (h *healthWatch) healthy() int {
	n := 0
	for _, p := range h.pods {
		if p.DeletionTimestamp == nil && ready(p) {
			n++
		}
	}
	return n
}

func (h *healthWatch) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.lowest = true, h.healthy()
}

func (h *healthWatch) lowestHealthy() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lowest
}

// tenantPolicy keeps the pods of the namespaces labelled drift-test=<id>
// on the nodes whose drift-tenant label is the namespace's tenant label.
func tenantPolicy(name, id string, remediation *schedv1alpha1.Remediation) *schedv1alpha1.SchedulingPolicy {
	return &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			SchedulerNames: []string{schedulerName},
			Match:          &schedv1alpha1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"drift-test": id}}},
			Filters: []schedv1alpha1.Rule{{Name: "tenant-nodes",
				Expression: "node.metadata.labels[?'drift-tenant'].orValue('') == namespaceObject.metadata.labels[?'tenant'].orValue('-')",
				Message:    "the node is not one of the tenant's"}},
			Remediation: remediation,
		},
	}
}

func replicaSet(namespace, name string, replicas int32, podLabels map[string]string, nodeSelector map[string]string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: podLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					SchedulerName: schedulerName,
					NodeSelector:  nodeSelector,
					Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
}

// podsOf lists the pods of a namespace with the labels, by name.
func podsOf(t *testing.T, namespace string, selector map[string]string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := k8sClient.List(t.Context(), list, client.InNamespace(namespace), client.MatchingLabels(selector)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// driftedPodsMetric is celsched_policy_drifted_pods of the policy, as the
// manager's registry serves it; -1 when absent.
func driftedPodsMetric(t *testing.T, policy string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "celsched_policy_drifted_pods" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == policy {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestRemediationEvictsDriftedPods: a ReplicaSet of 6 pods (PDB
// maxUnavailable 1) runs on its tenant's nodes; the namespace changes
// tenant, so that the policy refuses every pod's node. The leader evicts
// them through the Eviction API one at a time (the Ready pods of the
// ReplicaSet never fall below 5, watched on every change), and each
// replacement lands on a node of the new tenant. A bare pod, and a pod
// pinned to an old node (its replacement has no feasible node), are
// reported in status.drift and never evicted; status.drift, the metric
// and `celsched analyze` agree on them. Then the namespace goes back, and
// once remediation has evicted a pod the policy is switched to Audit:
// evictions stop.
func TestRemediationEvictsDriftedPods(t *testing.T) {
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	for _, n := range []struct{ name, tenant string }{{"drift-red-1", "red"}, {"drift-red-2", "red"}, {"drift-blue-1", "blue"}, {"drift-blue-2", "blue"}} {
		create(t, kwok.Node(n.name, map[string]string{"drift-tenant": n.tenant}))
	}
	ns := createNamespace(t, "drift", map[string]string{"drift-test": id, "tenant": "red"})
	const policyName = "drift-remediation"
	applyPolicy(t, tenantPolicy(policyName, id, &schedv1alpha1.Remediation{Action: schedv1alpha1.RemediationEvict,
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), Rate: 600}))

	appLabels := map[string]string{"app": "web"}
	rs := replicaSet(ns, "web", 6, appLabels, nil)
	create(t, rs)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: appLabels}}}
	create(t, pdb)
	pinnedLabels := map[string]string{"app": "pinned"}
	create(t, replicaSet(ns, "pinned", 1, pinnedLabels, map[string]string{corev1.LabelHostname: "drift-red-1"}))
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare", Labels: map[string]string{"app": "bare"}},
		Spec: corev1.PodSpec{SchedulerName: schedulerName, NodeName: "drift-red-2",
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
	create(t, bare)

	health := watchHealth(t, ns, appLabels)
	onNodes := func(selector map[string]string, want int, prefix string) []corev1.Pod {
		t.Helper()
		var pods []corev1.Pod
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*waitTimeout, true, func(context.Context) (bool, error) {
			pods = podsOf(t, ns, selector)
			n := 0
			for _, p := range pods {
				if p.DeletionTimestamp == nil && strings.HasPrefix(p.Spec.NodeName, prefix) && ready(&p) {
					n++
				}
			}
			return n == want && len(pods) == want, nil
		})
		if err != nil {
			t.Fatalf("pods %v: not %d Ready on %s* nodes: %v; pods: %v", selector, want, prefix, err, podPlaces(pods))
		}
		return pods
	}
	before := onNodes(appLabels, 6, "drift-red-")
	pinned := onNodes(pinnedLabels, 1, "drift-red-1")[0]
	waitPolicy(t, policyName, "without drift", func(p *schedv1alpha1.SchedulingPolicy) bool {
		return p.Status.Drift == nil || p.Status.Drift.Count == 0
	})
	health.arm()

	// The namespace changes tenant: every pod of it is on a refused node.
	setNamespaceLabel(t, ns, "tenant", "blue")
	after := onNodes(appLabels, 6, "drift-blue-")
	for _, p := range after {
		if slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID }) {
			t.Errorf("pod %s was not replaced", p.Name)
		}
	}
	if low := health.lowestHealthy(); low < 5 {
		t.Errorf("the ReplicaSet had %d Ready pods at one point: the PDB (maxUnavailable 1) was violated", low)
	}
	st := waitPolicy(t, policyName, "with the two pods it does not evict in status.drift", func(p *schedv1alpha1.SchedulingPolicy) bool {
		d := p.Status.Drift
		return d != nil && d.Count == 2 && d.Remediation != nil && d.Remediation.Evicted == 6 && len(d.Pods) == 2 &&
			d.Pods[0].NotEvicted != "" && d.Pods[1].NotEvicted != ""
	})
	wantPods := []schedv1alpha1.DriftedPod{
		{Namespace: ns, Name: "bare", Node: "drift-red-2", PlacedBy: schedv1alpha1.PlacedByProfile, NotEvicted: schedv1alpha1.BlockedNoController},
		{Namespace: ns, Name: pinned.Name, Node: "drift-red-1", PlacedBy: schedv1alpha1.PlacedByProfile, NotEvicted: schedv1alpha1.BlockedNoFeasibleNode},
	}
	slices.SortFunc(wantPods, func(a, b schedv1alpha1.DriftedPod) int { return strings.Compare(a.Name, b.Name) })
	for i, p := range st.Status.Drift.Pods {
		p.Message = ""
		if p != wantPods[i] {
			t.Errorf("status.drift.pods[%d] = %+v, want %+v", i, p, wantPods[i])
		}
	}
	if c := meta.FindStatusCondition(st.Status.Conditions, schedv1alpha1.ConditionDrifted); c == nil || c.Status != metav1.ConditionTrue || c.Reason != schedv1alpha1.ReasonPodsDrifted {
		t.Errorf("Drifted condition = %+v, want True/%s", c, schedv1alpha1.ReasonPodsDrifted)
	}
	// Neither the bare pod nor the pinned one was evicted.
	for _, p := range []*corev1.Pod{bare, &pinned} {
		got := &corev1.Pod{}
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was evicted (err %v)", p.Name, err)
		}
	}
	// The metric and analyze say the same.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return driftedPodsMetric(t, policyName) == 2, nil
	}); err != nil {
		t.Errorf("celsched_policy_drifted_pods{policy=%q} = %v, want 2", policyName, driftedPodsMetric(t, policyName))
	}
	// And the policy's OpenReports Report in the namespace: the same two
	// pods, as drift results.
	var reportSays string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		r := &reportsv1alpha1.Report{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.ReportName(policyName)}, r); err != nil {
			return false, nil
		}
		var got []string
		for _, res := range r.Results {
			if res.Category == controllers.DriftCategory {
				got = append(got, res.Subjects[0].Name+" on "+res.Properties["node"])
			}
		}
		want := []string{wantPods[0].Name + " on " + wantPods[0].Node, wantPods[1].Name + " on " + wantPods[1].Node}
		if r.Summary.Fail == 2 && slices.Equal(got, want) {
			return true, nil
		}
		reportSays = fmt.Sprintf("fail %d, drift results %v; want 2, %v", r.Summary.Fail, got, want)
		return false, nil
	}); err != nil {
		t.Errorf("the policy's Report in %s does not hold the drifted pods (%v): %s", ns, err, reportSays)
	}
	var violations []analyze.Finding
	for _, f := range analyzeReport(t).Findings {
		if f.Kind == analyze.RunningInViolation && slices.Contains(f.Policies, policyName) {
			violations = append(violations, f)
		}
	}
	if len(violations) != 1 || violations[0].Subject != "namespace "+ns || violations[0].Pods != int(st.Status.Drift.Count) {
		t.Errorf("analyze's running-in-violation findings of %s = %+v, want one of namespace %s with %d pods", policyName, violations, ns, st.Status.Drift.Count)
	} else {
		for _, p := range st.Status.Drift.Pods {
			if !strings.Contains(violations[0].Evidence, p.Namespace+"/"+p.Name+" on "+p.Node) {
				t.Errorf("analyze's evidence %q does not name %s/%s on %s", violations[0].Evidence, p.Namespace, p.Name, p.Node)
			}
		}
		// And what remediation would do: the dry run of the leader's.
		wantNotEvicted := []string{ns + "/bare: NoController", ns + "/" + pinned.Name + ": NoFeasibleNode"}
		slices.Sort(wantNotEvicted)
		if f := violations[0]; len(f.WouldEvict) != 0 || !slices.Equal(f.NotEvicted, wantNotEvicted) || f.Budget != "maxUnavailable 1 per workload, 600 per minute" {
			t.Errorf("analyze's remediation: wouldEvict %v, notEvicted %v, budget %q; want none, %v, %q", f.WouldEvict, f.NotEvicted, f.Budget,
				wantNotEvicted, "maxUnavailable 1 per workload, 600 per minute")
		}
	}

	// Back to red, slowly (one eviction every 10 s); after the first
	// eviction the policy is switched to Audit: no more.
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: policyName}, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Remediation.Rate = 6
	if err := k8sClient.Patch(t.Context(), p, patch); err != nil {
		t.Fatal(err)
	}
	setNamespaceLabel(t, ns, "tenant", "red")
	waitPolicy(t, policyName, "evicting again", func(p *schedv1alpha1.SchedulingPolicy) bool {
		return p.Status.Drift != nil && p.Status.Drift.Remediation != nil && p.Status.Drift.Remediation.Evicted >= 7
	})
	patch = client.MergeFrom(p.DeepCopy())
	p.Spec.Enforcement = schedv1alpha1.Audit
	if err := k8sClient.Patch(t.Context(), p, patch); err != nil {
		t.Fatal(err)
	}
	audited := waitPolicy(t, policyName, "remediation inactive", func(p *schedv1alpha1.SchedulingPolicy) bool {
		r := p.Status.Drift.Remediation
		return r != nil && !r.Active && r.Reason == "PolicyNotEnforced"
	})
	evicted := audited.Status.Drift.Remediation.Evicted
	if evicted > 8 {
		t.Errorf("%d pods evicted after the switch back, want 1 (2 when the next was due as Audit was set)", evicted-6)
	}
	// Longer than the 10 s between evictions: none follows.
	time.Sleep(15 * time.Second)
	red := 0
	for _, p := range podsOf(t, ns, appLabels) {
		if strings.HasPrefix(p.Spec.NodeName, "drift-red-") {
			red++
		}
	}
	final := waitPolicy(t, policyName, "read", func(*schedv1alpha1.SchedulingPolicy) bool { return true })
	if got := final.Status.Drift.Remediation.Evicted; got != evicted {
		t.Errorf("evictions went on under Audit: %d, then %d", evicted, got)
	}
	if red > int(evicted-6) {
		t.Errorf("%d pods moved back to red nodes, but only %d were evicted", red, evicted-6)
	}
}

func podPlaces(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s@%s(ready=%v,deleting=%v)", p.Name, p.Spec.NodeName, ready(&p), p.DeletionTimestamp != nil))
	}
	return out
}

// create creates an object and deletes it when the test ends.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() {
		err := k8sClient.Delete(context.WithoutCancel(t.Context()), obj, client.GracePeriodSeconds(0))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", obj.GetName(), err)
		}
	})
}

// createNamespace creates a namespace with a generated name and labels.
func createNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels}}
	create(t, ns)
	return ns.Name
}

// setNamespaceLabel sets one label of a namespace.
func setNamespaceLabel(t *testing.T, name, key, value string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels[key] = value
	if err := k8sClient.Patch(t.Context(), ns, patch); err != nil {
		t.Fatalf("labelling namespace %s: %v", name, err)
	}
}

// applyPolicy creates a policy and waits until it is Ready.
func applyPolicy(t *testing.T, policy *schedv1alpha1.SchedulingPolicy) {
	t.Helper()
	create(t, policy)
	waitPolicy(t, policy.Name, "Ready", func(got *schedv1alpha1.SchedulingPolicy) bool {
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == got.Generation
	})
}

// waitPolicy polls the policy until ok says it is what the test waits
// for (what, in the failure), and returns it.
func waitPolicy(t *testing.T, name, what string, ok func(*schedv1alpha1.SchedulingPolicy) bool) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	got := &schedv1alpha1.SchedulingPolicy{}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		return ok(got), nil
	})
	if err != nil {
		data, _ := json.Marshal(got.Status)
		t.Fatalf("policy %s: not %s: %v; status %s", name, what, err, data)
	}
	return got
}

// analyzeReport runs `celsched analyze` on the control plane.
func analyzeReport(t *testing.T) *analyze.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	args := []string{"analyze", "--kubeconfig", kubeconfig, "-o", "json"}
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	r := &analyze.Report{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		t.Fatalf("celsched analyze: %v", err)
	}
	return r
}
