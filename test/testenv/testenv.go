// Package testenv starts the control plane that the integration tests and
// `make run` share: envtest's kube-apiserver and etcd (built into bin/ by
// hack/envtest-assets.sh) with the SchedulingPolicy CRD installed.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS, installs
// the CRDs of configDir/crd/bases and the webhook configuration of
// configDir/webhook, pointed at a local serving address with a generated
// certificate (see WebhookServer). Stop the returned environment when done.
func Start(configDir string) (*envtest.Environment, *rest.Config, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run through make (make test, make run), which builds kube-apiserver and etcd into bin/")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(configDir, "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(configDir, "webhook")},
		},
	}
	// envtest runs no node lifecycle controller, so the not-ready taint that
	// this admission plugin puts on new nodes would never be removed.
	env.ControlPlane.GetAPIServer().Configure().Append("disable-admission-plugins", "TaintNodesByCondition")
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the control plane: %w", err)
	}
	return env, cfg, nil
}

// WebhookServer is where the manager must serve the webhook for the
// control plane of Start: host, port and the directory of its certificate.
func WebhookServer(env *envtest.Environment) (host string, port int, certDir string) {
	o := &env.WebhookInstallOptions
	return o.LocalServingHost, o.LocalServingPort, o.LocalServingCertDir
}
