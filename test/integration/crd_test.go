package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

var samplesDir = filepath.Join(repoRoot, "config", "samples")

// sampleFiles returns the sample policies, and checks that the kustomization
// lists exactly them, so `kubectl apply -k config/samples` applies them all.
func sampleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(samplesDir, "scheduling_v1alpha1_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("want at least 5 sample policies in %s, found %d", samplesDir, len(files))
	}
	data, err := os.ReadFile(filepath.Join(samplesDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(data, &kustomization); err != nil {
		t.Fatalf("config/samples/kustomization.yaml: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	listed := slices.Clone(kustomization.Resources)
	slices.Sort(listed)
	if diff := cmp.Diff(names, listed); diff != "" {
		t.Errorf("config/samples/kustomization.yaml resources differ from the sample files (-files +listed):\n%s", diff)
	}
	return files
}

// TestSamplesRoundTrip creates every sample policy with the generated CRD
// installed and reads it back: the apiserver must accept it and keep every
// field (a misspelt or unknown field would be pruned and show up as a diff).
func TestSamplesRoundTrip(t *testing.T) {
	for _, file := range sampleFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			ctx := t.Context()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// The typed API must know every field of the sample.
			var typed schedv1alpha1.SchedulingPolicy
			if err := yaml.UnmarshalStrict(data, &typed); err != nil {
				t.Fatalf("sample does not decode strictly into SchedulingPolicy: %v", err)
			}
			sample := decodeUnstructured(t, data)
			wantSpec := sample.DeepCopy().Object["spec"]

			if err := k8sClient.Create(ctx, sample); err != nil {
				t.Fatalf("creating sample: %v", err)
			}
			t.Cleanup(func() { deletePolicy(t, sample.GetName()) })

			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(schedv1alpha1.GroupVersion.WithKind("SchedulingPolicy"))
			if err := k8sClient.Get(ctx, client.ObjectKey{Name: sample.GetName()}, got); err != nil {
				t.Fatalf("reading sample back: %v", err)
			}
			if diff := cmp.Diff(wantSpec, got.Object["spec"]); diff != "" {
				t.Errorf("spec read back differs from the sample (-sample +stored):\n%s", diff)
			}
		})
	}
}

// TestDefaults checks the defaults the CRD schema applies.
func TestDefaults(t *testing.T) {
	ctx := t.Context()
	policy := newPolicy(t, "defaults", `
filters:
- name: zone
  expression: "true"
scores:
- name: pods
  expression: nodeInfo.podCount
placement:
  scores:
  - name: gold
    expression: "100"
`)
	if err := k8sClient.Create(ctx, policy); err != nil {
		t.Fatalf("creating policy: %v", err)
	}
	t.Cleanup(func() { deletePolicy(t, "defaults") })

	var got schedv1alpha1.SchedulingPolicy
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: "defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	want := schedv1alpha1.SchedulingPolicySpec{
		Enforcement:   schedv1alpha1.Enforce,
		FailurePolicy: schedv1alpha1.Fail,
		Filters:       []schedv1alpha1.Rule{{Name: "zone", Expression: "true"}},
		Scores: []schedv1alpha1.ScoreRule{{
			Name: "pods", Expression: "nodeInfo.podCount", Weight: 1, Normalization: schedv1alpha1.MinMax,
		}},
		Placement: &schedv1alpha1.PlacementRules{Scores: []schedv1alpha1.PlacementScore{{Name: "gold", Expression: "100", Weight: 1, Normalization: schedv1alpha1.MinMax}}},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
}

// cause is one field error of an Invalid response.
type cause struct {
	Field   string
	Type    metav1.CauseType
	Message string // a substring of the cause's message
}

