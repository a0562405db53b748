// Package gangs tests celsched's policies on pod groups (gangs) against a
// real kube-apiserver and etcd, with the in-process manager, and the
// workload feature gates on in both: kube-scheduler's pod group cycle
// (GangScheduling, the placement algorithm of
// TopologyAwareWorkloadScheduling) runs beside the CEL plugins.
//
// Feature gates are per process, so these tests have their own package
// (and control plane and manager) apart from test/integration, whose
// manager runs with the default gates.
package gangs

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/testenv"
)

// repoRoot is the repository root, relative to this package's directory.
var repoRoot = filepath.Join("..", "..")

// gates are the feature gates of the API server and of the manager.
var gates = map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}

// k8sClient talks to the envtest kube-apiserver as its admin.
var k8sClient client.Client

// kubeconfig is a kubeconfig file of the envtest kube-apiserver's admin,
// for the CLI.
var kubeconfig string

// cliBinary is the celsched CLI, built once (testenv.BuildCLI).
var cliBinary string

func TestMain(m *testing.M) {
	// -v and the other klog flags, for the manager's logs.
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(klog.NewKlogr())
	env, cfg, err := testenv.StartWithFeatureGates(filepath.Join(repoRoot, "config"), gates)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the envtest control plane: %v\n", err)
		}
	}()
	dir, err := os.MkdirTemp("", "celsched-gangs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if kubeconfig, err = testenv.WriteAdminKubeconfig(env, cfg, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cliBinary, err = testenv.BuildCLI(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The manager runs as its service account, with the permissions of
	// config/rbac: the scheduler's PodGroup informer and status writes
	// need them too.
	if err := applyRBAC(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "applying config/rbac: %v\n", err)
		return 1
	}
	opts := app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", AuditStatusInterval: 100 * time.Millisecond,
		FeatureGates: gates}
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
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", "rbac"))
	if err != nil {
		return fmt.Errorf("kustomize build config/rbac: %w", err)
	}
	for _, r := range resources.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return err
		}
		if err := k8sClient.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
