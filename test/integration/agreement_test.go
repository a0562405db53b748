package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/celsched/celsched/api/policytest"
	"github.com/celsched/celsched/simulate/dryrun"
	"github.com/celsched/celsched/test/testenv"
)

// caseLabel marks the nodes of one agreement case; the case's pods require
// it, so that they see only the nodes of their case.
const caseLabel = "celsched.io/agreement-case"

// TestDryRunAgreesWithScheduler runs every case of the sample suites
// (config/samples/tests) through `celsched eval` and through the live
// scheduler, and asserts the same outcome: held with the same message, or
// unschedulable for the same reasons, or bound to one of the nodes eval
// ranks highest; for a pod no node fits, preemption's: nominated to the
// node eval says, or the victims the rules protected named; and the same
// feasible set, checked live node by node with a probe pod pinned to each
// node. `celsched explain` on the live pod must agree too. A pod's
// spec.priority in a suite becomes a PriorityClass of that value live.
//
// Each case gets its own nodes (the suite's, renamed), so that pods of
// earlier cases, which the scheduler may not have forgotten yet, change
// nothing.
func TestDryRunAgreesWithScheduler(t *testing.T) {
	suites, err := policytest.Load(nil, []string{filepath.Join(repoRoot, "config", "samples", "tests")})
	if err != nil {
		t.Fatal(err)
	}
	// TenantPlacement, the param kind of tenant-zones-and-pools, is
	// installed with celsched's CRDs, and the manager may read it.
	n := 0
	for _, suite := range suites {
		t.Run(suite.Name, func(t *testing.T) {
			if slices.ContainsFunc(suite.Cases, func(tc *policytest.Case) bool { return len(tc.Params) > 0 }) {
				grantConfigMapParams(t)
			}
			for _, p := range suite.Policies {
				applyPolicy(t, p.DeepCopy())
			}
			for _, tc := range suite.Cases {
				if tc.Expect.CompileError != "" {
					continue // nothing to schedule live
				}
				if tc.PodGroup != nil {
					// This control plane has the workload gates off:
					// test/gangs (TestSampleTenantGangs) places the
					// sample's gangs live.
					continue
				}
				n++
				t.Run(tc.Name, func(t *testing.T) {
					agree(t, suite, tc, fmt.Sprintf("agree-%d", n))
				})
			}
		})
	}
	if n < 10 {
		t.Errorf("only %d cases compared", n)
	}
}

