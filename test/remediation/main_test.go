// Package remediation tests drift detection and remediation end to end:
// the envtest control plane with KWOK's nodes (pods go Running, evicted
// pods terminate), kube-controller-manager's ReplicaSet and disruption
// controllers in-process (test/kubecontrollers), and the celsched manager
// in-process with --remediation.
package remediation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/kubecontrollers"
	"github.com/celsched/celsched/test/kwok"
	"github.com/celsched/celsched/test/testenv"
)

var (
	k8sClient  client.Client
	testConfig *rest.Config
	// kubeconfig is an admin kubeconfig file of the control plane, for
	// the CLI.
	kubeconfig string
	// cliBinary is the celsched CLI, built once (testenv.BuildCLI).
	cliBinary string
)

// waitTimeout bounds every wait: KWOK's stages take a second or two, and
// the machine may be loaded.
const waitTimeout = 2 * time.Minute

// schedulerName is the shipped profile's.
const schedulerName = "celsched"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(klog.NewKlogr())
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the envtest control plane: %v\n", err)
		}
	}()
	testConfig = cfg
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "celsched-remediation-")
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopKWOK, err := kwok.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stopKWOK(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	stopControllers, err := kubecontrollers.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopControllers()
	const namespace = "celsched-system"
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", Remediation: true, Reports: true, AuditStatusInterval: 100 * time.Millisecond}
	testenv.SelfSignedWebhook(env, &opts, namespace)
	stop, err := testenv.RunManager(ctx, cfg, k8sClient, opts)
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
