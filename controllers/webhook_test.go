package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
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

// hugePolicy is the largest invalid policy the API accepts: 64 filters
// whose expression and messageExpression are 5,120 characters of undeclared
// identifiers, nope0 && nope1 && ... (650 KB of expressions).
func hugePolicy() *schedv1alpha1.SchedulingPolicy {
	var b strings.Builder
	for i := 0; ; i++ {
		next := fmt.Sprintf("nope%d", i)
		if i > 0 {
			next = " && " + next
		}
		if b.Len()+len(next) > 5120 {
			break
		}
		b.WriteString(next)
	}
	p := &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "huge"}}
	for i := range 64 {
		p.Spec.Filters = append(p.Spec.Filters, schedv1alpha1.Rule{Name: fmt.Sprintf("r%d", i), Expression: b.String(), MessageExpression: b.String()})
	}
	return p
}

// TestValidatorDeniesHugePolicySmall: the largest invalid policy is denied
// with a short message that lists the first errors and says there are
// more, and the request allocates little (it once built 70 MB of error
// text, and took the manager from 167 MB to 1.3 GB).
func TestValidatorDeniesHugePolicySmall(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	v := &PolicyValidator{Compiler: engine.NewCompiler(env)}
	p := hugePolicy()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = v.ValidateCreate(t.Context(), p)
	runtime.ReadMemStats(&after)

	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	const maxDenial = 16 << 10
	if n := len(err.Error()); n > maxDenial {
		t.Errorf("the denial is %d bytes, want at most %d", n, maxDenial)
	}
	causes := status.Status().Details.Causes
	if len(causes) != MaxDenialErrors+1 {
		t.Errorf("%d causes, want %d errors and a last one saying there are more", len(causes), MaxDenialErrors)
	}
	if last := causes[len(causes)-1]; !strings.Contains(last.Message, "too many errors") {
		t.Errorf("the last cause is %q, want it to say there are too many errors", last.Message)
	}
	// Everything the request allocated, garbage included: a bound on what
	// it adds to the heap, whenever the GC runs.
	const maxAllocated = 50 << 20
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > maxAllocated {
		t.Errorf("the request allocated %d MiB, want at most %d", allocated>>20, maxAllocated>>20)
	}
}

// TestValidatorRespectsTheRequest: a request whose context is done, or
// that gives up waiting while another compile runs, is denied with why,
// and the next one is served.
func TestValidatorRespectsTheRequest(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	v := &PolicyValidator{Compiler: engine.NewCompiler(env)}
	valid := policyWithFilters("true")

	done, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("the API server gave up"))
	if _, err := v.ValidateCreate(done, valid); !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "the API server gave up") {
		t.Errorf("a request already done: got %v, want a Timeout error with its cause", err)
	}

	// Another compile holds the only slot.
	release, err := v.acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waiting, cancel := context.WithCancelCause(t.Context())
	result := make(chan error)
	go func() {
		_, err := v.ValidateCreate(waiting, valid)
		result <- err
	}()
	cancel(errors.New("the API server gave up"))
	if err := <-result; !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "the API server gave up") {
		t.Errorf("a request waiting for its turn: got %v, want a Timeout error with its cause", err)
	}
	release()

	if _, err := v.ValidateCreate(t.Context(), valid); err != nil {
		t.Errorf("the next request: %v", err)
	}
}

// BenchmarkValidateHugePolicy measures the webhook's answer to hugePolicy.
func BenchmarkValidateHugePolicy(b *testing.B) {
	env, err := engine.NewEnvironment()
	if err != nil {
		b.Fatal(err)
	}
	v := &PolicyValidator{Compiler: engine.NewCompiler(env)}
	p := hugePolicy()
	b.ReportAllocs()
	var size int
	for b.Loop() {
		_, err := v.ValidateCreate(b.Context(), p)
		size = len(err.Error())
	}
	b.ReportMetric(float64(size), "denial-bytes")
}

