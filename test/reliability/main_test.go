// Package reliability checks that no policy can stall, starve or crash the
// scheduler (issue "No policy can stall"): against a real kube-apiserver
// (envtest) and the manager in-process with two profiles, on nodes as large
// as the API allows them in practice.
package reliability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/test/testenv"
)

var k8sClient client.Client

// managerNamespace holds the webhook's certificate Secret.
const managerNamespace = "celsched-system"

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
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := app.Options{
		SchedulerConfig:        filepath.Join("testdata", "scheduler-config.yaml"),
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
	}
	testenv.SelfSignedWebhook(env, &opts, managerNamespace)
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
