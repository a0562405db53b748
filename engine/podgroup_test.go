package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine/celcost"
	"github.com/celsched/celsched/test/builder"
)

// TestPodGroupCompile: podGroup is declared in every pod rule (match
// conditions and preEnqueue rules too: it is no node's), typed, so that a
// misspelt field is an error at its field path; placement rules' podGroup
// has no assignedNodes (placement.assignedNodes is theirs).
func TestPodGroupCompile(t *testing.T) {
	t.Parallel()
	c := NewCompiler(testEnv(t))
	tests := map[string]struct {
		policy  *builder.PolicyWrapper
		wantErr string // a substring of the only error; "" compiles
	}{
		"match condition on the group's labels": {
			policy: builder.MakePolicy("p").Condition("gang", "podGroup.metadata.labels[?'team'].orValue('') == 'ml'").Filter("f", "true"),
		},
		"preEnqueue on minCount": {
			policy: builder.MakePolicy("p").PreEnqueue("small", "podGroup.minCount <= 8", "too large"),
		},
		"variable, filter and score on the members": {
			policy: builder.MakePolicy("p").Variable("placed", "podGroup.assignedNodes").
				Filter("together", "size(variables.placed) == 0 || node.metadata.name in variables.placed").
				Score("near", "size(podGroup.assignedNodes.filter(n, n == node.metadata.name))", 1, ""),
		},
		"misspelt field in a filter": {
			policy:  builder.MakePolicy("p").Filter("f", "podGroup.minCnt <= 4"),
			wantErr: "spec.filters[0].expression: Invalid value: \"podGroup.minCnt <= 4\": compilation failed: ERROR: <input>:1:9: undefined field 'minCnt'",
		},
		"misspelt field in a match condition": {
			policy:  builder.MakePolicy("p").Condition("c", "podGroup.metadata.label['a'] == 'b'").Filter("f", "true"),
			wantErr: "spec.match.conditions[0].expression: Invalid value: \"podGroup.metadata.label['a'] == 'b'\": compilation failed: ERROR: <input>:1:18: undefined field 'label'",
		},
		"wrong type": {
			policy:  builder.MakePolicy("p").Filter("f", "podGroup.minCount == 'four'"),
			wantErr: "spec.filters[0].expression",
		},
		"assignedNodes in a placement filter": {
			policy:  builder.MakePolicy("p").PlacementFilter("f", "size(podGroup.assignedNodes) == 0", ""),
			wantErr: "spec.placement.filters[0].expression: Invalid value: \"size(podGroup.assignedNodes) == 0\": compilation failed: ERROR: <input>:1:14: undefined field 'assignedNodes'",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := c.Compile(tc.policy.Obj(), CompileOptions{})
			if tc.wantErr == "" {
				if err := p.Err(); err != nil {
					t.Fatal(err)
				}
				if !p.ReadsPodGroup() {
					t.Error("ReadsPodGroup is false")
				}
				return
			}
			if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Error(), tc.wantErr) {
				t.Fatalf("errors %v, want one containing %q", p.Errors, tc.wantErr)
			}
		})
	}
}

