package engine

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/cel/openapi"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
)

// The benchmarks of `make bench`. Their names are stable so that results can
// be compared over time; the README's performance section reports them.

const zoneFilter = "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in ['a', 'b']"

// realisticNode is a node as a cloud provider registers it: a dozen labels,
// annotations, conditions, addresses and a few dozen images.
func realisticNode(name string) *corev1.Node {
	node := makeNode(name, map[string]string{
		"topology.kubernetes.io/zone":            "a",
		"topology.kubernetes.io/region":          "eu-west-1",
		"node.kubernetes.io/instance-type":       "m6i.2xlarge",
		"kubernetes.io/arch":                     "amd64",
		"kubernetes.io/os":                       "linux",
		"karpenter.sh/capacity-type":             "on-demand",
		"karpenter.sh/nodepool":                  "default",
		"celsched.io/pool":                       "general",
		"beta.kubernetes.io/arch":                "amd64",
		"beta.kubernetes.io/os":                  "linux",
		"failure-domain.beta.kubernetes.io/zone": "a",
	})
	node.Annotations = map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`,
	}
	node.CreationTimestamp = metav1.Now()
	node.Spec.ProviderID = "aws:///eu-west-1a/i-0123456789abcdef0"
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.12.34"},
		{Type: corev1.NodeHostName, Address: name},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
			Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient", Message: "kubelet is fine",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		})
	}
	for i := range 30 {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names:     []string{"registry.example.com/team/app-" + strconv.Itoa(i) + "@sha256:0123456789abcdef", "registry.example.com/team/app-" + strconv.Itoa(i) + ":v1"},
			SizeBytes: 123456789,
		})
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OSImage: "Bottlerocket", ContainerRuntimeVersion: "containerd://2.1.0"}
	node.Status.Allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("95Gi")
	return node
}

func benchPolicy(b *testing.B, p *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	b.Helper()
	compiled := NewCompiler(testEnv(b)).Compile(p, CompileOptions{})
	if err := compiled.Err(); err != nil {
		b.Fatal(err)
	}
	return compiled
}

func BenchmarkFilterLabelRule(b *testing.B) {
	p := benchPolicy(b, builder.MakePolicy("zone").Filter("zone", zoneFilter).Obj())
	benchFilter(b, p)
}

// benchFilter measures a policy's Filter on a cached realistic node that
// passes it.
func benchFilter(b *testing.B, p *CompiledPolicy) {
	b.Helper()
	conv := NewConverter(testEnv(b), 0)
	pod, err := conv.Pod(makePod("ns", "p", nil), makeNamespace("ns", nil))
	if err != nil {
		b.Fatal(err)
	}
	node, err := conv.Node(realisticNode("n1"), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // a cancellable context, as the scheduler's
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d := p.Filter(ctx, pod, node); d.Verdict != Pass {
			b.Fatal(d.String())
		}
	}
}

func BenchmarkFilterNativeGo(b *testing.B) {
	node := realisticNode("n1")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		zone := node.Labels["topology.kubernetes.io/zone"]
		if zone != "a" && zone != "b" {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkScoreRule(b *testing.B) {
	p := benchPolicy(b, builder.MakePolicy("free").
		Score("free-memory", "nodeInfo.allocatable['memory'] - nodeInfo.requested['memory']", 1, schedv1alpha1.MinMax).Obj())
	conv := NewConverter(testEnv(b), 0)
	pod, err := conv.Pod(makePod("ns", "p", nil), makeNamespace("ns", nil))
	if err != nil {
		b.Fatal(err)
	}
	info := &NodeInfo{
		Allocatable: map[string]int64{"cpu": 16000, "memory": 64 << 30, "pods": 110},
		Requested:   map[string]int64{"cpu": 3500, "memory": 8 << 30},
	}
	node, err := conv.Node(realisticNode("n1"), func() *NodeInfo { return info })
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	raw := make([]float64, 1)
	for b.Loop() {
		if d := p.Score(ctx, pod, node, raw); d.Verdict != Pass {
			b.Fatal(d.String())
		}
	}
}

func BenchmarkMatch1000Policies(b *testing.B) {
	compiler := NewCompiler(testEnv(b))
	var policies []*CompiledPolicy
	for i := range 1000 {
		p := builder.MakePolicy(fmt.Sprintf("policy-%04d", i)).
			NamespaceLabels(map[string]string{"team": fmt.Sprintf("team-%d", i%50)}).
			PodLabels(map[string]string{"app": fmt.Sprintf("app-%d", i%20)}).
			Filter("f", "true").Obj()
		compiled := compiler.Compile(p, CompileOptions{})
		if err := compiled.Err(); err != nil {
			b.Fatal(err)
		}
		policies = append(policies, compiled)
	}
	snapshot := NewSnapshot(policies...)
	conv := NewConverter(testEnv(b), 0)
	pod, err := conv.Pod(makePod("ns", "p", map[string]string{"app": "app-3", "tier": "web"}),
		makeNamespace("ns", map[string]string{"team": "team-3"}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if got := len(snapshot.Match(ctx, pod, nil)); got != 10 {
		b.Fatalf("want 10 matching policies, got %d", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		snapshot.Match(ctx, pod, nil)
	}
}

func BenchmarkCompilePolicy(b *testing.B) {
	policy := builder.MakePolicy("ten").
		Condition("has-app", "has(pod.metadata.labels) && 'app' in pod.metadata.labels").
		Variable("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('')").
		Variable("pool", "node.metadata.labels[?'celsched.io/pool'].orValue('')").
		PreEnqueue("cost-center", "namespaceObject.metadata.labels[?'cost-center'].orValue('') != ''", "no cost center").
		Filter("zone", "variables.zone in ['a', 'b', 'c']").
		Filter("pool", "variables.pool == 'general' || variables.pool == ''").
		Filter("not-maintenance", "!node.metadata.labels[?'celsched.io/maintenance'].hasValue()").
		Filter("cpu", "nodeInfo.allocatable['cpu'] - nodeInfo.requested['cpu'] >= 500").
		Score("spot", "node.metadata.labels[?'karpenter.sh/capacity-type'].orValue('') == 'spot' ? 100 : 0", 2, schedv1alpha1.None).
		Score("pods", "nodeInfo.podCount", 1, schedv1alpha1.MinMaxReverse).Obj()
	compiler := NewCompiler(testEnv(b))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := compiler.Compile(policy, CompileOptions{}).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNodeActivation(b *testing.B) {
	env := testEnv(b)
	node := realisticNode("n1")
	// cold: the conversion of a node version seen for the first time.
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := env.toVal(node, env.nodeValues); err != nil {
				b.Fatal(err)
			}
		}
	})
	// warm: the same node version again, from the converter's cache.
	b.Run("warm", func(b *testing.B) {
		conv := NewConverter(env, 0)
		if _, err := conv.NodeValue(node); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := conv.NodeValue(node); err != nil {
				b.Fatal(err)
			}
		}
	})
	// naive: what each evaluation would pay without the cache, converting
	// as ValidatingAdmissionPolicy does (to unstructured, wrapped lazily).
	b.Run("naive-unstructured", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(node)
			if err != nil {
				b.Fatal(err)
			}
			openapi.UnstructuredToVal(u, env.nodeValues.schema)
		}
	})
}

// BenchmarkFilterLabelRuleTracked is BenchmarkFilterLabelRule with a
// tracked program (runtime cost tracking on), the baseline for the bounded
// programs' speed-up.
func BenchmarkFilterLabelRuleTracked(b *testing.B) {
	p := benchPolicy(b, builder.MakePolicy("zone").Filter("zone", zoneFilter).Obj())
	pe, err := testEnv(b).newPolicyEnv()
	if err != nil {
		b.Fatal(err)
	}
	pc := &policyCompiler{env: pe, out: &CompiledPolicy{Program: &Program{variableIndex: map[string]int{}}}, stored: func(string) bool { return false }, scalarVariables: map[string]bool{}}
	c := pc.check(nil, zoneFilter, outputBool, nodeScope, "")
	if c == nil {
		b.Fatal(pc.out.Errors)
	}
	tracked, err := celcost.NewTracked(c.env, c.ast, celcost.PerExpressionCostLimit)
	if err != nil {
		b.Fatal(err)
	}
	p.filters[0].prg = tracked
	benchFilter(b, p)
}
