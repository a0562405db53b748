package webhookcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"
)

// rotatorFixture runs Rotator.sync against a fake clientset with a clock
// of its own, as Start's loop does on each event: it reads the Secret and
// the webhook configuration and syncs until a step writes nothing.
type rotatorFixture struct {
	t      *testing.T
	client *fake.Clientset
	r      *Rotator
	now    time.Time
}

const (
	testValidity   = 90 * time.Hour
	testCAValidity = 900 * time.Hour
	testPublish    = 30 * time.Second
)

func newRotatorFixture(t *testing.T) *rotatorFixture {
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.example.com"}, {Name: "b.example.com"}},
	}
	f := &rotatorFixture{t: t, client: fake.NewClientset(config), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.r = &Rotator{
		Client: f.client, Secret: types.NamespacedName{Namespace: "system", Name: "cert"}, WebhookConfiguration: "hooks",
		Hosts: []string{"webhook.system.svc", "127.0.0.1"}, Validity: testValidity, CAValidity: testCAValidity, PublishDelay: testPublish,
	}
	return f
}

// settle syncs until a step writes nothing (at most 10 steps), advancing
// the clock by what sync asks for only when wait is set and by a second
// otherwise (the event of a write comes back at once), and returns when
// sync would look again.
func (f *rotatorFixture) settle() time.Duration {
	f.t.Helper()
	for range 10 {
		before := len(f.client.Actions())
		secret, config := f.secret(), f.config()
		next, err := f.r.sync(context.Background(), secret, config, f.now)
		if err != nil {
			f.t.Fatalf("sync at %v: %v", f.now, err)
		}
		wrote := false
		for _, a := range f.client.Actions()[before:] {
			wrote = wrote || a.GetVerb() != "get"
		}
		if !wrote {
			return next
		}
		f.now = f.now.Add(time.Second)
	}
	f.t.Fatal("sync keeps writing")
	return 0
}

// advance moves the clock and settles, and settles again after each wait
// sync asks for that falls before the end (a publish delay).
func (f *rotatorFixture) advance(d time.Duration) {
	f.t.Helper()
	end := f.now.Add(d)
	for {
		next := f.settle()
		if !f.now.Add(next).Before(end) {
			break
		}
		f.now = f.now.Add(next)
	}
	f.now = end
	f.settle()
}