func agree(t *testing.T, suite *policytest.Suite, tc *policytest.Case, id string) {
	ctx := t.Context()
	dir := t.TempDir()

	// The case's objects, live: nodes renamed into the case, namespaces
	// with the case's labels, the pods on the nodes.
	nodes := make([]*corev1.Node, len(tc.Nodes))
	for i, n := range tc.Nodes {
		nodes[i] = n.DeepCopy()
		nodes[i].Name = id + "-" + n.Name
		if nodes[i].Labels == nil {
			nodes[i].Labels = map[string]string{}
		}
		nodes[i].Labels[caseLabel] = id
		nodes[i].Labels[corev1.LabelHostname] = nodes[i].Name
		createNode(t, nodes[i])
	}
	var namespaces []*corev1.Namespace
	for _, name := range caseNamespaces(suite, tc) {
		namespaces = append(namespaces, ensureNamespace(t, tc, name))
	}
	var onNodes []*corev1.Pod
	for _, p := range suite.PodsOnNodes {
		p = p.DeepCopy()
		p.Name = id + "-" + p.Name
		p.Spec.NodeName = id + "-" + p.Spec.NodeName
		withPriorityClass(t, p)
		if err := k8sClient.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, p) })
		onNodes = append(onNodes, p)
	}
	// The params objects, live, created for the case (and deleted after
	// it): a pod evaluated before the scheduler sees them is rejected for
	// missing params, never placed wrongly, and retried when they come.
	for _, p := range tc.Params {
		p = p.DeepCopy()
		if p.GetNamespace() != "" {
			ensureNamespace(t, tc, p.GetNamespace())
		}
		if err := k8sClient.Create(ctx, p); err != nil {
			t.Fatalf("creating params %s %s/%s: %v", p.GetKind(), p.GetNamespace(), p.GetName(), err)
		}
		t.Cleanup(func() { deleteObject(t, p) })
	}
	pod := tc.Pod.DeepCopy()
	pod.Name = id + "-" + pod.Name
	withPriorityClass(t, pod)
	requireNodes(pod, metav1.LabelSelectorRequirement{Key: caseLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{id}})

	// celsched eval on the same objects, as files; the pod as the API
	// server stores it (a server-side dry run: fields of a feature the
	// server has off, such as spec.schedulingGroup without
	// GenericWorkload, are dropped live, so eval must not see them).
	stored := pod.DeepCopy()
	if err := k8sClient.Create(ctx, stored, client.DryRunAll); err != nil {
		t.Fatalf("creating pod %s (dry run): %v", pod.Name, err)
	}
	stored.ResourceVersion, stored.UID, stored.CreationTimestamp = "", "", metav1.Time{}
	args := []string{"eval", "-o", "json", "--pod", writeObjects(t, dir, "pod", stored), "--nodes", writeObjects(t, dir, "nodes", nodes...),
		"--namespace", writeObjects(t, dir, "namespaces", namespaces...), "--pods-on-nodes", writeObjects(t, dir, "pods", onNodes...)}
	for _, f := range suite.PolicyFiles {
		args = append(args, "-f", f)
	}
	if len(tc.Params) > 0 {
		args = append(args, "--params", writeObjects(t, dir, "params", tc.Params...))
	}
	eval := cliReport(t, args...)

	// The live scheduler.
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, pod) })
	var bound string
	switch {
	case eval.PreEnqueue != nil:
		if got := waitPending(t, pod, "SchedulingGated"); got != eval.PreEnqueue.Message {
			t.Errorf("live hold message %q, eval says %q", got, eval.PreEnqueue.Message)
		}
	case len(eval.Feasible) == 0:
		var reasons []string
		for _, n := range eval.Nodes {
			if r := rejection(eval, n.Name); r != "" && !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
		waitPending(t, pod, corev1.PodReasonUnschedulable, reasons...)
	default:
		bound = waitForNode(t, pod)
		if top := topNodes(eval); !slices.Contains(top, bound) {
			t.Errorf("live scheduler bound the pod to %s, eval ranks highest %v (ranking %v)", bound, top, eval.Ranking)
		}
	}

	// Preemption: the live scheduler nominates the pod where eval says
	// preemption would, or names the victims the rules protected.
	if p := eval.Preemption; p != nil && eval.PreEnqueue == nil && len(eval.Feasible) == 0 {
		if p.Node != "" {
			waitNominated(t, pod, p.Node)
		} else if len(p.Protected) > 0 {
			waitPending(t, pod, corev1.PodReasonUnschedulable, "victims protected: "+p.Protected[0])
		}
	}

	// celsched explain on the live pod: the same verdict. Its report has
	// the nodes of the other cases too, which the pod's node affinity
	// rejects.
	explain := cliReport(t, "explain", "--kubeconfig", kubeconfig, "-n", pod.Namespace, "pod/"+pod.Name, "-o", "json")
	if (explain.PreEnqueue == nil) != (eval.PreEnqueue == nil) || !slices.Equal(explain.Feasible, eval.Feasible) {
		t.Errorf("explain disagrees with eval: held %v / %v, feasible %v / %v", explain.PreEnqueue, eval.PreEnqueue, explain.Feasible, eval.Feasible)
	}
	if eval.PreEnqueue != nil {
		return // held: no node is evaluated
	}

	// The feasible set, node by node: a copy of the pod pinned to each
	// node binds exactly where eval says the pod is feasible. A probe only
	// uses its own node, so the probes do not change each other's outcome.
	for _, n := range nodes {
		if n.Name == bound {
			continue
		}
		probe := tc.Pod.DeepCopy()
		probe.Name = id + "-probe-" + strings.TrimPrefix(n.Name, id+"-")
		withPriorityClass(t, probe)
		requireNodes(probe, metav1.LabelSelectorRequirement{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpIn, Values: []string{n.Name}})
		if err := k8sClient.Create(ctx, probe); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, probe) })
		if slices.Contains(eval.Feasible, n.Name) {
			expectNode(t, probe, n.Name)
			continue
		}
		waitPending(t, probe, corev1.PodReasonUnschedulable, rejection(eval, n.Name))
	}
}

