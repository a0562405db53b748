package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// tenantFilter admits the nodes whose zone is listed in the params
// ConfigMap's data.zones.
const tenantFilter = "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in params.data['zones'].split(',')"

func tenantPolicy(notFound schedv1alpha1.ParameterNotFoundActionType) *builder.PolicyWrapper {
	return builder.MakePolicy("tenant-zones").ParamKind("v1", "ConfigMap").ParamRef("placement", "", notFound).
		Filter("zone", tenantFilter)
}

// configMap is a params ConfigMap as an informer delivers it.
func configMap(t testing.TB, namespace, name string, data, objLabels map[string]string) *unstructured.Unstructured {
	t.Helper()
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: objLabels, UID: ktypes.UID("uid-" + namespace + "-" + name), ResourceVersion: "7"},
		Data:       data,
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

func staticParams(t testing.TB, objs ...*unstructured.Unstructured) *StaticParams {
	t.Helper()
	s, err := NewStaticParams(testEnv(t), objs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParamsCompile(t *testing.T) {
	t.Parallel()
	crdTypes := CRDParamTypes{}
	if err := crdTypes.Add(tenantCRD()); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		policy      *schedv1alpha1.SchedulingPolicy
		types       ParamTypes
		wantErr     string
		wantWarning string
	}{
		"ConfigMap data is typed": {
			policy: tenantPolicy("").Obj(),
		},
		"misspelt ConfigMap field": {
			policy:  builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("x", "", "").Filter("f", "'a' in params.dta").Obj(),
			wantErr: "spec.filters[0].expression: Invalid value: \"'a' in params.dta\": compilation failed: ERROR: <input>:1:14: undefined field 'dta'",
		},
		"ConfigMap data values are strings": {
			policy:  builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("x", "", "").Filter("f", "params.data['n'] > 1").Obj(),
			wantErr: "spec.filters[0].expression: Invalid value: \"params.data['n'] > 1\": compilation failed: ERROR: <input>:1:18: found no matching overload for '_>_' applied to '(string, int)'",
		},
		"unknown kind is dyn, with a warning": {
			policy:      builder.MakePolicy("p").ParamKind("example.com/v1", "TenantPlacement").ParamRef("x", "", "").Filter("f", "params.spec.zonez == 'a'").Obj(),
			wantWarning: "spec.paramKind: params is dyn: the schema of example.com/v1, Kind=TenantPlacement is not known to the compiler",
		},
		"CRD schema types params": {
			policy: builder.MakePolicy("p").ParamKind("example.com/v1", "TenantPlacement").ParamRef("x", "", "").Filter("f", "'a' in params.spec.zones").Obj(),
			types:  crdTypes,
		},
		"misspelt CRD field": {
			policy:  builder.MakePolicy("p").ParamKind("example.com/v1", "TenantPlacement").ParamRef("x", "", "").Filter("f", "'a' in params.spec.zonez").Obj(),
			types:   crdTypes,
			wantErr: "spec.filters[0].expression: Invalid value: \"'a' in params.spec.zonez\": compilation failed: ERROR: <input>:1:19: undefined field 'zonez'",
		},
		"params in a preEnqueue rule and a match condition": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("x", "", "").
				Condition("enabled", "params.data[?'enabled'].orValue('') == 'true'").
				PreEnqueue("approved", "'approved' in params.data", "").Obj(),
		},
		"paramRef with name and selector": {
			policy: func() *schedv1alpha1.SchedulingPolicy {
				p := tenantPolicy("").Obj()
				p.Spec.ParamRef.Selector = &metav1.LabelSelector{}
				return p
			}(),
			wantErr: "spec.paramRef: Invalid value: \"\": exactly one of name or selector must be set",
		},
		"paramRef without paramKind": {
			policy:  builder.MakePolicy("p").ParamRef("x", "", "").Filter("f", "params == null").Obj(),
			wantErr: "spec.paramKind: Required value: paramRef requires paramKind",
		},
		"bad apiVersion": {
			policy:  builder.MakePolicy("p").ParamKind("a/b/c", "X").ParamRef("x", "", "").Filter("f", "true").Obj(),
			wantErr: "spec.paramKind.apiVersion: Invalid value: \"a/b/c\": must be VERSION or GROUP/VERSION",
		},
		"params is null without paramKind": {
			policy: builder.MakePolicy("p").Filter("f", "params == null").Obj(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := NewCompiler(testEnv(t)).Compile(tc.policy, CompileOptions{ParamTypes: tc.types})
			var gotErr string
			if len(c.Errors) > 0 {
				gotErr = c.Errors[0].Error()
			}
			if tc.wantErr == "" && gotErr != "" || !strings.HasPrefix(gotErr, tc.wantErr) {
				t.Errorf("error:\n got %q\nwant prefix %q", gotErr, tc.wantErr)
			}
			var gotWarning string
			for _, w := range c.Warnings {
				gotWarning += w.FieldRef + ": " + w.Warning
			}
			if tc.wantWarning == "" && gotWarning != "" || !strings.HasPrefix(gotWarning, tc.wantWarning) {
				t.Errorf("warning:\n got %q\nwant prefix %q", gotWarning, tc.wantWarning)
			}
		})
	}
}

