// Package webhookcert gives the validating webhook a serving certificate
// without cert-manager: a self-signed CA and a serving certificate kept in
// one Secret of the manager's namespace, the certificate served from memory
// by every replica, and the CA published in the caBundle of the
// ValidatingWebhookConfiguration. Both are renewed when a third of their
// lifetime remains.
//
// Any replica may renew; writes use the Secret's resourceVersion, so two
// replicas renewing at once cannot both win. A new CA is first added to the
// caBundle beside the old one (which stays until it expires), and serving
// certificates it signs are issued only once a replica has seen that bundle
// in the webhook configuration for PublishDelay, so the API server never
// meets a certificate it does not trust.
package webhookcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// Keys of the certificate Secret, the names cert-manager uses.
const (
	// CAKey is the CA bundle: the signing CA first, then the previous CA
	// while it is still valid.
	CAKey = "ca.crt"
	// CAPrivateKeyKey is the signing CA's private key.
	CAPrivateKeyKey = "ca.key"
)

// Defaults of Rotator's durations.
const (
	DefaultValidity     = 90 * 24 * time.Hour
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultPublishDelay = 30 * time.Second
)

// backdate is how far before issuance a certificate becomes valid, for
// clocks that lag the issuer's.
const backdate = 5 * time.Minute

// Rotator provisions and rotates the serving certificate. Start it on every
// replica (it is a manager.Runnable that needs no leader election) and serve
// with GetCertificate.
type Rotator struct {
	Client kubernetes.Interface
	// Secret holds the CA and the serving certificate; it is created when
	// missing.
	Secret types.NamespacedName
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose
	// webhooks get the CA bundle.
	WebhookConfiguration string
	// Hosts are the DNS names and IP addresses of the serving certificate.
	Hosts []string
	// Validity and CAValidity are the lifetimes of a new serving certificate
	// and of a new CA (0: DefaultValidity, DefaultCAValidity).
	Validity, CAValidity time.Duration
	// PublishDelay is how long a new CA's bundle must have been in the
	// webhook configuration before the serving certificate is signed by it
	// (0: DefaultPublishDelay): the time the API server takes to see it.
	PublishDelay time.Duration

	serving atomic.Pointer[tls.Certificate]

	// published is the bundle seen in every webhook's caBundle, and since
	// when; only Start's loop reads and writes them.
	published   []byte
	publishedAt time.Time
}

// NeedLeaderElection is false: every replica serves the webhook, so every
// replica needs the certificate.
func (r *Rotator) NeedLeaderElection() bool { return false }

// GetCertificate is tls.Config.GetCertificate: the current serving
// certificate.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Ready is a readiness check: ready once a serving certificate is loaded.
func (r *Rotator) Ready(*http.Request) error {
	if r.serving.Load() == nil {
		return fmt.Errorf("no serving certificate yet from Secret %s", r.Secret)
	}
	return nil
}

