package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/controllers/webhookcert"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/test/builder"
)

// TestCertificateRotation runs the webhook server with the self-provisioned
// certificate, as the manager does, but with lifetimes of seconds: a serving
// certificate of 3 s (renewed at 2 s) under a CA of 8 s (renewed at about
// 5.3 s). It has its own webhook configuration, for policies labelled
// celsched.io/rotation-test, so the suite's webhook is not disturbed. For
// 12 s it checks, every 50 ms, that the API server's calls to the webhook
// succeed, and that the certificate served is trusted by
// the caBundle then in the configuration and has not expired. Then it
// clears the caBundle, as a GitOps sync of the configuration would, and
// checks the webhook answers again.
func TestCertificateRotation(t *testing.T) {
	ctx := t.Context()
	port := freePort(t)
	const (
		configName = "celsched-rotation-test"
		secretName = "celsched-rotation-test-cert"
		label      = "celsched.io/rotation-test"
	)
	path := "/validate-scheduling-celsched-io-v1alpha1-schedulingpolicy"
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vschedulingpolicy.rotation-test.celsched.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{schedv1alpha1.GroupVersion.Group}, APIVersions: []string{schedv1alpha1.GroupVersion.Version},
					Resources: []string{"schedulingpolicies"},
				},
			}},
		}},
	}
	if err := k8sClient.Create(ctx, config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, config) })
	t.Cleanup(func() {
		deleteObject(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: secretName}})
	})

	rotator := &webhookcert.Rotator{
		Client:               clientset,
		Secret:               types.NamespacedName{Namespace: managerNamespace, Name: secretName},
		WebhookConfiguration: configName,
		Hosts:                []string{"127.0.0.1"},
		Validity:             3 * time.Second,
		CAValidity:           8 * time.Second,
		PublishDelay:         500 * time.Millisecond,
	}
	server := webhook.NewServer(webhook.Options{
		Host: "127.0.0.1", Port: port,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = rotator.GetCertificate }},
	})
	mgr, err := ctrl.NewManager(testConfig, ctrl.Options{
		Scheme:        k8sClient.Scheme(),
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: server,
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.PolicyValidator{Compiler: engine.NewCompiler(env)}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(rotator); err != nil {
		t.Fatal(err)
	}
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("the webhook manager: %v", err)
		}
	})

	// The suite's own webhook validates every policy too, so the one that
	// answers is told by name. Once this webhook has denied a policy, the
	// API server calls it for every labelled policy, and with failurePolicy
	// Fail an admitted one shows that the call succeeded.
	labelled := func(rule schedv1alpha1.Rule) *schedv1alpha1.SchedulingPolicy {
		p := builder.MakePolicy("rotation-probe").FilterRules(rule).Obj()
		p.Labels = map[string]string{label: "true"}
		return p
	}
	invalid := labelled(schedv1alpha1.Rule{Name: "typo", Expression: "node.metadata.lables['a'] == 'b'"})
	denial := `admission webhook "vschedulingpolicy.rotation-test.celsched.io" denied the request`
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		last = k8sClient.Create(ctx, invalid.DeepCopy(), client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), denial), nil
	}); err != nil {
		t.Fatalf("the webhook never answered: %v", last)
	}
	valid := labelled(schedv1alpha1.Rule{Name: "any", Expression: "true"})
	answered := func(ctx context.Context) error {
		return k8sClient.Create(ctx, valid.DeepCopy(), client.DryRunAll)
	}

	// Every change of the caBundle, as the API server's informer sees it.
	watcher, err := clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + configName, ResourceVersion: config.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	var bundles []bundleSeen
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for e := range watcher.ResultChan() {
			if c, ok := e.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
				certs, _ := certutil.ParseCertsPEM(c.Webhooks[0].ClientConfig.CABundle)
				bundles = append(bundles, bundleSeen{time.Now(), certs})
			}
		}
	}()

	// The certificates served (and when first) and the CAs published over 12 s.
	served, published := map[string]time.Time{}, map[string]bool{}
	var leaves []*x509.Certificate
	var calls, handshakes int
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		if err := answered(ctx); err != nil {
			t.Fatalf("call %d after %d certificates: %v", calls, len(served), err)
		}
		calls++
		current := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: configName}, current); err != nil {
			t.Fatal(err)
		}
		bundle := current.Webhooks[0].ClientConfig.CABundle
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(bundle) {
			t.Fatalf("caBundle %q holds no certificate", bundle)
		}
		for i, c := range pemCerts(t, bundle) {
			published[c.SerialNumber.String()] = true
			if i == 0 && time.Now().After(c.NotAfter) {
				t.Fatalf("the signing CA %s expired at %s", c.Subject, c.NotAfter)
			}
		}
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("handshake %d against the published caBundle: %v", handshakes, err)
		}
		leaf := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		handshakes++
		if _, seen := served[leaf.SerialNumber.String()]; !seen {
			served[leaf.SerialNumber.String()] = time.Now()
			leaves = append(leaves, leaf)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d webhook calls and %d verified handshakes; %d serving certificates, %d CAs", calls, handshakes, len(served), len(published))
	// Renewed at 2 s (and when the CA changes): at least 5 in 12 s; the CA,
	// renewed at 5.3 s, at least twice.
	if len(served) < 5 || len(published) < 3 {
		t.Errorf("saw %d serving certificates and %d CAs in 12 s, want at least 5 and 3", len(served), len(published))
	}
	watcher.Stop()
	<-watched
	// A new CA joins the bundle beside the one before it, and signs served
	// certificates only after the API server had time to see it.
	for i := 1; i < len(bundles); i++ {
		before, now := bundles[i-1].certs, bundles[i].certs
		if len(before) > 0 && len(now) > 0 && !now[0].Equal(before[0]) && now[0].NotBefore.After(before[0].NotBefore) &&
			bundles[i].at.Before(before[0].NotAfter) && !slices.ContainsFunc(now, before[0].Equal) {
			t.Errorf("at %s the caBundle dropped the still valid CA %s for %s", bundles[i].at.Format(time.StampMilli), before[0].Subject, now[0].Subject)
		}
	}
	for _, leaf := range leaves {
		for i, b := range bundles {
			if i > 0 && len(b.certs) > 0 && leaf.CheckSignatureFrom(b.certs[0]) == nil && !slices.ContainsFunc(bundles[i-1].certs, b.certs[0].Equal) {
				if gap := served[leaf.SerialNumber.String()].Sub(b.at); gap < rotator.PublishDelay/2 {
					t.Errorf("certificate %s was served %s after its CA %s was published, want at least %s", leaf.SerialNumber.Text(16), gap, b.certs[0].Subject, rotator.PublishDelay/2)
				}
				break
			}
		}
	}

	// A sync from Git that clears the caBundle: the rotator puts it back.
	current := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: configName}, current); err != nil {
		t.Fatal(err)
	}
	current.Webhooks[0].ClientConfig.CABundle = nil
	if err := k8sClient.Update(ctx, current); err != nil {
		t.Fatal(err)
	}
	wiped := current.Generation
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: configName}, c); err != nil {
			return false, err
		}
		return c.Generation > wiped && len(c.Webhooks[0].ClientConfig.CABundle) > 0 && answered(ctx) == nil, nil
	}); err != nil {
		t.Fatalf("the caBundle was not restored: %v", err)
	}
}

// bundleSeen is a caBundle and when it was seen.
type bundleSeen struct {
	at    time.Time
	certs []*x509.Certificate
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// freePort returns a loopback port that is free now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