// TestPodGroupEvaluate: what podGroup holds for a pod with no group, for
// one whose PodGroup is not known, and for a gang with placed members
// (sorted, without duplicates, without the pod itself); a filter on it
// places and refuses as it reads.
func TestPodGroupEvaluate(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	c := NewCompiler(env)
	inGroup := func(name, group, node string) *corev1.Pod {
		pod := makePod("ml", name, nil)
		if group != "" {
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		pod.Spec.NodeName = node
		return pod
	}
	groups := NewStaticPodGroups(
		[]*schedulingv1beta1.PodGroup{builder.Gang("ml", "big", 8, map[string]string{"team": "ml"}), builder.Gang("ml", "small", 2, nil)},
		[]*corev1.Pod{
			inGroup("big-1", "big", "n2"), inGroup("big-2", "big", "n1"), inGroup("big-3", "big", "n2"),
			inGroup("big-0", "big", "n3"), // the pod itself, once bound
			inGroup("pending", "big", ""), inGroup("other", "small", "n9"),
		})
	value := c.Compile(builder.MakePolicy("value").
		FilterMsg("show", "false", "", "podGroup.metadata.namespace + '/' + podGroup.metadata.name + ' ' + podGroup.metadata.labels[?'team'].orValue('-') + ' [' + podGroup.assignedNodes.join(',') + ']'").
		Score("minCount", "podGroup.minCount", 1, schedv1alpha1.None).Obj(), CompileOptions{})
	size := c.Compile(builder.MakePolicy("size").
		Filter("small-or-large-node", "podGroup.minCount <= 4 || node.metadata.labels[?'size'].orValue('') == 'large'").Obj(), CompileOptions{})
	for _, p := range []*CompiledPolicy{value, size} {
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
	}
	small, large := makeNode("small-node", map[string]string{"size": "small"}), makeNode("large-node", map[string]string{"size": "large"})
	tests := map[string]struct {
		pod *corev1.Pod
		// wantValue is podGroup, as the message shows it; wantSmall and
		// wantLarge the filter's verdicts.
		wantValue            string
		wantMinCount         float64
		wantSmall, wantLarge Verdict
	}{
		"no group": {pod: inGroup("alone", "", ""), wantValue: "/ - []", wantSmall: Pass, wantLarge: Pass},
		"a gang of 8 with members on n1 and n2 twice": {
			pod: inGroup("big-0", "big", ""), wantValue: "ml/big ml [n1,n2]", wantMinCount: 8, wantSmall: Reject, wantLarge: Pass,
		},
		"a gang of 2":            {pod: inGroup("small-0", "small", ""), wantValue: "ml/small - [n9]", wantMinCount: 2, wantSmall: Pass, wantLarge: Pass},
		"no PodGroup object yet": {pod: inGroup("x", "later", ""), wantValue: "ml/later - []", wantSmall: Pass, wantLarge: Pass},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in, err := NewConverter(env, 0).Pod(tc.pod, makeNamespace("ml", nil))
			if err != nil {
				t.Fatal(err)
			}
			in.Group = groups.PodGroup(tc.pod)
			ctx := context.Background()
			node, err := NewConverter(env, 0).Node(small, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := value.Filter(ctx, in, node); d.Message != tc.wantValue {
				t.Errorf("podGroup reads %q, want %q (%v)", d.Message, tc.wantValue, d.Err)
			}
			minCount := []float64{-1}
			if d := value.Score(ctx, in, node, minCount); d.Err != nil || minCount[0] != tc.wantMinCount {
				t.Errorf("podGroup.minCount is %v, want %v (%v)", minCount[0], tc.wantMinCount, d.Err)
			}
			got := []Verdict{size.Filter(ctx, in, node).Verdict}
			node, err = NewConverter(env, 0).Node(large, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, size.Filter(ctx, in, node).Verdict)
			if diff := cmp.Diff([]Verdict{tc.wantSmall, tc.wantLarge}, got); diff != "" {
				t.Errorf("verdicts on the small and large node (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodGroupReads: a policy that reads the members of the group keeps
// the pods it may select from batching (the members change as they are
// placed) and its expressions are tracked at runtime (a group may have
// more members than declared); one that reads only the group's object
// does neither.
func TestPodGroupReads(t *testing.T) {
	t.Parallel()
	c := NewCompiler(testEnv(t))
	pod := makePod("ml", "p", nil)
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("g")}
	for expression, members := range map[string]bool{
		"podGroup.minCount <= 4":                               false,
		"podGroup.metadata.labels[?'a'].orValue('') == 'b'":    false,
		"node.metadata.name in podGroup.assignedNodes":         true,
		"podGroup.?assignedNodes.orValue([]).size() == 0":      true,
		"cel.bind(g, podGroup, g.minCount > 0)":                true, // podGroup whole
		"podGroup.minCount + size(podGroup.assignedNodes) > 0": true,
	} {
		p := c.Compile(builder.MakePolicy("p").Filter("f", expression).Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatalf("%s: %v", expression, err)
		}
		if !p.ReadsPodGroup() || p.ReadsPodGroupMembers() != members {
			t.Errorf("%s: ReadsPodGroup %v, ReadsPodGroupMembers %v, want true, %v", expression, p.ReadsPodGroup(), p.ReadsPodGroupMembers(), members)
		}
		if _, signed := NewSnapshot(p).Signature(pod); signed == members {
			t.Errorf("%s: signed %v, want %v", expression, signed, !members)
		}
		if _, tracked := p.filters[0].prg.(*celcost.Tracked); tracked != members {
			t.Errorf("%s: tracked at runtime %v, want %v", expression, tracked, members)
		}
	}
}
