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

// Start starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS and installs
// the CRDs of crdDir (config/crd/bases). Stop the returned environment when
// done.
func Start(crdDir string) (*envtest.Environment, *rest.Config, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run through make (make test, make run), which builds kube-apiserver and etcd into bin/")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Clean(crdDir)},
		ErrorIfCRDPathMissing: true,
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