// TestInvalidSpecsRejected proves that the apiserver refuses invalid specs
// with the field path of the problem, and that a refused create stores
// nothing.
func TestInvalidSpecsRejected(t *testing.T) {
	longExpression := "'" + strings.Repeat("a", schedv1alpha1.MaxExpressionLength) + "' != ''"
	tests := map[string]struct {
		spec string
		want []cause
	}{
		"bad enforcement enum": {
			spec: `
enforcement: Warn
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.enforcement", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Warn": supported values: "Enforce", "Audit"`}},
		},
		"bad override enforcement enum": {
			spec: `
enforcementOverrides: [{namespaceSelector: {matchLabels: {env: prod}}, enforcement: Warn}]
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.enforcementOverrides[0].enforcement", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Warn": supported values: "Enforce", "Audit"`}},
		},
		"override without enforcement": {
			spec: `
enforcementOverrides: [{namespaceSelector: {matchLabels: {env: prod}}}]
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.enforcementOverrides[0].enforcement", Type: metav1.CauseTypeFieldValueRequired, Message: "Required value"}},
		},
		"rollout soak of 0": {
			spec: `
enforcement: Audit
rollout: {waves: [{name: one, namespaceSelector: {matchLabels: {env: dev}}, soak: 0s}]}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.rollout.waves[0].soak", Type: metav1.CauseTypeFieldValueInvalid, Message: "soak must be longer than 0s"}},
		},
		"rollout gate below 0": {
			spec: `
enforcement: Audit
rollout: {waves: [{name: one, namespaceSelector: {matchLabels: {env: dev}}, soak: 1h, maxWouldReject: -1}]}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.rollout.waves[0].maxWouldReject", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be greater than or equal to 0"}},
		},
		"rollout with enforcement Enforce": {
			spec: `
enforcement: Enforce
rollout: {waves: [{name: one, namespaceSelector: {matchLabels: {env: dev}}, soak: 1h}]}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.enforcement", Type: metav1.CauseTypeFieldValueInvalid, Message: "spec.enforcement must be Audit with spec.rollout"}},
		},
		"bad remediation action": {
			spec: `
remediation: {action: Delete}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.remediation.action", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Delete": supported values: "Evict"`}},
		},
		"remediation maxUnavailable of 0": {
			spec: `
remediation: {action: Evict, maxUnavailable: 0}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.remediation.maxUnavailable", Type: metav1.CauseTypeFieldValueInvalid, Message: "must be an integer of at least 1 or a percentage from 1% to 100%"}},
		},
		"remediation maxUnavailable above 100 percent": {
			spec: `
remediation: {action: Evict, maxUnavailable: "150%"}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.remediation.maxUnavailable", Type: metav1.CauseTypeFieldValueInvalid, Message: "must be an integer of at least 1 or a percentage from 1% to 100%"}},
		},
		"remediation rate above 600": {
			spec: `
remediation: {action: Evict, rate: 601}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.remediation.rate", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be less than or equal to 600"}},
		},
		"bad failurePolicy enum": {
			spec: `
failurePolicy: Retry
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.failurePolicy", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Retry": supported values: "Fail", "Ignore"`}},
		},
		"bad normalization enum": {
			spec: `
scores: [{name: a, expression: "1", normalization: Linear}]`,
			want: []cause{{Field: "spec.scores[0].normalization", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Linear"`}},
		},
		"missing filter expression": {
			spec: `
filters:
- name: ok
  expression: "true"
- name: no-expression
  message: forgot the expression`,
			want: []cause{{Field: "spec.filters[1].expression", Type: metav1.CauseTypeFieldValueRequired, Message: "Required value"}},
		},
		"empty preEnqueue expression": {
			spec: `
preEnqueue: [{name: a, expression: ""}]`,
			want: []cause{{Field: "spec.preEnqueue[0].expression", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be at least 1 chars long"}},
		},
		"missing rule name": {
			spec: `
scores: [{expression: "1"}]`,
			want: []cause{{Field: "spec.scores[0].name", Type: metav1.CauseTypeFieldValueRequired, Message: "Required value"}},
		},
		"duplicate filter names": {
			spec: `
filters:
- {name: zone, expression: "true"}
- {name: zone, expression: "false"}`,
			want: []cause{{Field: "spec.filters[1]", Type: metav1.CauseTypeFieldValueDuplicate, Message: "Duplicate value"}},
		},
		"duplicate match condition names": {
			spec: `
match:
  conditions:
  - {name: c, expression: "true"}
  - {name: c, expression: "true"}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.match.conditions[1]", Type: metav1.CauseTypeFieldValueDuplicate, Message: "Duplicate value"}},
		},
		"duplicate variable names": {
			spec: `
variables:
- {name: zone, expression: "1"}
- {name: zone, expression: "2"}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.variables[1]", Type: metav1.CauseTypeFieldValueDuplicate, Message: "Duplicate value"}},
		},
		"rule name not a DNS label": {
			spec: `
filters: [{name: Zone_Check, expression: "true"}]`,
			want: []cause{{Field: "spec.filters[0].name", Type: metav1.CauseTypeFieldValueInvalid, Message: "should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"}},
		},
		"variable name not a CEL identifier": {
			spec: `
variables: [{name: my-zone, expression: "1"}]
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.variables[0].name", Type: metav1.CauseTypeFieldValueInvalid, Message: "should match '^[a-zA-Z_][a-zA-Z0-9_]*$'"}},
		},
		"weight below range": {
			spec: `
scores: [{name: a, expression: "1", weight: 0}]`,
			want: []cause{{Field: "spec.scores[0].weight", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be greater than or equal to 1"}},
		},
		"weight above range": {
			spec: `
scores: [{name: a, expression: "1", weight: 101}]`,
			want: []cause{{Field: "spec.scores[0].weight", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be less than or equal to 100"}},
		},
		"expression too long": {
			spec: `
filters: [{name: a, expression: "` + longExpression + `"}]`,
			want: []cause{{Field: "spec.filters[0].expression", Type: metav1.CauseType(field.ErrorTypeTooLong), Message: "may not be more than 5120 bytes"}},
		},
		"message too long": {
			spec: `
filters: [{name: a, expression: "true", message: "` + strings.Repeat("m", schedv1alpha1.MaxMessageLength+1) + `"}]`,
			want: []cause{{Field: "spec.filters[0].message", Type: metav1.CauseType(field.ErrorTypeTooLong), Message: "may not be more than 1024 bytes"}},
		},
		"too many filters": {
			spec: "\nfilters:\n" + manyRules(schedv1alpha1.MaxRulesPerList+1),
			want: []cause{{Field: "spec.filters", Type: metav1.CauseType(field.ErrorTypeTooMany), Message: "must have at most 64 items"}},
		},
		"paramRef without paramKind": {
			spec: `
paramRef: {name: placement}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec", Type: metav1.CauseTypeFieldValueInvalid, Message: "paramRef requires paramKind"}},
		},
		"paramKind without paramRef": {
			spec: `
paramKind: {apiVersion: v1, kind: ConfigMap}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec", Type: metav1.CauseTypeFieldValueInvalid, Message: "paramKind requires paramRef"}},
		},
		"paramRef with name and selector": {
			spec: `
paramKind: {apiVersion: v1, kind: ConfigMap}
paramRef: {name: placement, selector: {matchLabels: {a: b}}}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.paramRef", Type: metav1.CauseTypeFieldValueInvalid, Message: "exactly one of name or selector must be set"}},
		},
		"paramRef with neither name nor selector": {
			spec: `
paramKind: {apiVersion: v1, kind: ConfigMap}
paramRef: {namespace: shared}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.paramRef", Type: metav1.CauseTypeFieldValueInvalid, Message: "exactly one of name or selector must be set"}},
		},
		"bad parameterNotFoundAction enum": {
			spec: `
paramKind: {apiVersion: v1, kind: ConfigMap}
paramRef: {name: placement, parameterNotFoundAction: Skip}
filters: [{name: a, expression: "true"}]`,
			want: []cause{{Field: "spec.paramRef.parameterNotFoundAction", Type: metav1.CauseTypeFieldValueNotSupported, Message: `Unsupported value: "Skip": supported values: "Allow", "Deny"`}},
		},
		"placement score weight above range": {
			spec: `
placement: {scores: [{name: a, expression: "1", weight: 101}]}`,
			want: []cause{{Field: "spec.placement.scores[0].weight", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be less than or equal to 100"}},
		},
		"empty placement rules": {
			spec: `
placement: {filters: [], scores: []}`,
			want: []cause{{Field: "spec", Type: metav1.CauseTypeFieldValueInvalid, Message: "at least one of preEnqueue, filters, scores, placement.filters, placement.scores, preemption.victims or preemption.importance must be set"}},
		},
		"preemption without victims or importance": {
			spec: `
preemption: {}`,
			want: []cause{{Field: "spec.preemption", Type: metav1.CauseTypeFieldValueInvalid, Message: "set victims, importance or both"}},
		},
		"no rules at all": {
			spec: `
enforcement: Audit`,
			want: []cause{{Field: "spec", Type: metav1.CauseTypeFieldValueInvalid, Message: "at least one of preEnqueue, filters, scores, placement.filters, placement.scores, preemption.victims or preemption.importance must be set"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			policyName := "invalid-" + strings.ToLower(strings.ReplaceAll(name, " ", "-"))
			err := k8sClient.Create(ctx, newPolicy(t, policyName, tc.spec))
			if err == nil {
				deletePolicy(t, policyName)
				t.Fatal("the apiserver accepted the invalid policy")
			}
			assertInvalid(t, err, tc.want)

			// Nothing was stored.
			var got schedv1alpha1.SchedulingPolicy
			if err := k8sClient.Get(ctx, client.ObjectKey{Name: policyName}, &got); !apierrors.IsNotFound(err) {
				t.Errorf("after the rejected create, Get returned %v, want NotFound", err)
			}
		})
	}
}

// TestInvalidUpdateRejected proves that an invalid update is refused and leaves
// the stored policy as it was.
func TestInvalidUpdateRejected(t *testing.T) {
	ctx := t.Context()
	policy := newPolicy(t, "update-target", `
scores: [{name: spot, expression: "1", weight: 5}]`)
	if err := k8sClient.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePolicy(t, "update-target") })

	// Once the manager wrote the status, nothing else changes the object.
	stored := *waitPolicyReady(t, "update-target", metav1.ConditionTrue)
	update := stored.DeepCopy()
	update.Spec.Scores[0].Weight = 1000
	err := k8sClient.Update(ctx, update)
	assertInvalid(t, err, []cause{{Field: "spec.scores[0].weight", Type: metav1.CauseTypeFieldValueInvalid, Message: "should be less than or equal to 100"}})

	var after schedv1alpha1.SchedulingPolicy
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: "update-target"}, &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stored.Spec, after.Spec); diff != "" {
		t.Errorf("stored spec changed by a rejected update (-before +after):\n%s", diff)
	}
	if after.ResourceVersion != stored.ResourceVersion {
		t.Errorf("resourceVersion changed from %s to %s by a rejected update", stored.ResourceVersion, after.ResourceVersion)
	}
}

// assertInvalid checks that err is an Invalid error whose causes are exactly
// the wanted fields and types, with the wanted message substrings.
func assertInvalid(t *testing.T, err error, want []cause) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("Invalid error without details: %v", err)
	}
	var got []cause
	for _, c := range status.Status().Details.Causes {
		// The apiserver adds this cause whenever schema validation fails,
		// because it then skips the spec's x-kubernetes-validations rules.
		if c.Field == "<nil>" && strings.Contains(c.Message, "some validation rules were not checked") {
			continue
		}
		got = append(got, cause{Field: c.Field, Type: c.Type, Message: c.Message})
	}
	if len(got) != len(want) {
		t.Fatalf("want %d cause(s) %+v, got %+v", len(want), want, got)
	}
	for i := range want {
		if got[i].Field != want[i].Field || got[i].Type != want[i].Type {
			t.Errorf("cause %d: want field %q type %s, got field %q type %s (%s)",
				i, want[i].Field, want[i].Type, got[i].Field, got[i].Type, got[i].Message)
		}
		if !strings.Contains(got[i].Message, want[i].Message) {
			t.Errorf("cause %d (%s): message %q does not contain %q", i, got[i].Field, got[i].Message, want[i].Message)
		}
	}
	// The error text a kubectl user sees names the field too.
	for _, w := range want {
		if !strings.Contains(err.Error(), w.Field+":") {
			t.Errorf("error text %q does not name %s", err.Error(), w.Field)
		}
	}
}

// newPolicy builds an unstructured SchedulingPolicy with the given spec YAML,
// so that tests can send what a typed client could not (missing required
// fields, wrong enum values).
func newPolicy(t *testing.T, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	u := decodeUnstructured(t, []byte("apiVersion: scheduling.celsched.io/v1alpha1\nkind: SchedulingPolicy\nspec:\n"+indent(specYAML)))
	u.SetName(name)
	return u
}

// decodeUnstructured decodes a YAML object the way the apiserver's JSON
// decoder does (integers stay int64).
func decodeUnstructured(t *testing.T, data []byte) *unstructured.Unstructured {
	t.Helper()
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(jsonData); err != nil {
		t.Fatalf("decoding object: %v", err)
	}
	return u
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimPrefix(s, "\n"), "\n", "\n  ")
}

// manyRules returns n filter rules as YAML list items.
func manyRules(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "- {name: rule-%d, expression: \"true\"}\n", i)
	}
	return b.String()
}

func deletePolicy(t *testing.T, name string) {
	t.Helper()
	policy := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Delete(context.WithoutCancel(t.Context()), policy); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting policy %s: %v", name, err)
	}
}

// TestRolloutStatusValidated: the API server refuses a Paused rollout
// status without its pauseReason, and a lastAction whose action is not
// one of the four.
func TestRolloutStatusValidated(t *testing.T) {
	ctx := t.Context()
	policy := newPolicy(t, "rollout-status-target", `
filters: [{name: any, expression: "true"}]`)
	if err := k8sClient.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePolicy(t, "rollout-status-target") })
	stored := waitPolicyReady(t, "rollout-status-target", metav1.ConditionTrue)

	for name, tc := range map[string]struct {
		rollout schedv1alpha1.RolloutStatus
		want    cause
	}{
		"paused without a reason": {
			rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutPaused, Message: "paused by request"},
			want:    cause{Field: "status.rollout", Type: metav1.CauseTypeFieldValueInvalid, Message: "a Paused rollout has a pauseReason"},
		},
		"an unknown action": {
			rollout: schedv1alpha1.RolloutStatus{ObservedGeneration: 1, Phase: schedv1alpha1.RolloutProgressing,
				LastAction: &schedv1alpha1.RolloutActionRecord{ID: "promot/x", Action: "promot", Outcome: schedv1alpha1.ActionApplied, Time: metav1.Now()}},
			want: cause{Field: "status.rollout.lastAction.action", Type: metav1.CauseTypeFieldValueNotSupported, Message: `supported values: "pause", "resume", "promote", "abort"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			update := stored.DeepCopy()
			update.Status.Rollout = &tc.rollout
			assertInvalid(t, k8sClient.Status().Update(ctx, update), []cause{tc.want})
		})
	}
}