// TestValidatorWarnsOfTenantWritableParams: a policy whose params are
// ConfigMaps (or another kind the built-in edit role writes) of the pod's
// own namespace is admitted with a warning naming the risk; params in a
// fixed namespace, or of a kind edit does not grant (TenantPlacement), are
// admitted without it.
func TestValidatorWarnsOfTenantWritableParams(t *testing.T) {
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	// The shipped TenantPlacement CRD types params, as LiveParamTypes does
	// in a cluster.
	data, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "scheduling.celsched.io_tenantplacements.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	paramTypes := engine.CRDParamTypes{}
	if err := paramTypes.Add(crd); err != nil {
		t.Fatal(err)
	}
	v := &PolicyValidator{Compiler: engine.NewCompiler(env), ParamTypes: paramTypes}
	warning := func(kind string) []string {
		return []string{"spec.paramRef: the params are " + kind + " objects of the pod's own namespace, which users with the built-in edit or admin role there can write, " +
			"so they can change where their own pods may run; for per-tenant params use TenantPlacement (scheduling.celsched.io/v1alpha1), " +
			"which they cannot write, or set paramRef.namespace (docs/security.md)"}
	}
	zones := "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in params.data['zones'].split(',')"
	cases := map[string]struct {
		policy *schedv1alpha1.SchedulingPolicy
		want   []string
	}{
		"ConfigMap of the pod's namespace": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").Filter("zone", zones).Obj(),
			want:   warning("ConfigMap"),
		},
		"ConfigMaps of the pod's namespace, by selector": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamSelector(map[string]string{"placement": "true"}, "", "").Filter("zone", zones).Obj(),
			want:   warning("ConfigMap"),
		},
		"Secret of the pod's namespace": {
			policy: builder.MakePolicy("p").ParamKind("v1", "Secret").ParamRef("placement", "", "").Filter("zone", "has(params.data)").Obj(),
			want:   warning("Secret"),
		},
		"Deployment of the pod's namespace": {
			policy: builder.MakePolicy("p").ParamKind("apps/v1", "Deployment").ParamRef("placement", "", "").Filter("replicas", "params.spec.replicas > 0").Obj(),
			want:   warning("Deployment"),
		},
		"ConfigMap of a fixed namespace": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "platform", "").Filter("zone", zones).Obj(),
		},
		"TenantPlacement of the pod's namespace": {
			policy: builder.MakePolicy("p").ParamKind("scheduling.celsched.io/v1alpha1", "TenantPlacement").ParamRef("placement", "", "").
				Filter("zone", "'a' in params.spec.zones").Obj(),
		},
		"no params": {
			policy: policyWithFilters("true"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := v.ValidateCreate(t.Context(), tc.policy)
			if err != nil {
				t.Fatalf("denied: %v", err)
			}
			if diff := cmp.Diff(tc.want, []string(got)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEditWritableKinds: editWritableKinds are exactly the namespaced
// resources that kube-apiserver's bootstrap system:aggregate-to-edit
// ClusterRole (aggregated into edit and admin) lets a user create and
// update, but those of the extensions group, which no longer serves them.
func TestEditWritableKinds(t *testing.T) {
	var edit *rbacv1.ClusterRole
	for _, r := range bootstrappolicy.ClusterRoles() {
		if r.Name == "system:aggregate-to-edit" {
			edit = &r
		}
	}
	if edit == nil {
		t.Fatal("no system:aggregate-to-edit ClusterRole in the bootstrap policy")
	}
	want := sets.New[string]()
	for _, rule := range edit.Rules {
		if !slices.Contains(rule.Verbs, "update") || !slices.Contains(rule.Verbs, "create") {
			continue
		}
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				if g != "extensions" && !strings.Contains(r, "/") {
					want.Insert(g + "/" + r)
				}
			}
		}
	}
	got := sets.New[string]()
	for gk, resource := range editWritableKinds {
		got.Insert(gk.Group + "/" + resource)
	}
	if diff := cmp.Diff(sets.List(want), sets.List(got)); diff != "" {
		t.Errorf("editWritableKinds, by group/resource (-edit role +list):\n%s", diff)
	}
}