// Start watches the Secret and the webhook configuration and keeps both
// current until ctx is done.
func (r *Rotator) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("secret", r.Secret, "webhookConfiguration", r.WebhookConfiguration)
	ctx = klog.NewContext(ctx, log)
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	secrets := informers.NewSharedInformerFactoryWithOptions(r.Client, 0, informers.WithNamespace(r.Secret.Namespace), byName(r.Secret.Name))
	webhooks := informers.NewSharedInformerFactoryWithOptions(r.Client, 0, byName(r.WebhookConfiguration))
	secretInformer := secrets.Core().V1().Secrets()
	webhookInformer := webhooks.Admissionregistration().V1().ValidatingWebhookConfigurations()

	trigger := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(trigger) },
		UpdateFunc: func(any, any) { poke(trigger) },
		DeleteFunc: func(any) { poke(trigger) },
	}
	if _, err := secretInformer.Informer().AddEventHandler(notify); err != nil {
		return err
	}
	if _, err := webhookInformer.Informer().AddEventHandler(notify); err != nil {
		return err
	}
	secrets.Start(ctx.Done())
	webhooks.Start(ctx.Done())
	defer secrets.Shutdown()
	defer webhooks.Shutdown()
	secrets.WaitForCacheSync(ctx.Done())
	webhooks.WaitForCacheSync(ctx.Done())

	timer := time.NewTimer(0)
	defer timer.Stop()
	retry := time.Second
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
		case <-timer.C:
		}
		secret, err := secretInformer.Lister().Secrets(r.Secret.Namespace).Get(r.Secret.Name)
		if apierrors.IsNotFound(err) {
			secret, err = nil, nil
		}
		var config *admissionregistrationv1.ValidatingWebhookConfiguration
		if err == nil {
			config, err = webhookInformer.Lister().Get(r.WebhookConfiguration)
			if apierrors.IsNotFound(err) {
				config, err = nil, nil
			}
		}
		next := retry
		if err == nil {
			next, err = r.sync(ctx, secret, config, time.Now())
		}
		if err != nil {
			log.Error(err, "Keeping the webhook's serving certificate", "retryAfter", retry)
			next = retry
			retry = min(2*retry, time.Minute)
		} else {
			retry = time.Second
		}
		timer.Reset(next)
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sync takes one step towards a valid CA, published in config, and a valid
// serving certificate signed by it, and loads the serving certificate. Each
// write is one step: its own event brings the next. It returns when to look
// again if nothing changes.
func (r *Rotator) sync(ctx context.Context, secret *corev1.Secret, config *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) (time.Duration, error) {
	log := klog.FromContext(ctx)
	if secret == nil {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: r.Secret.Name, Namespace: r.Secret.Namespace},
			Type:       corev1.SecretTypeTLS,
		}
		if err := r.renewCA(secret, nil, now); err != nil {
			return 0, err
		}
		if err := r.renewServing(secret, now); err != nil {
			return 0, err
		}
		log.Info("Creating the webhook's CA and serving certificate")
		_, err := r.Client.CoreV1().Secrets(r.Secret.Namespace).Create(ctx, secret, metav1.CreateOptions{})
		return time.Second, ignoreRace(err)
	}

	bundle, err := certutil.ParseCertsPEM(secret.Data[CAKey])
	if err != nil {
		bundle = nil
	}
	caKey, _ := keyutil.ParsePrivateKeyPEM(secret.Data[CAPrivateKeyKey])
	if len(bundle) == 0 || caKey == nil || !matches(bundle[0], caKey) || !valid(bundle[0], now) || !now.Before(renewal(bundle[0])) {
		log.Info("Renewing the webhook's CA")
		secret = secret.DeepCopy()
		if err := r.renewCA(secret, bundle, now); err != nil {
			return 0, err
		}
		return time.Second, r.update(ctx, secret)
	}
	if pruned := unexpired(bundle, now); len(pruned) < len(bundle) {
		log.Info("Removing expired CAs from the webhook's CA bundle", "removed", len(bundle)-len(pruned))
		secret = secret.DeepCopy()
		secret.Data[CAKey] = encode(pruned)
		return time.Second, r.update(ctx, secret)
	}
	ca := bundle[0]

	published, err := r.publish(ctx, config, secret.Data[CAKey], now)
	if err != nil {
		return 0, err
	}

	serving, servingErr := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if servingErr == nil && (serving.Leaf.CheckSignatureFrom(ca) != nil || !valid(serving.Leaf, now) ||
		!now.Before(renewal(serving.Leaf)) || !r.hostsMatch(serving.Leaf)) {
		servingErr = errors.New("due for renewal")
	}
	if servingErr != nil {
		if !published.IsZero() && !now.Before(published.Add(r.publishDelay())) {
			log.Info("Renewing the webhook's serving certificate", "reason", servingErr.Error())
			secret = secret.DeepCopy()
			if err := r.renewServing(secret, now); err != nil {
				return 0, err
			}
			return time.Second, r.update(ctx, secret)
		}
	}
	// The certificate in the Secret is served even while its successor
	// waits for the CA to be published: it is trusted until then.
	if servingErr == nil || (serving.Leaf != nil && valid(serving.Leaf, now)) {
		if current := r.serving.Load(); current == nil || !bytes.Equal(current.Certificate[0], serving.Certificate[0]) {
			log.Info("Serving the webhook's certificate", "serial", serving.Leaf.SerialNumber.Text(16), "notAfter", serving.Leaf.NotAfter)
			r.serving.Store(&serving)
		}
	}

	next := renewal(ca).Sub(now)
	if servingErr == nil {
		next = min(next, renewal(serving.Leaf).Sub(now))
	} else if !published.IsZero() {
		next = min(next, published.Add(r.publishDelay()).Sub(now))
	}
	for _, old := range bundle[1:] {
		next = min(next, old.NotAfter.Sub(now))
	}
	return max(next, 10*time.Millisecond), nil
}