// tenantCRD is a small custom param kind.
func tenantCRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "tenantplacements.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "TenantPlacement", Plural: "tenantplacements"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"zones": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
							"pool":  str,
						}},
					},
				}},
			}},
		},
	}
}

// paramsOutcome is what TestParamsDecisions compares: per match result,
// the params used and the filter's verdict on each node.
type paramsOutcome struct {
	Params string
	Match  string
	Nodes  map[string]string
}

func TestParamsDecisions(t *testing.T) {
	t.Parallel()
	conv := NewConverter(testEnv(t), 0)
	zoneA := nodeInputFor(t, conv, "a1", "a")
	zoneC := nodeInputFor(t, conv, "c1", "c")
	objs := []*unstructured.Unstructured{
		configMap(t, "team-a", "placement", map[string]string{"zones": "a,b"}, map[string]string{"tier": "x"}),
		configMap(t, "team-c", "placement", map[string]string{"zones": "c"}, nil),
		configMap(t, "shared", "p1", map[string]string{"zones": "a,c"}, map[string]string{"tenant": "yes"}),
		configMap(t, "shared", "p2", map[string]string{"zones": "a"}, map[string]string{"tenant": "yes"}),
	}
	tests := map[string]struct {
		policy    *schedv1alpha1.SchedulingPolicy
		namespace string
		resolver  bool
		want      []paramsOutcome
	}{
		"team-a's params admit zone a": {
			policy: tenantPolicy("").Obj(), namespace: "team-a", resolver: true,
			want: []paramsOutcome{{Params: "ConfigMap team-a/placement", Match: "Pass", Nodes: map[string]string{"a1": "Pass", "c1": "Reject"}}},
		},
		"team-c's params admit zone c": {
			policy: tenantPolicy("").Obj(), namespace: "team-c", resolver: true,
			want: []paramsOutcome{{Params: "ConfigMap team-c/placement", Match: "Pass", Nodes: map[string]string{"a1": "Reject", "c1": "Pass"}}},
		},
		"no params, Deny": {
			policy: tenantPolicy(schedv1alpha1.DenyAction).Obj(), namespace: "team-b", resolver: true,
			want: []paramsOutcome{{Match: "node(s) rejected by SchedulingPolicy tenant-zones, rule paramRef: no params ConfigMap placement in namespace team-b found (parameterNotFoundAction Deny)"}},
		},
		"no params, Allow": {
			policy: tenantPolicy(schedv1alpha1.AllowAction).Obj(), namespace: "team-b", resolver: true,
		},
		"fixed namespace": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("p2", "shared", "").Filter("zone", tenantFilter).Obj(), namespace: "team-b", resolver: true,
			want: []paramsOutcome{{Params: "ConfigMap shared/p2", Match: "Pass", Nodes: map[string]string{"a1": "Pass", "c1": "Reject"}}},
		},
		"selector finds two, both apply": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamSelector(map[string]string{"tenant": "yes"}, "shared", "").Filter("zone", tenantFilter).Obj(), namespace: "team-b", resolver: true,
			want: []paramsOutcome{
				{Params: "ConfigMap shared/p1", Match: "Pass", Nodes: map[string]string{"a1": "Pass", "c1": "Pass"}},
				{Params: "ConfigMap shared/p2", Match: "Pass", Nodes: map[string]string{"a1": "Pass", "c1": "Reject"}},
			},
		},
		"match condition reads params": {
			policy: builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").
				Condition("has-zones", "params.data['zones'].contains('c')").Filter("zone", tenantFilter).Obj(),
			namespace: "team-a", resolver: true,
		},
		"no resolver follows failurePolicy Fail": {
			policy: tenantPolicy("").Obj(), namespace: "team-a",
			want: []paramsOutcome{{Match: "SchedulingPolicy tenant-zones: reading its params (ConfigMap placement): no params resolver (failurePolicy Fail)"}},
		},
		"no resolver under Ignore skips the policy": {
			policy: tenantPolicy("").Ignore().Obj(), namespace: "team-a",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compileOK(t, tc.policy)
			in, err := conv.Pod(makePod(tc.namespace, "p", nil), makeNamespace(tc.namespace, nil))
			if err != nil {
				t.Fatal(err)
			}
			if tc.resolver {
				in.Params = staticParams(t, objs...)
			}
			var got []paramsOutcome
			for _, m := range NewSnapshot(p).Match(context.Background(), in, nil) {
				o := paramsOutcome{Match: m.Decision.String()}
				if o.Match == "" {
					o.Match = "Pass"
				}
				if params := m.Decision.Policy.Params(); params != nil {
					o.Params = params.String()
				}
				if m.Decision.Verdict == Pass {
					o.Nodes = map[string]string{}
					for _, n := range []*NodeInput{zoneA, zoneC} {
						o.Nodes[n.Node.Name] = m.Decision.Policy.Filter(context.Background(), in, n).Verdict.String()
					}
				}
				got = append(got, o)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

func nodeInputFor(t *testing.T, conv *Converter, name, zone string) *NodeInput {
	return nodeInput(t, conv, name, map[string]string{"topology.kubernetes.io/zone": zone}, nil)
}

// TestParamsMemoizedPerParams: an expression that reads params, directly
// or through a variable, depends on the params object too, so its results
// on a node version are kept per params object version.
func TestParamsMemoizedPerParams(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").
		Variable("zones", "params.data['zones'].split(',')").
		Filter("direct", tenantFilter).
		Filter("via-variable", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in variables.zones").
		Filter("node-only", "node.metadata.name != ''").Obj())
	got := map[string]bool{}
	for _, r := range p.filters {
		got[r.name] = r.memo == memoNode && r.readsParams
	}
	want := map[string]bool{"direct": true, "via-variable": true, "node-only": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memoized per node version and params (-want +got):\n%s", diff)
	}

	// Two params versions on one node version: the node memo must not
	// serve one's result to the other.
	conv := NewConverter(testEnv(t), 0)
	node := nodeInputFor(t, conv, "a1", "a")
	in, err := conv.Pod(makePod("team-a", "p", nil), makeNamespace("team-a", nil))
	if err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for _, zones := range []string{"a", "c", "a"} {
		in.Params = staticParams(t, configMap(t, "team-a", "placement", map[string]string{"zones": zones}, nil))
		for _, m := range NewSnapshot(p).Match(context.Background(), in, nil) {
			verdicts = append(verdicts, m.Decision.Policy.Filter(context.Background(), in, node).Verdict.String())
		}
	}
	if diff := cmp.Diff([]string{"Pass", "Reject", "Pass"}, verdicts); diff != "" {
		t.Errorf("verdicts as the params change (-want +got):\n%s", diff)
	}
}

func TestParamsPreEnqueueHoldsWhenMissing(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").
		PreEnqueue("approved", "params.data[?'approved'].orValue('') == 'true'", "namespace is not approved").Obj())
	conv := NewConverter(testEnv(t), 0)
	tests := map[string]struct {
		objs []*unstructured.Unstructured
		want string
	}{
		"approved": {objs: []*unstructured.Unstructured{configMap(t, "team-a", "placement", map[string]string{"approved": "true"}, nil)}, want: ""},
		"not approved": {objs: []*unstructured.Unstructured{configMap(t, "team-a", "placement", map[string]string{"approved": "no"}, nil)},
			want: "held by SchedulingPolicy p, rule approved: namespace is not approved"},
		"missing": {want: "held by SchedulingPolicy p, rule paramRef: no params ConfigMap placement in namespace team-a found (parameterNotFoundAction Deny)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := conv.Pod(makePod("team-a", "p", nil), makeNamespace("team-a", nil))
			if err != nil {
				t.Fatal(err)
			}
			in.Params = staticParams(t, tc.objs...)
			matched, d := p.MatchAndPreEnqueue(context.Background(), in)
			if !matched {
				t.Fatal("not matched")
			}
			if got := d.String(); got != tc.want {
				t.Errorf("decision: got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParamsDynCost(t *testing.T) {
	t.Parallel()
	p := NewCompiler(testEnv(t)).Compile(builder.MakePolicy("p").ParamKind("example.com/v1", "TenantPlacement").ParamRef("x", "", "").
		Filter("f", "'a' in params.spec.zones").Obj(), CompileOptions{})
	if err := p.Err(); err != nil {
		t.Errorf("an expression over dyn params must have a bounded estimate: %v", err)
	}
}

// TestParamsOnlyMemo: an expression that reads only params (here a
// variable) is evaluated once per params version, and a new version is
// evaluated anew.
func TestParamsOnlyMemo(t *testing.T) {
	t.Parallel()
	p := compileOK(t, builder.MakePolicy("p").ParamKind("v1", "ConfigMap").ParamRef("placement", "", "").
		Variable("zones", "params.data['zones'].split(',')").
		Filter("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in variables.zones").Obj())
	if !p.variables[0].paramsOnly || p.filters[0].paramsOnly || !p.filters[0].readsParams {
		t.Fatalf("paramsOnly: variable %v, filter %v; filter reads params %v", p.variables[0].paramsOnly, p.filters[0].paramsOnly, p.filters[0].readsParams)
	}
	conv := NewConverter(testEnv(t), 0)
	nodes := []*NodeInput{nodeInputFor(t, conv, "a1", "a"), nodeInputFor(t, conv, "c1", "c")}
	in, err := conv.Pod(makePod("team-a", "p", nil), makeNamespace("team-a", nil))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, zones := range []string{"a", "c", "a"} {
		cm := configMap(t, "team-a", "placement", map[string]string{"zones": zones}, nil)
		cm.SetResourceVersion(fmt.Sprint(i))
		in.Params = staticParams(t, cm)
		for _, m := range NewSnapshot(p).Match(context.Background(), in, nil) {
			for _, n := range nodes {
				got = append(got, m.Decision.Policy.Filter(context.Background(), in, n).Verdict.String())
			}
			entries := 0
			m.Decision.Policy.Params().memo.Range(func(any, any) bool { entries++; return true })
			if entries != 1 {
				t.Errorf("params version %d: %d memo entries, want 1 (the variable)", i, entries)
			}
		}
	}
	if diff := cmp.Diff([]string{"Pass", "Reject", "Reject", "Pass", "Pass", "Reject"}, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}
