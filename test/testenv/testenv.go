// Package testenv starts the control plane that the integration tests and
// `make run` share: envtest's kube-apiserver and etcd (built into bin/ by
// hack/envtest-assets.sh) with the SchedulingPolicy CRD installed.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/cmd/manager/app"
)

// Start starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS, installs
// the CRDs of configDir/crd/bases and configDir/crd/external (OpenReports'
// Report) and the webhook configuration of
// configDir/webhook as kustomize renders it (the names of an install),
// pointed at a local serving address with a generated certificate (see
// WebhookServer). Stop the returned environment when done.
func Start(configDir string) (*envtest.Environment, *rest.Config, error) {
	return StartWithFeatureGates(configDir, nil)
}

// workloadAPIs are the API versions that kube-scheduler watches when a
// feature gate is on, and that kube-apiserver serves only when asked
// (--runtime-config): the PodGroups of GenericWorkload and the
// CompositePodGroups of CompositePodGroup.
var workloadAPIs = map[string]string{
	"GenericWorkload":   "scheduling.k8s.io/v1beta1",
	"CompositePodGroup": "scheduling.k8s.io/v1alpha3",
}

// StartWithFeatureGates is Start with feature gates on kube-apiserver
// (the manager's, for `make run FEATURE_GATES=...`), and the APIs that
// kube-scheduler watches under those gates served.
func StartWithFeatureGates(configDir string, gates map[string]bool) (*envtest.Environment, *rest.Config, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run through make (make test, make run), which builds kube-apiserver and etcd into bin/")
	}
	env := &envtest.Environment{
		// The OpenReports Report CRD too, so that the manager's reports
		// are written (controllers.ReportWriter).
		CRDDirectoryPaths:     []string{filepath.Join(configDir, "crd", "bases"), filepath.Join(configDir, "crd", "external")},
		ErrorIfCRDPathMissing: true,
	}
	webhooks, err := validatingWebhooks(filepath.Join(configDir, "webhook"))
	if err != nil {
		return nil, nil, err
	}
	env.WebhookInstallOptions.ValidatingWebhooks = webhooks
	// envtest runs no node lifecycle controller, so the not-ready taint that
	// this admission plugin puts on new nodes would never be removed.
	env.ControlPlane.GetAPIServer().Configure().Append("disable-admission-plugins", "TaintNodesByCondition")
	// Loopback, explicitly: without an advertise address kube-apiserver
	// looks for the host's default route, which some hosts (CI
	// containers, sandboxes, `unshare -n`) do not have.
	// A loopback address cannot back the kubernetes Service's endpoints:
	// nothing in this control plane reaches the API server through it.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	if len(gates) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Set("feature-gates", featuregates.String(gates))
		var apis []string
		for gate, api := range workloadAPIs {
			if gates[gate] {
				apis = append(apis, api+"=true")
			}
		}
		if len(apis) > 0 {
			sort.Strings(apis)
			env.ControlPlane.GetAPIServer().Configure().Set("runtime-config", strings.Join(apis, ","))
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the control plane: %w", err)
	}
	return env, cfg, nil
}

// WebhookServer is where the manager must serve the webhook for the
// control plane of Start: the host and port its configuration calls.
func WebhookServer(env *envtest.Environment) (host string, port int) {
	o := &env.WebhookInstallOptions
	return o.LocalServingHost, o.LocalServingPort
}

// SelfSignedWebhook sets o to serve the webhook where the control plane of
// Start calls it, with the certificate the manager provisions, as an
// install does: in a Secret of namespace (which must exist), its CA
// published in the webhook configuration.
func SelfSignedWebhook(env *envtest.Environment, o *app.Options, namespace string) {
	host, port := WebhookServer(env)
	o.WebhookHost, o.WebhookPort = host, port
	o.WebhookCerts = app.CertsSelfSigned
	o.WebhookCert = app.SelfSignedCert{
		Namespace:            namespace,
		Secret:               "celsched-webhook-server-cert",
		WebhookConfiguration: WebhookConfiguration,
		Hosts:                []string{host},
	}
}

// WaitWebhook waits until the API server calls the manager's webhook, or
// no longer does when active is false (it reads its configuration
// asynchronously, and the certificate may be new): until a server-side dry
// run of a policy that does not compile is denied as invalid, or admitted.
func WaitWebhook(ctx context.Context, c client.Client, active bool, timeout time.Duration) error {
	probe := &schedv1alpha1.SchedulingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"},
		Spec: schedv1alpha1.SchedulingPolicySpec{
			Filters: []schedv1alpha1.Rule{{Name: "typo", Expression: "node.metadata.lables['a'] == 'b'"}},
		},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if active {
			return apierrors.IsInvalid(last), nil
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the webhook did not become active=%v (last answer: %v): %w", active, last, err)
	}
	return nil
}

// WebhookConfiguration is the name of the ValidatingWebhookConfiguration
// that config/webhook renders.
const WebhookConfiguration = "celsched-validating-webhook-configuration"

// validatingWebhooks renders the kustomization dir and returns its
// ValidatingWebhookConfigurations.
func validatingWebhooks(dir string) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	var out []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, r := range resources.Resources() {
		if r.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := yaml.UnmarshalStrict(data, c); err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", r.GetName(), dir, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s renders no ValidatingWebhookConfiguration", dir)
	}
	return out, nil
}

// Client returns a client of the control plane that knows the built-in
// kinds, CustomResourceDefinition, SchedulingPolicy and OpenReports'
// Report.
func Client(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	if err := reportsv1alpha1.Install(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	return c, nil
}

// RunManager runs the manager in-process with opts (whose webhook serves
// where the control plane of Start calls it: SelfSignedWebhook) and waits
// until its webhook answers. stop cancels it and returns the error it
// stopped with.
func RunManager(ctx context.Context, cfg *rest.Config, c client.Client, opts app.Options) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(ctx)
	mgr, err := app.New(ctx, cfg, opts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	stop = func() error {
		cancel()
		if err := <-stopped; err != nil {
			return fmt.Errorf("the manager stopped with an error: %w", err)
		}
		return nil
	}
	if err := WaitWebhook(ctx, c, true, time.Minute); err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// WriteAdminKubeconfig writes a kubeconfig of a system:masters user of the
// control plane into dir, and returns its path: for kubectl, and for a
// manager run as a separate process.
func WriteAdminKubeconfig(env *envtest.Environment, cfg *rest.Config, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return "", fmt.Errorf("creating the admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