// publish puts bundle into every webhook of config and returns since when
// this replica has seen it there (zero: not yet).
func (r *Rotator) publish(ctx context.Context, config *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte, now time.Time) (time.Time, error) {
	if config == nil {
		klog.FromContext(ctx).Info("The webhook configuration does not exist: the CA is not published")
		r.published = nil
		return time.Time{}, nil
	}
	stale := false
	for i := range config.Webhooks {
		stale = stale || !bytes.Equal(config.Webhooks[i].ClientConfig.CABundle, bundle)
	}
	if stale {
		config = config.DeepCopy()
		for i := range config.Webhooks {
			config.Webhooks[i].ClientConfig.CABundle = bundle
		}
		klog.FromContext(ctx).Info("Publishing the webhook's CA bundle")
		_, err := r.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, config, metav1.UpdateOptions{})
		r.published = nil
		return time.Time{}, ignoreRace(err)
	}
	if !bytes.Equal(r.published, bundle) {
		r.published, r.publishedAt = bundle, now
	}
	return r.publishedAt, nil
}

func (r *Rotator) update(ctx context.Context, secret *corev1.Secret) error {
	_, err := r.Client.CoreV1().Secrets(secret.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
	return ignoreRace(err)
}

// ignoreRace ignores the errors of losing a race with another replica: its
// write brings an event, and the next sync starts from it.
func ignoreRace(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// renewCA puts a new CA into secret, in front of the still valid CAs of
// previous.
func (r *Rotator) renewCA(secret *corev1.Secret, previous []*x509.Certificate, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the CA key: %w", err)
	}
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("celsched-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(orDefault(r.CAValidity, DefaultCAValidity)),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	ca, err := sign(template, template, key, key)
	if err != nil {
		return fmt.Errorf("signing the CA: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	setData(secret, CAKey, encode(append([]*x509.Certificate{ca}, unexpired(previous, now)...)))
	setData(secret, CAPrivateKeyKey, keyPEM)
	return nil
}

// renewServing puts a new serving certificate signed by the secret's CA
// into secret. It never outlives the CA.
func (r *Rotator) renewServing(secret *corev1.Secret, now time.Time) error {
	bundle, err := certutil.ParseCertsPEM(secret.Data[CAKey])
	if err != nil {
		return fmt.Errorf("reading the CA: %w", err)
	}
	caKey, err := keyutil.ParsePrivateKeyPEM(secret.Data[CAPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("reading the CA key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the serving key: %w", err)
	}
	notAfter := now.Add(orDefault(r.Validity, DefaultValidity))
	if bundle[0].NotAfter.Before(notAfter) {
		notAfter = bundle[0].NotAfter
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: r.Hosts[0]},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range r.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	cert, err := sign(template, bundle[0], key, caKey)
	if err != nil {
		return fmt.Errorf("signing the serving certificate: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	setData(secret, corev1.TLSCertKey, encode([]*x509.Certificate{cert}))
	setData(secret, corev1.TLSPrivateKeyKey, keyPEM)
	return nil
}

func sign(template, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey any) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, template, parent, key.Public(), parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func (r *Rotator) hostsMatch(c *x509.Certificate) bool {
	var got []string
	got = append(got, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		got = append(got, ip.String())
	}
	want := slices.Clone(r.Hosts)
	for i, h := range want {
		if ip := net.ParseIP(h); ip != nil {
			want[i] = ip.String()
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

func (r *Rotator) publishDelay() time.Duration {
	return orDefault(r.PublishDelay, DefaultPublishDelay)
}

// renewal is when a certificate is renewed: when a third of its lifetime
// remains.
func renewal(c *x509.Certificate) time.Time {
	issued := c.NotBefore.Add(backdate)
	return c.NotAfter.Add(-c.NotAfter.Sub(issued) / 3)
}

func valid(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && now.Before(c.NotAfter)
}

// matches reports whether key is the private key of c.
func matches(c *x509.Certificate, key any) bool {
	signer, ok := key.(crypto.Signer)
	if !ok {
		return false
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(c.PublicKey)
}

func unexpired(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certs {
		if now.Before(c.NotAfter) {
			out = append(out, c)
		}
	}
	return out
}

func encode(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})...)
	}
	return out
}

func setData(s *corev1.Secret, key string, value []byte) {
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[key] = value
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
