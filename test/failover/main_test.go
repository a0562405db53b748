// Package failover tests the celsched manager binary as an operator runs it:
// as a process, started, stopped, killed and restarted against a real
// kube-apiserver and etcd (envtest), alone or as two replicas with leader
// election. Unlike test/integration, no manager runs in-process: TestMain
// builds ./cmd/manager once and each test starts the processes it needs.
//
// Every test shares one cluster, set up by TestMain: nodes in zones a, b
// and c, the policy no-zone-c that keeps every celsched pod out of zone c,
// and policies that match no pod. A pod bound in zone c is a pod placed
// against a policy.
package failover

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/test/testenv"
)

// repoRoot is the repository root, relative to this package's directory.
var repoRoot = filepath.Join("..", "..")

var (
	// k8sClient talks to the envtest kube-apiserver as its admin.
	k8sClient client.Client
	// clientset is the same, for watches.
	clientset kubernetes.Interface
	// kubeconfig is a kubeconfig file for the same, given to the managers.
	kubeconfig string
	// managerBinary is ./cmd/manager, built by TestMain.
	managerBinary string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(klog.NewKlogr())
	dir, err := os.MkdirTemp("", "celsched-failover-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	managerBinary = filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", managerBinary, "./cmd/manager")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building ./cmd/manager: %v\n%s", err, out)
		return 1
	}

	env, cfg, err := testenv.Start(filepath.Join(repoRoot, "config"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the envtest control plane: %v\n", err)
		}
	}()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// The tests create hundreds of objects at once.
	cfg.QPS, cfg.Burst = 1000, 2000
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	ctx := context.Background()
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// setUp prepares the cluster every test shares.
func setUp(ctx context.Context) error {
	// The managers run with --webhook-port=0, so the webhook configuration
	// that testenv installs would call nothing and reject every policy.
	wh := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: testenv.WebhookConfiguration}}
	if err := k8sClient.Delete(ctx, wh); err != nil {
		return fmt.Errorf("deleting the webhook configuration: %w", err)
	}
	if err := testenv.WaitWebhook(ctx, k8sClient, false, waitTimeout); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}
	if err := k8sClient.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", leaseNamespace, err)
	}
	if err := createNodes(ctx); err != nil {
		return err
	}
	return createPolicies(ctx)
}
