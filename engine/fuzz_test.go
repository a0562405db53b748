package engine

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// FuzzCompile compiles arbitrary expression text in every position of a
// policy: it must never panic, and a policy either compiles or says why.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		zoneFilter,
		"nodeInfo.pods.filter(p, p.labels[?'app'].orValue('') == 'web').size()",
		"pod.spec.containers.exists(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)",
		"quantity(node.status.allocatable['cpu']).asApproximateFloat()",
		"cel.bind(x, 1, x + x)",
		"variables.v",
		"'a' + ",
		"[1, 'a']",
		"node.metadata.labels[?'a'].orValue(1)",
	} {
		f.Add(seed)
	}
	compiler := NewCompiler(testEnv(f))
	f.Fuzz(func(t *testing.T, expression string) {
		p := builder.MakePolicy("fuzz").
			Condition("c", expression).
			Variable("v", expression).
			PreEnqueue("pe", expression, "").
			FilterMsg("f", expression, "", expression).
			Score("s", expression, 1, schedv1alpha1.MinMax).Obj()
		compiled := compiler.Compile(p, CompileOptions{})
		if compiled.Err() == nil && len(compiled.filters) != 1 {
			t.Fatalf("policy compiled without its filter")
		}
		for _, e := range compiled.Errors {
			if e.Field == "" {
				t.Fatalf("error without a field path: %v", e)
			}
		}
	})
}

// FuzzEvaluate evaluates the sample policies against pods and nodes made of
// fuzzed labels, names and quantities: evaluation must never panic, and
// every error must be an *EvalError or a compile error.
func FuzzEvaluate(f *testing.F) {
	f.Add("ml", "true", "a", "payments", "spot", "8", "32Gi", uint8(3))
	f.Add("", "", "", "", "", "0", "0", uint8(0))
	f.Add("team-\x00", "x", "zone/with/slash", "pool", "on-demand", "1m", "1e3", uint8(255))
	env := testEnv(f)
	compiler := NewCompiler(env)
	var policies []*CompiledPolicy
	for _, p := range loadSamples(f) {
		policies = append(policies, compiler.Compile(p, CompileOptions{Stored: true}))
	}
	snapshot := NewSnapshot(policies...)
	f.Fuzz(func(t *testing.T, team, gpu, zone, pool, capacity, cpu, memory string, pods uint8) {
		conv := NewConverter(env, 0)
		ns := makeNamespace("ns", map[string]string{"team": team, "gpu-approved": gpu, "celsched.io/preferred-zone": zone})
		pod := makePod("ns", "p", map[string]string{"app": pool, "workload-class": capacity})
		node := makeNode("n", map[string]string{
			"topology.kubernetes.io/zone": zone, "celsched.io/pool": pool, "karpenter.sh/capacity-type": capacity,
			"nvidia.com/gpu.present": gpu,
		})
		node.Annotations = map[string]string{"celsched.io/maintenance-reason": memory}
		node.CreationTimestamp = metav1.Now()
		info := &NodeInfo{Allocatable: map[string]int64{"cpu": int64(len(cpu)), "memory": int64(len(memory)) << 30}}
		for i := range int(pods) {
			info.Pods = append(info.Pods, PodRef{Namespace: "ns", Name: string(rune('a' + i%26)), Labels: map[string]string{"app": pool}})
		}
		podIn, err := conv.Pod(pod, ns)
		if err != nil {
			t.Fatal(err)
		}
		nodeIn, err := conv.Node(node, func() *NodeInfo { return info })
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, m := range snapshot.Match(ctx, podIn, nil) {
			p := m.Decision.Policy
			check := func(err error) {
				if err == nil {
					return
				}
				switch err.(type) {
				case *EvalError, *CompileError:
				default:
					t.Fatalf("policy %s: untyped error %T: %v", p.Name, err, err)
				}
			}
			check(p.PreEnqueue(ctx, podIn).Err)
			check(p.Filter(ctx, podIn, nodeIn).Err)
			check(p.Score(ctx, podIn, nodeIn, make([]float64, len(p.ScoreRules()))).Err)
		}
	})
}
