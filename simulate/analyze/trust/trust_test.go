package trust

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/celsched/celsched/api/manifest"
	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// Labels and node values the rules below read.
const (
	tier     = "pod.metadata.?labels[?'tier'].orValue('')"
	pool     = "node.metadata.?labels[?'pool'].orValue('')"
	zone     = "node.metadata.?labels[?'zone'].orValue('')"
	tierName = "pod.metadata.labels['tier']"
)

func policy(b *builder.PolicyWrapper) *schedv1alpha1.SchedulingPolicy { return b.Obj() }

// withPodSelector is a policy whose podSelector is s.
func withPodSelector(b *builder.PolicyWrapper, s *metav1.LabelSelector) *schedv1alpha1.SchedulingPolicy {
	p := b.Obj()
	p.Spec.Match = &schedv1alpha1.MatchResources{PodSelector: s}
	return p
}

// TestWidenings: rules under which a pod that sets a field can only go
// where the pod without it goes, or fewer places, are not reported,
// however they read the pod; rules that a pod field lets pass where they
// refuse the pod without it are, naming the field.
func TestWidenings(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		want   []Widening
	}{
		// Restrictive: not reported.
		"a label opts the pod out of nothing": {
			policy: policy(builder.MakePolicy("p").Filter("pinned", "!has(pod.metadata.labels.pin) || "+zone+" == 'a'")),
		},
		"a label only takes nodes away": {
			policy: policy(builder.MakePolicy("p").Filter("no-batch-on-a", zone+" == 'a' && "+tier+" != 'batch'")),
		},
		"a pod pins itself to the zone it names": {
			policy: policy(builder.MakePolicy("p").Filter("own-zone",
				"pod.metadata.?labels[?'zone'].orValue('') == '' || "+zone+" == pod.metadata.?labels[?'zone'].orValue('')")),
		},
		"a pod pins itself to the zone it names, read without a default": {
			policy: policy(builder.MakePolicy("p").Filter("own-zone",
				"pod.metadata.labels[?'zone'].orValue('') == '' || "+zone+" == pod.metadata.labels['zone']")),
		},
		"critical pods must use the reserved pool": {
			policy: policy(builder.MakePolicy("p").Filter("reserved",
				"pod.metadata.?annotations[?'critical'].orValue('') == 'true' ? "+pool+" == 'reserved' : true")),
		},
		"the policy applies to the pods that set the label": {
			policy: policy(builder.MakePolicy("p").Condition("is-batch", tier+" == 'batch'").Filter("spot", pool+" == 'spot'")),
		},
		"a podSelector that selects by a label": {
			policy: withPodSelector(builder.MakePolicy("p").Filter("spot", pool+" == 'spot'"),
				&metav1.LabelSelector{MatchLabels: map[string]string{"workload-class": "batch"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}}),
		},
		"the namespace is not the author's to choose": {
			policy: policy(builder.MakePolicy("p").Filter("tenant-nodes", "node.metadata.?labels[?'tenant'].orValue('') == pod.metadata.namespace")),
		},
		"GPU nodes for the pods that request GPUs: resources are charged for": {
			policy: policy(builder.MakePolicy("p").Filter("gpu-pods-only",
				"node.metadata.?labels[?'gpu'].orValue('') != 'true' || pod.spec.containers.exists(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)")),
		},
		"a variable that reads a label, restrictive": {
			policy: policy(builder.MakePolicy("p").Variable("tier", tier).Filter("no-batch-on-a", "variables.tier != 'batch' || "+zone+" != 'a'")),
		},
		"a label that keeps the pod off spot": {
			policy: policy(builder.MakePolicy("p").Filter("no-spot", "!('no-spot' in pod.metadata.labels) || "+pool+" != 'spot'")),
		},
		"a score reads what it likes": {
			policy: policy(builder.MakePolicy("p").Score("gold", tier+" == 'gold' ? 100 : 0", 1, schedv1alpha1.None)),
		},

		// Widening: reported.
		"a label grants the gold pool": {
			policy: policy(builder.MakePolicy("p").Filter("gold-pool", tier+" == 'gold' || "+pool+" != 'gold'")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "gold-pool", PodFields: []string{tierName}}},
		},
		"the author picks the pool": {
			policy: policy(builder.MakePolicy("p").Filter("own-pool", pool+" == pod.metadata.labels['pool']")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "own-pool", PodFields: []string{"pod.metadata.labels['pool']"}}},
		},
		"an annotation releases a hold": {
			policy: policy(builder.MakePolicy("p").Filter("any", "true").PreEnqueue("approved", "has(pod.metadata.annotations.approved)", "not approved")),
			want:   []Widening{{Kind: PreEnqueue, Field: "spec.preEnqueue[0]", Name: "approved", PodFields: []string{"pod.metadata.annotations['approved']"}}},
		},
		"a match condition exempts labelled pods": {
			policy: policy(builder.MakePolicy("p").Condition("not-exempt", "!has(pod.metadata.labels.exempt)").Filter("zone-a", zone+" == 'a'")),
			want:   []Widening{{Kind: Condition, Field: "spec.match.conditions[0]", Name: "not-exempt", PodFields: []string{"pod.metadata.labels['exempt']"}}},
		},
		"a podSelector exempts pods by label": {
			policy: withPodSelector(builder.MakePolicy("p").Filter("zone-a", zone+" == 'a'"),
				&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "workload", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"system"}},
					{Key: "sandbox", Operator: metav1.LabelSelectorOpDoesNotExist}}}),
			want: []Widening{{Kind: PodSelector, Field: "spec.match.podSelector", PodFields: []string{"pod.metadata.labels['sandbox']", "pod.metadata.labels['workload']"}}},
		},
		"a variable carries the label into the rule": {
			policy: policy(builder.MakePolicy("p").Variable("tier", tier).Variable("gold", "variables.tier == 'gold'").
				Filter("gold-pool", "variables.gold || "+pool+" != 'gold'")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "gold-pool", PodFields: []string{tierName}}},
		},
		"a label picks the branch": {
			policy: policy(builder.MakePolicy("p").Filter("payments",
				"pod.metadata.?labels[?'team'].orValue('') == 'payments' ? "+pool+" == 'payments' : "+pool+" != 'payments'")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "payments", PodFields: []string{"pod.metadata.labels['team']"}}},
		},
		"cel.bind of a label": {
			policy: policy(builder.MakePolicy("p").Filter("zones",
				"cel.bind(z, pod.metadata.?labels[?'zones'].orValue(''), z == '' ? "+zone+" == 'a' : "+zone+" in z.split(','))")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "zones", PodFields: []string{"pod.metadata.labels['zones']"}}},
		},
		"a toleration grants dedicated nodes": {
			policy: policy(builder.MakePolicy("p").Filter("dedicated",
				pool+" != 'dedicated' || pod.spec.?tolerations.orValue([]).exists(t, t.key == 'dedicated')")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "dedicated", PodFields: []string{"pod.spec.tolerations[].key"}}},
		},
		"a label that opts into spot": {
			policy: policy(builder.MakePolicy("p").Filter("spot-ok", "'spot-ok' in pod.metadata.labels || "+pool+" != 'spot'")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "spot-ok", PodFields: []string{"pod.metadata.labels['spot-ok']"}}},
		},
		"a label read without a default": {
			policy: policy(builder.MakePolicy("p").Filter("gold-pool", "pod.metadata.labels['tier'] == 'gold' || "+pool+" != 'gold'")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "gold-pool", PodFields: []string{tierName}}},
		},
		"under Ignore, a label read without a default only narrows": {
			// The pod without the label errors where the rule is not
			// true: Ignore skips the rule, the pod passes everywhere.
			policy: policy(builder.MakePolicy("p").Ignore().Filter("batch-on-spot", "pod.metadata.labels['class'] != 'batch' || "+pool+" == 'spot'")),
		},
		"under Fail, the same rule widens": {
			policy: policy(builder.MakePolicy("p").Filter("batch-on-spot", "pod.metadata.labels['class'] != 'batch' || "+pool+" == 'spot'")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "batch-on-spot", PodFields: []string{"pod.metadata.labels['class']"}}},
		},
		"under Ignore, a label the baseline reads with a default still widens": {
			policy: policy(builder.MakePolicy("p").Ignore().Filter("gold-pool", tier+" == 'gold' || "+pool+" != 'gold'")),
			want:   []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "gold-pool", PodFields: []string{tierName}}},
		},
		"under Ignore, a value the author makes fail to parse skips the rule": {
			policy: policy(builder.MakePolicy("p").Ignore().Filter("small",
				"!(int(pod.metadata.?annotations[?'size'].orValue('1')) in [1, 2]) ? false : "+pool+" != 'big'")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[0]", Name: "small", PodFields: []string{"pod.metadata.annotations['size']"}}},
		},
		"a match condition exempts a label value": {
			policy: policy(builder.MakePolicy("p").Condition("not-system", tier+" != 'system'").Filter("zone-a", zone+" == 'a'")),
			want:   []Widening{{Kind: Condition, Field: "spec.match.conditions[0]", Name: "not-system", PodFields: []string{tierName}}},
		},
		"only the widening rules of a policy": {
			policy: policy(builder.MakePolicy("p").Filter("pinned", "!has(pod.metadata.labels.pin) || "+zone+" == 'a'").
				Filter("gold-pool", tier+" == 'gold' || "+pool+" != 'gold'")),
			want: []Widening{{Kind: Filter, Field: "spec.filters[1]", Name: "gold-pool", PodFields: []string{tierName}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checked, errs := env.Check(tc.policy, nil)
			if len(errs) > 0 {
				t.Fatalf("the policy does not check: %v", errs.ToAggregate())
			}
			if diff := cmp.Diff(tc.want, Widenings(tc.policy, checked)); diff != "" {
				t.Errorf("widenings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSamplesRestrict: the shipped sample policies read pods only to
// restrict them (GPU nodes for pods that request GPUs, a spread by the
// app label in a score): none is reported.
func TestSamplesRestrict(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	samples := filepath.Join("..", "..", "..", "config", "samples")
	policies, err := manifest.ReadPolicies(nil, []string{samples, filepath.Join(samples, "configmap-params")})
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) < 10 {
		t.Fatalf("%d sample policies read, want every one of config/samples", len(policies))
	}
	for _, p := range policies {
		checked, errs := env.Check(p, nil)
		if len(errs) > 0 {
			t.Fatalf("%s does not check: %v", p.Name, errs.ToAggregate())
		}
		if got := Widenings(p, checked); len(got) > 0 {
			t.Errorf("%s: %+v, want none", p.Name, got)
		}
	}
}
