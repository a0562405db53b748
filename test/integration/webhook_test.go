package integration

import (
	"context"
	"errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/testenv"
)

// webhookConfiguration is the name of config/webhook's configuration.
const webhookConfiguration = testenv.WebhookConfiguration

// TestWebhookDeniesInvalidPolicies: creates and updates that do not
// compile are denied at apply time, with the field path and CEL position,
// in a server-side dry run too, and nothing is stored; warnings come back to
// the client; every sample is admitted.
func TestWebhookDeniesInvalidPolicies(t *testing.T) {
	cases := map[string]struct {
		policy    *schedv1alpha1.SchedulingPolicy
		field     string
		wantparts []string
	}{
		"misspelt field": {
			policy:    builder.MakePolicy("wh-misspelt").FilterRules(schedv1alpha1.Rule{Name: "typo", Expression: "node.metadata.lables['a'] == 'b'"}).Obj(),
			field:     "spec.filters[0].expression",
			wantparts: []string{`Invalid value: "node.metadata.lables['a'] == 'b'": compilation failed: ERROR: <input>:1:14: undefined field 'lables'`},
		},
		"type error": {
			policy:    builder.MakePolicy("wh-type").FilterRules(schedv1alpha1.Rule{Name: "count", Expression: "size(pod.spec.containers)"}).Obj(),
			field:     "spec.filters[0].expression",
			wantparts: []string{"must evaluate to bool"},
		},
		"scope error": {
			policy: func() *schedv1alpha1.SchedulingPolicy {
				p := builder.MakePolicy("wh-scope").Obj()
				p.Spec.PreEnqueue = []schedv1alpha1.Rule{{Name: "node-in-preenqueue", Expression: "node.metadata.name != ''"}}
				return p
			}(),
			field:     "spec.preEnqueue[0].expression",
			wantparts: []string{"node at line 1, column 1 is not available in preEnqueue"},
		},
		"invalid override selector": {
			policy: func() *schedv1alpha1.SchedulingPolicy {
				p := builder.MakePolicy("wh-override").Filter("f", "true").Obj()
				p.Spec.EnforcementOverrides = []schedv1alpha1.EnforcementOverride{{
					NamespaceSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}},
					Enforcement:       schedv1alpha1.Enforce,
				}}
				return p
			}(),
			field:     "spec.enforcementOverrides[0].namespaceSelector",
			wantparts: []string{`"Near" is not a valid label selector operator`},
		},
		"overlapping waves": {
			policy: func() *schedv1alpha1.SchedulingPolicy {
				p := builder.MakePolicy("wh-waves").Audit().Filter("f", "true").Obj()
				sel := metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}
				p.Spec.Rollout = &schedv1alpha1.Rollout{Waves: []schedv1alpha1.RolloutWave{
					{Name: "one", NamespaceSelector: sel, Soak: metav1.Duration{Duration: time.Hour}},
					{Name: "two", NamespaceSelector: sel, Soak: metav1.Duration{Duration: time.Hour}},
				}}
				return p
			}(),
			field:     "spec.rollout.waves[1].namespaceSelector",
			wantparts: []string{"Duplicate value", "the namespaces of spec.rollout.waves[0]: this wave would have none"},
		},
		"an empty wave selector before the last": {
			policy: func() *schedv1alpha1.SchedulingPolicy {
				p := builder.MakePolicy("wh-waves-all").Audit().Filter("f", "true").Obj()
				p.Spec.Rollout = &schedv1alpha1.Rollout{Waves: []schedv1alpha1.RolloutWave{
					{Name: "all", Soak: metav1.Duration{Duration: time.Hour}},
					{Name: "dev", NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}, Soak: metav1.Duration{Duration: time.Hour}},
				}}
				return p
			}(),
			field:     "spec.rollout.waves[0].namespaceSelector",
			wantparts: []string{"selects every namespace: only the last wave may"},
		},
		"over cost": {
			policy: builder.MakePolicy("wh-cost").FilterRules(schedv1alpha1.Rule{Name: "unique-images", Expression: "pod.spec.containers.all(c, pod.spec.containers.all(d, " +
				"pod.spec.containers.all(e, c.image != d.image || d.image != e.image || c == e)))"}).Obj(),
			field:     "spec.filters[0].expression",
			wantparts: []string{"Forbidden: estimated cost", "exceeds the limit of 10000000"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, dryRun := range []bool{false, true} {
				var opts []client.CreateOption
				if dryRun {
					opts = append(opts, client.DryRunAll)
				}
				err := k8sClient.Create(t.Context(), tc.policy.DeepCopy(), opts...)
				assertDenied(t, err, tc.field, tc.wantparts...)
			}
			if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: tc.policy.Name}, &schedv1alpha1.SchedulingPolicy{}); !apierrors.IsNotFound(err) {
				t.Errorf("a denied policy was stored: %v", err)
			}
		})
	}

	t.Run("an update that breaks a policy is denied and changes nothing", func(t *testing.T) {
		p := applyPolicy(t, builder.MakePolicy("wh-update").FilterRules(schedv1alpha1.Rule{Name: "ok", Expression: "true"}).Obj())
		stored := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), stored); err != nil {
			t.Fatal(err)
		}
		broken := stored.DeepCopy()
		broken.Spec.Filters[0].Expression = "pod.spec.nodeSelectr.size() > 0"
		assertDenied(t, k8sClient.Update(t.Context(), broken), "spec.filters[0].expression", "undefined field 'nodeSelectr'")
		after := &schedv1alpha1.SchedulingPolicy{}
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(p), after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != stored.ResourceVersion || after.Spec.Filters[0].Expression != "true" {
			t.Errorf("the denied update changed the policy: %+v", after.Spec)
		}
	})

	t.Run("warnings reach the client", func(t *testing.T) {
		warnings := &warningRecorder{}
		cfg := rest.CopyConfig(testConfig)
		cfg.WarningHandler = warnings
		c, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		p := builder.MakePolicy("wh-expensive").FilterRules(schedv1alpha1.Rule{Name: "env", Expression: "pod.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'DEBUG' || e.value != 'true'))"}).Obj()
		if err := c.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, p) })
		want := "spec.filters[0].expression: estimated cost 9445380 (with lists of up to 1024 items) exceeds the runtime limit of 1000000 per evaluation: it will be cut off on objects with long lists; the loop at line 1, column 24 is the place to start"
		if got := warnings.all(); len(got) != 1 || got[0] != want {
			t.Errorf("warnings %q, want [%q]", got, want)
		}
	})

	t.Run("params that the pod's namespace can write are admitted with a warning", func(t *testing.T) {
		warnings := &warningRecorder{}
		cfg := rest.CopyConfig(testConfig)
		cfg.WarningHandler = warnings
		c, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		// The shipped sample's TenantPlacement: no warning (its params
		// typed from the installed CRD).
		if err := c.Create(t.Context(), loadSample(t, "tenant-zones-and-pools"), client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if got := warnings.all(); len(got) != 0 {
			t.Errorf("tenant-zones-and-pools: warnings %q, want none", got)
		}
		if err := c.Create(t.Context(), loadPolicyFile(t, "configmap-params", "scheduling_v1alpha1_tenant-zones-configmap.yaml"), client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		want := "spec.paramRef: the params are ConfigMap objects of the pod's own namespace, which users with the built-in edit or admin role there can write, " +
			"so they can change where their own pods may run; for per-tenant params use TenantPlacement (scheduling.celsched.io/v1alpha1), " +
			"which they cannot write, or set paramRef.namespace (docs/security.md)"
		if got := warnings.all(); len(got) != 1 || got[0] != want {
			t.Errorf("tenant-zones-configmap: warnings %q, want [%q]", got, want)
		}
	})

	t.Run("every sample is admitted", func(t *testing.T) {
		for _, name := range []string{"avoid-maintenance", "batch-prefers-spot", "memory-headroom-audit", "ml-on-gpu-nodes", "payments-dedicated-pool", "require-cost-center", "tenant-zones-and-pools", "zone-preference"} {
			if err := k8sClient.Create(t.Context(), loadSample(t, name), client.DryRunAll); err != nil {
				t.Errorf("sample %s: %v", name, err)
			}
		}
	})
}

// assertDenied checks a webhook denial: an Invalid error whose cause names
// the field, with each part in its message.
func assertDenied(t *testing.T, err error, field string, parts ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `admission webhook "vschedulingpolicy.celsched.io" denied the request`) {
		t.Fatalf("got %v, want the webhook's Invalid error", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("%v is not an API status", err)
	}
	details := status.Status().Details
	if details == nil || len(details.Causes) != 1 || details.Causes[0].Field != field {
		t.Fatalf("causes %+v, want one for %s", details, field)
	}
	for _, p := range parts {
		if !strings.Contains(details.Causes[0].Message, p) {
			t.Errorf("cause %q lacks %q", details.Causes[0].Message, p)
		}
	}
}

type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.warnings...)
}

// withoutWebhook removes the webhook configuration for the rest of the test,
// as when a policy was stored before the webhook existed or while it was
// not installed, and puts it back when the test ends.
func withoutWebhook(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: webhookConfiguration}, cfg); err != nil {
		t.Fatal(err)
	}
	deleteObject(t, cfg)
	t.Cleanup(func() {
		restored := cfg.DeepCopy()
		restored.ResourceVersion, restored.UID = "", ""
		if err := k8sClient.Create(context.WithoutCancel(ctx), restored); err != nil {
			t.Errorf("restoring the webhook configuration: %v", err)
			return
		}
		waitWebhook(t, true)
	})
	waitWebhook(t, false)
}

// waitWebhook waits until the API server calls the webhook, or no longer
// does.
func waitWebhook(t *testing.T, active bool) {
	t.Helper()
	if err := testenv.WaitWebhook(context.WithoutCancel(t.Context()), k8sClient, active, waitTimeout); err != nil {
		t.Fatal(err)
	}
}
