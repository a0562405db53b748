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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
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
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
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
	mgr, err := app.New(ctx, cfg, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating the manager: %v\n", err)
		return 1
	}
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			fmt.Fprintf(os.Stderr, "the manager stopped with an error: %v\n", err)
		}
	}()
	if err := testenv.WaitWebhook(ctx, k8sClient, true, time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