// withPriorityClass gives a pod of a suite, whose spec.priority a file
// sets (a suite has no PriorityClasses), the PriorityClass of that value,
// created for it: the API server's priority admission refuses a pod with
// a priority and no class, and sets the priority from the class.
func withPriorityClass(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if pod.Spec.Priority == nil || pod.Spec.PriorityClassName != "" {
		return
	}
	name := fmt.Sprintf("celsched-agreement-%d", *pod.Spec.Priority)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: *pod.Spec.Priority}
	if err := k8sClient.Create(t.Context(), pc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating PriorityClass %s: %v", name, err)
	}
	pod.Spec.Priority, pod.Spec.PriorityClassName = nil, name
	// The API server's Priority admission reads PriorityClasses from its
	// informer: wait until it knows this one (a server-side dry run of the
	// pod is admitted).
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		probe := pod.DeepCopy()
		if err := k8sClient.Create(ctx, probe, client.DryRunAll); err != nil {
			return !strings.Contains(err.Error(), "no PriorityClass with name "+name), nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the API server did not admit pods of PriorityClass %s: %v", name, err)
	}
}

// rejection is why eval says the node is infeasible: its plugin's
// message, or PreFilter's when that rejected the pod on every node (a
// parameterized policy without params, under Deny).
func rejection(r *dryrun.Report, node string) string {
	if n := r.Node(node); n != nil && n.RejectedBy != nil {
		return n.RejectedBy.Message
	}
	if r.PreFilter != nil {
		return r.PreFilter.Message
	}
	return ""
}

// caseNamespaces are the namespaces of the case's pods.
func caseNamespaces(suite *policytest.Suite, tc *policytest.Case) []string {
	names := []string{tc.Pod.Namespace}
	for _, p := range suite.PodsOnNodes {
		if !slices.Contains(names, p.Namespace) {
			names = append(names, p.Namespace)
		}
	}
	return names
}

// ensureNamespace creates the namespace, or updates its labels, to those
// the case gives it (none but its name label when the case has none), and
// returns it as stored. Namespaces are left behind: envtest has no
// namespace controller to finish deleting them.
func ensureNamespace(t *testing.T, tc *policytest.Case, name string) *corev1.Namespace {
	t.Helper()
	labels := map[string]string{corev1.LabelMetadataName: name}
	if i := slices.IndexFunc(tc.Namespaces, func(ns *corev1.Namespace) bool { return ns.Name == name }); i >= 0 {
		for k, v := range tc.Namespaces[i].Labels {
			labels[k] = v
		}
	}
	ns := &corev1.Namespace{}
	err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, ns)
	switch {
	case apierrors.IsNotFound(err):
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		err = k8sClient.Create(t.Context(), ns)
	case err == nil:
		ns.Labels = labels
		err = k8sClient.Update(t.Context(), ns)
	}
	if err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	return ns
}

// createNode creates a node as its file gives it, ready, with capacity
// equal to allocatable where the file gives only allocatable.
func createNode(t *testing.T, node *corev1.Node) {
	t.Helper()
	status := node.Status
	if err := k8sClient.Create(t.Context(), node); err != nil {
		t.Fatalf("creating node %s: %v", node.Name, err)
	}
	t.Cleanup(func() { deleteObject(t, node) })
	if status.Capacity == nil {
		status.Capacity = status.Allocatable
	}
	status.Conditions = append(status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()})
	node.Status = status
	if err := k8sClient.Status().Update(t.Context(), node); err != nil {
		t.Fatalf("setting the status of node %s: %v", node.Name, err)
	}
}

// requireNodes adds a required node affinity requirement to every term of
// the pod (a term of its own when it has none).
func requireNodes(pod *corev1.Pod, req metav1.LabelSelectorRequirement) {
	r := corev1.NodeSelectorRequirement{Key: req.Key, Operator: corev1.NodeSelectorOperator(req.Operator), Values: req.Values}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, r)
	}
}

// topNodes are the nodes with the highest score of the report: the
// scheduler picks one of them at random.
func topNodes(r *dryrun.Report) []string {
	var out []string
	for _, n := range r.Ranking {
		if n.Score == r.Ranking[0].Score {
			out = append(out, n.Node)
		}
	}
	return out
}

// writeObjects writes objects as a YAML file of documents and returns its
// path.
func writeObjects[T client.Object](t *testing.T, dir, name string, objs ...T) string {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, k8sClient.Scheme())
		if err != nil {
			t.Fatal(err)
		}
		o := o.DeepCopyObject()
		o.GetObjectKind().SetGroupVersionKind(gvk)
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cliReport runs a celsched command with -o json and decodes its report.
func cliReport(t *testing.T, args ...string) *dryrun.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := testenv.RunCLI(cliBinary, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("celsched %s: exit code %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	r := &dryrun.Report{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		t.Fatalf("celsched %s: %v", args[0], err)
	}
	return r
}