func (f *rotatorFixture) secret() *corev1.Secret {
	s, err := f.client.CoreV1().Secrets("system").Get(context.Background(), "cert", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *rotatorFixture) config() *admissionregistrationv1.ValidatingWebhookConfiguration {
	c, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "hooks", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// bundle is the Secret's CA bundle.
func (f *rotatorFixture) bundle() []*x509.Certificate {
	f.t.Helper()
	certs, err := certutil.ParseCertsPEM(f.secret().Data[CAKey])
	if err != nil {
		f.t.Fatal(err)
	}
	return certs
}

// served is the certificate the rotator serves.
func (f *rotatorFixture) served() *x509.Certificate {
	f.t.Helper()
	c, err := f.r.GetCertificate(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return c.Leaf
}

// check asserts what must always hold once settled: every webhook carries
// the Secret's bundle, and the served certificate is the Secret's, valid
// now, for the hosts, and signed by a CA of the published bundle.
func (f *rotatorFixture) check(when string) {
	f.t.Helper()
	secret, config := f.secret(), f.config()
	for i := range config.Webhooks {
		if w := &config.Webhooks[i]; !bytes.Equal(w.ClientConfig.CABundle, secret.Data[CAKey]) {
			f.t.Errorf("%s: webhook %s has another CA bundle than the Secret's", when, w.Name)
		}
	}
	served := f.served()
	if !bytes.Contains(secret.Data[corev1.TLSCertKey], encode([]*x509.Certificate{served})) {
		f.t.Errorf("%s: the served certificate is not the Secret's", when)
	}
	if !valid(served, f.now) || !f.r.hostsMatch(served) {
		f.t.Errorf("%s: served certificate valid %v..%v at %v, hosts %v %v", when, served.NotBefore, served.NotAfter, f.now, served.DNSNames, served.IPAddresses)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(config.Webhooks[0].ClientConfig.CABundle) {
		f.t.Fatalf("%s: the published bundle does not parse", when)
	}
	if _, err := served.Verify(x509.VerifyOptions{Roots: pool, DNSName: "webhook.system.svc", CurrentTime: f.now}); err != nil {
		f.t.Errorf("%s: the API server would not trust the served certificate: %v", when, err)
	}
}

// TestRotatorFirstStartAndRenewal: a first start creates the Secret with a
// CA and a serving certificate and publishes the CA in every webhook; the
// serving certificate is renewed when a third of its lifetime remains (not
// before), by the same CA, with no publish delay (the bundle does not
// change).
func TestRotatorFirstStartAndRenewal(t *testing.T) {
	f := newRotatorFixture(t)
	if err := f.r.Ready(nil); err == nil {
		t.Fatal("ready before any certificate")
	}
	f.settle()
	f.check("first start")
	if err := f.r.Ready(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(f.bundle()); n != 1 {
		t.Fatalf("bundle of %d CAs after the first start, want 1", n)
	}
	first, ca := f.served(), f.bundle()[0]

	// Two thirds of the lifetime (from issuance, five minutes after
	// NotBefore): not yet.
	issued := first.NotBefore.Add(5 * time.Minute)
	due := issued.Add(first.NotAfter.Sub(issued) * 2 / 3)
	f.advance(due.Sub(f.now) - time.Minute)
	if !f.served().Equal(first) {
		t.Fatal("the serving certificate was renewed before a third of its lifetime remained")
	}
	f.advance(2 * time.Minute)
	f.check("renewal")
	renewed := f.served()
	if renewed.Equal(first) || renewed.CheckSignatureFrom(ca) != nil || !f.bundle()[0].Equal(ca) {
		t.Errorf("renewal: want a new serving certificate from the same CA")
	}
}

// TestRotatorCARotation: at a third of the CA's lifetime a new CA goes in
// front of the bundle and the old one stays; the serving certificate is
// re-issued by the new CA only once the bundle has been published for
// PublishDelay, and until then the old certificate is served; the old CA
// leaves the bundle when it expires.
func TestRotatorCARotation(t *testing.T) {
	f := newRotatorFixture(t)
	f.settle()
	oldCA := f.bundle()[0]

	// Up to a minute before the CA's renewal, the serving certificate
	// renewed on its own schedule; then past the CA's renewal.
	f.advance(renewal(oldCA).Sub(f.now) - time.Minute)
	f.check("before the CA renewal")
	before := f.served()
	f.now = renewal(oldCA).Add(time.Second)
	// The step that renews the CA and the one that publishes the bundle,
	// with no wait.
	f.settle()
	bundle := f.bundle()
	if len(bundle) != 2 || !bundle[1].Equal(oldCA) || bundle[0].Equal(oldCA) {
		t.Fatalf("after the CA renewal, want the new CA and the old one in the bundle, got %d", len(bundle))
	}
	if served := f.served(); served.CheckSignatureFrom(oldCA) != nil {
		t.Fatalf("the serving certificate changed before the new bundle was published for %v", testPublish)
	}
	f.check("new CA published, old certificate served")

	f.advance(testPublish + time.Second)
	f.check("after the publish delay")
	if served := f.served(); served.Equal(before) || served.CheckSignatureFrom(bundle[0]) != nil {
		t.Error("after the publish delay, want a serving certificate signed by the new CA")
	}

	// The old CA expires: it leaves the bundle, which is published again.
	f.advance(oldCA.NotAfter.Sub(f.now) + time.Second)
	f.check("old CA expired")
	if b := f.bundle(); len(b) != 1 || !b[0].Equal(bundle[0]) {
		t.Errorf("after the old CA expired, want only the new CA in the bundle, got %d", len(b))
	}
}

// TestRotatorRepairs: what a person or a GitOps sync does to the Secret or
// the webhook configuration is repaired: a serving certificate edited by
// hand, a CA key removed (a new CA, the old one kept trusted), a webhook
// configuration recreated without a caBundle, and a deleted Secret.
func TestRotatorRepairs(t *testing.T) {
	f := newRotatorFixture(t)
	f.settle()

	edit := func(what string, change func(*corev1.Secret)) {
		t.Helper()
		s := f.secret()
		change(s)
		if _, err := f.client.CoreV1().Secrets("system").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.advance(testPublish + time.Second)
		f.check(what)
	}

	edit("serving certificate replaced by garbage", func(s *corev1.Secret) { s.Data[corev1.TLSCertKey] = []byte("not a certificate") })

	oldCA := f.bundle()[0]
	edit("CA key removed", func(s *corev1.Secret) { delete(s.Data, CAPrivateKeyKey) })
	if b := f.bundle(); len(b) != 2 || b[0].Equal(oldCA) || !b[1].Equal(oldCA) {
		t.Errorf("after the CA key was removed, want a new CA in front of the old one, got %d CAs", len(b))
	}

	// The webhook configuration recreated by a GitOps sync, with no
	// caBundle: published again.
	if err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "hooks", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle() // no configuration: nothing to publish, nothing fails
	if _, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.example.com"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	f.check("webhook configuration recreated")

	// The Secret deleted: a new CA and certificate, published.
	if err := f.client.CoreV1().Secrets("system").Delete(context.Background(), "cert", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.advance(testPublish + time.Second)
	f.check("Secret deleted")
}
