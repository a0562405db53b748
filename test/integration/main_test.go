// Package integration holds the tests that run against a real kube-apiserver
// and etcd (controller-runtime envtest). `make test` builds both from the Go
// module proxy into bin/ and points KUBEBUILDER_ASSETS at them.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/testenv"
)

// repoRoot is the repository root, relative to this package's directory.
var repoRoot = filepath.Join("..", "..")

// k8sClient and clientset talk to the envtest kube-apiserver as its admin;
// kubeconfig is a kubeconfig file for the same (for the CLI).
var (
	k8sClient  client.Client
	clientset  kubernetes.Interface
	kubeconfig string
	// cliBinary is the celsched CLI, built once (testenv.BuildCLI).
	cliBinary  string
	testConfig *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(klog.NewKlogr())
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

	dir, err := os.MkdirTemp("", "celsched-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cliBinary, err = testenv.BuildCLI(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	testConfig = cfg
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clientset, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating the clientset: %v\n", err)
		return 1
	}

	// The manager runs in-process with the permissions of config/rbac: as
	// its service account, so that every test also checks that the RBAC
	// manifests grant what the scheduler and the controller use.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := applyRBAC(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "applying config/rbac: %v\n", err)
		return 1
	}
	// The shipped profile, and one that can batch (testdata/scheduler-config.yaml).
	opts := app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", AuditStatusInterval: 100 * time.Millisecond, Reports: true, RolloutInterval: 100 * time.Millisecond,
		RolloutPendingRecheck: 500 * time.Millisecond,
		SchedulerConfig:       filepath.Join("testdata", "scheduler-config.yaml")}
	testenv.SelfSignedWebhook(env, &opts, managerNamespace)
	stop, err := testenv.RunManager(ctx, serviceAccountConfig(cfg), k8sClient, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	return m.Run()
}

// Identity of the manager: config/rbac/service_account.yaml.
const (
	managerNamespace      = "celsched-system"
	managerServiceAccount = "celsched"
)

// serviceAccountConfig returns cfg impersonating the manager's service account.
func serviceAccountConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(managerNamespace, managerServiceAccount),
		Groups:   append(serviceaccount.MakeGroupNames(managerNamespace), user.AllAuthenticated),
	}
	return cfg
}

// applyRBAC creates the manager's namespace and the objects of config/rbac,
// rendered by kustomize.
func applyRBAC(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		return err
	}
	objects, err := kustomize("rbac")
	if err != nil {
		return err
	}
	for _, obj := range objects {
		if err := k8sClient.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
