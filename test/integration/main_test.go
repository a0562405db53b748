// Package integration holds the tests that run against a real kube-apiserver
// and etcd (controller-runtime envtest). `make test` builds both from the Go
// module proxy into bin/ and points KUBEBUILDER_ASSETS at them.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// repoRoot is the repository root, relative to this package's directory.
var repoRoot = filepath.Join("..", "..")

// k8sClient talks to the envtest kube-apiserver.
var k8sClient client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd into bin/")
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// envtest runs no node lifecycle controller, so the not-ready taint that
	// this admission plugin puts on new nodes would never be removed.
	env.ControlPlane.GetAPIServer().Configure().Append("disable-admission-plugins", "TaintNodesByCondition")

	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the envtest control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the envtest control plane: %v\n", err)
		}
	}()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintf(os.Stderr, "building the scheme: %v\n", err)
		return 1
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		fmt.Fprintf(os.Stderr, "building the scheme: %v\n", err)
		return 1
	}
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating the client: %v\n", err)
		return 1
	}
	return m.Run()
}
