package controllers

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
)

func policyWithFilters(exprs ...string) *schedv1alpha1.SchedulingPolicy {
	p := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	for i, e := range exprs {
		p.Spec.Filters = append(p.Spec.Filters, schedv1alpha1.Rule{Name: string(rune('a' + i)), Expression: e})
	}
	return p
}

// TestValidatorRatchets: with an API server whose compatibility version is
// 1.33, `sort()` (CEL lists library v3, Kubernetes 1.34) is refused in a new
// expression, but an expression stored before (by a newer or older
// celsched) stays updatable, as ValidatingAdmissionPolicy ratchets.
func TestValidatorRatchets(t *testing.T) {
	env, err := engine.NewEnvironmentFor(version.MajorMinor(1, 33))
	if err != nil {
		t.Fatal(err)
	}
	v := &PolicyValidator{Compiler: engine.NewCompiler(env)}
	const stored = "[2, 1].sort()[0] == 1"
	cases := map[string]struct {
		previous, policy *schedv1alpha1.SchedulingPolicy
		wantErr          string
	}{
		"create with a 1.34 function": {policy: policyWithFilters(stored), wantErr: `spec.filters[0].expression: Invalid value: "[2, 1].sort()[0] == 1": compilation failed: ERROR: <input>:1:12: undeclared reference to 'sort'`},
		"update keeping it":           {previous: policyWithFilters(stored), policy: policyWithFilters(stored, "true")},
		"update adding another": {previous: policyWithFilters(stored), policy: policyWithFilters(stored, "[3].sort()[0] == 3"),
			wantErr: `spec.filters[1].expression: Invalid value: "[3].sort()[0] == 3": compilation failed: ERROR: <input>:1:9: undeclared reference to 'sort'`},
		"update changing it": {previous: policyWithFilters(stored), policy: policyWithFilters("[1, 2].sort()[0] == 1"),
			wantErr: `spec.filters[0].expression: Invalid value: "[1, 2].sort()[0] == 1": compilation failed: ERROR: <input>:1:12: undeclared reference to 'sort'`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.previous == nil {
				_, err = v.ValidateCreate(t.Context(), tc.policy)
			} else {
				_, err = v.ValidateUpdate(t.Context(), tc.previous, tc.policy)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("denied: %v", err)
			case tc.wantErr != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an Invalid error with %q", err, tc.wantErr)
			}
		})
	}
}
