// Package writebudget measures what the manager writes to the API server
// for one policy during a rollout under load: the writes of the
// SchedulingPolicy (status.audit, status.rollout, conditions) and of its
// OpenReports Reports, per minute, with pods arriving at a steady rate,
// against a real kube-apiserver (envtest) and the manager in-process with
// its default intervals; and holds them to the bound docs/operations.md
// states.
package writebudget

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
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celsched/celsched/cmd/manager/app"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/test/testenv"
)

var (
	k8sClient  client.Client
	testConfig *rest.Config
)

// The measurement's knobs; the defaults are what docs/operations.md
// quotes.
var (
	window   = flag.Duration("writebudget.window", time.Minute, "how long the writes are counted, from the policy's creation")
	podRate  = flag.Int("writebudget.rate", 50, "pods created per second")
	interval = flag.Duration("writebudget.interval", controllers.DefaultAuditStatusInterval, "the manager's --audit-status-interval")
)

// managerNamespace holds the webhook's certificate Secret.
const managerNamespace = "celsched-system"

func TestMain(m *testing.M) {
	flag.Parse()
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The shipped profile (schedulerName celsched) and the manager's
	// defaults, but for the interval under measurement.
	opts := app.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", Reports: true, AuditStatusInterval: *interval}
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
