package kwok_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/celsched/celsched/test/kwok"
	"github.com/celsched/celsched/test/testenv"
)

// The control plane of the package's tests (test/testenv), with KWOK
// running against it.
var (
	testEnv    *envtest.Environment
	testConfig *rest.Config
	k8sClient  client.Client
	clientset  kubernetes.Interface
)

// timeout bounds every wait of these tests: KWOK's stages take a second or
// two, the machine may be loaded.
const timeout = 2 * time.Minute

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
	testEnv, testConfig = env, cfg
	if k8sClient, err = testenv.Client(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := kwok.Start(context.Background(), cfg)
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
