// Package app builds the celsched manager: a controller-runtime manager
// that runs kube-scheduler, with the CEL plugins, as one of its runnables,
// and writes the SchedulingPolicies' status. The scheduler's own
// SchedulingPolicy informer compiles the policies into the engine's
// registry (celplugins.PolicyFeed); the scheduling loop starts only once
// every stored policy is compiled.
package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/celplugins/filter"
	"github.com/celsched/celsched/celplugins/placement"
	"github.com/celsched/celsched/celplugins/preemption"
	"github.com/celsched/celsched/celplugins/preenqueue"
	"github.com/celsched/celsched/celplugins/score"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
	"github.com/celsched/celsched/controllers"
	"github.com/celsched/celsched/controllers/webhookcert"
	"github.com/celsched/celsched/engine"
	"github.com/celsched/celsched/engine/audit"
	enginemetrics "github.com/celsched/celsched/engine/metrics"
	"github.com/celsched/celsched/simulate/verdict"
)

// SchedulerMetricsPath is where the metrics server serves kube-scheduler's
// own metrics; controller-runtime's are at /metrics.
const SchedulerMetricsPath = "/metrics/scheduler"

// Options configure the manager.
type Options struct {
	// SchedulerConfig is a KubeSchedulerConfiguration file; empty means
	// config/scheduler/scheduler-config.yaml, built into the binary.
	SchedulerConfig string
	// LeaderElection elects one replica to schedule and write status. One
	// lease covers both; every replica keeps its registry and informers warm.
	LeaderElection          bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election, as
	// kube-scheduler's flags of the same names do; 0 means its defaults
	// (15s, 10s, 2s). A leader that cannot renew within RenewDeadline
	// exits; the scheduler writes nothing (binds no pod) once RenewDeadline
	// has passed since its last renewal was sent (leaderFence,
	// docs/operations.md).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// MetricsBindAddress and HealthProbeBindAddress are the listen
	// addresses of the metrics and probe servers; "0" disables them.
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// PprofBindAddress is the listen address of Go's profiling endpoints
	// (/debug/pprof/, as kube-scheduler's enableProfiling serves them);
	// "0" or empty disables it.
	PprofBindAddress string
	// WebhookPort is the port of the validating webhook server; 0 disables
	// it. WebhookHost is its listen address (empty: all), WebhookCertDir the
	// directory with tls.crt and tls.key (reloaded when they change).
	WebhookPort    int
	WebhookHost    string
	WebhookCertDir string
	// WebhookCerts is where the serving certificate comes from:
	// CertsFromFiles (WebhookCertDir, e.g. cert-manager's Secret mounted
	// there) or CertsSelfSigned (provisioned and rotated by the manager, see
	// WebhookCert).
	WebhookCerts string
	WebhookCert  SelfSignedCert
	// AuditStatusInterval is the least time between two writes of a
	// policy's evidence (status.audit, its OpenReports Reports, the counts
	// of its rollout's waves); 0 means
	// controllers.DefaultAuditStatusInterval.
	AuditStatusInterval time.Duration
	// RolloutInterval is deprecated and has no effect: rollouts are
	// reconciled on their policy's events, new evidence and deadlines.
	// When set, New logs that it is ignored.
	RolloutInterval time.Duration
	// RolloutPendingRecheck is how often the pending pods of a wave paused
	// by its gate are counted again; 0 means
	// controllers.DefaultPendingRecheck.
	RolloutPendingRecheck time.Duration
	// Remediation allows the policies' spec.remediation to evict drifted
	// pods; false disables it for every policy (drift is still tracked).
	Remediation bool
	// Reports writes the Audit evidence as OpenReports Reports
	// (controllers.ReportWriter), when the API server serves them.
	Reports bool
	// EmulatedVersion is the Kubernetes version whose feature gates the
	// scheduler emulates (--emulated-version, major.minor; empty: the
	// binary's), and FeatureGates are kube-scheduler's feature gates
	// (--feature-gates, Name: on). New sets both on the process, as
	// kube-scheduler's flags do (celplugins/featuregates), before it loads
	// the scheduler configuration, builds the CEL environment and the
	// scheduler: one manager per process.
	EmulatedVersion string
	FeatureGates    map[string]bool
}

// The leader election timings of kube-scheduler (and controller-runtime),
// the defaults of Options.LeaseDuration, RenewDeadline and RetryPeriod.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// durationOrNil is d, or nil (controller-runtime's default) when d is 0.
func durationOrNil(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// Sources of the webhook's serving certificate (Options.WebhookCerts).
const (
	CertsFromFiles  = "files"
	CertsSelfSigned = "self-signed"
)

// SelfSignedCert configures the manager's own webhook certificate
// (controllers/webhookcert).
type SelfSignedCert struct {
	// Namespace and Secret name the Secret with the CA and the serving
	// certificate; Namespace defaults to the manager's own in a cluster.
	Namespace, Secret string
	// WebhookConfiguration is the ValidatingWebhookConfiguration that gets
	// the CA bundle.
	WebhookConfiguration string
	// Service is the webhook's Service: its DNS names in Namespace are the
	// certificate's names, with Hosts (more names or IP addresses).
	Service string
	Hosts   []string
	// Validity and CAValidity are the lifetimes of the serving certificate
	// and the CA; each is renewed when a third remains. PublishDelay is how
	// long a new CA is in the caBundle before it signs the served
	// certificate. 0 means the webhookcert defaults.
	Validity, CAValidity, PublishDelay time.Duration
}

// AddFlags registers the options as command-line flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.SchedulerConfig, "config", "", "KubeSchedulerConfiguration file (default: config/scheduler/scheduler-config.yaml, built in). Its clientConnection.kubeconfig and leaderElection are ignored: see --kubeconfig and --leader-elect.")
	// On by default in a cluster, where replicas may run side by side.
	_, inCluster := os.LookupEnv("KUBERNETES_SERVICE_HOST")
	fs.BoolVar(&o.LeaderElection, "leader-elect", inCluster, "Elect one replica to schedule and to write policy status (default true in a cluster).")
	fs.StringVar(&o.LeaderElectionID, "leader-elect-id", "celsched", "Name of the leader election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-elect-namespace", "", "Namespace of the leader election Lease (default: the manager's namespace in a cluster).")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "How long a standby waits after the leader's last renewal before it takes the Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "How long the leader retries renewing the Lease before it stops leading and exits; less than --leader-elect-lease-duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "How long replicas wait between attempts to acquire or renew the Lease.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "Address of the metrics endpoint (/metrics, and kube-scheduler's at "+SchedulerMetricsPath+"); 0 disables it.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz probes; 0 disables them.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", "0", "Address of Go's profiling endpoints (/debug/pprof/, e.g. 127.0.0.1:6060); 0 disables them. They show the process's code and data: bind them to loopback or protect them.")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "Port of the SchedulingPolicy validating webhook (HTTPS); 0 disables the webhook server.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "", "Directory with the webhook's serving certificate, tls.crt and tls.key (default: $TMPDIR/k8s-webhook-server/serving-certs).")
	fs.StringVar(&o.WebhookCerts, "webhook-certs", CertsFromFiles, "Where the webhook's serving certificate comes from: \""+CertsFromFiles+"\" (tls.crt and tls.key in --webhook-cert-dir, e.g. cert-manager's Secret) or \""+CertsSelfSigned+"\" (the manager provisions a CA and the certificate in a Secret, rotates them and sets the webhook configuration's caBundle).")
	fs.StringVar(&o.WebhookCert.Namespace, "webhook-cert-namespace", "", "With --webhook-certs=self-signed: namespace of the certificate Secret and the webhook Service (default: the manager's namespace in a cluster).")
	fs.StringVar(&o.WebhookCert.Secret, "webhook-cert-secret", "celsched-webhook-server-cert", "With --webhook-certs=self-signed: name of the Secret that holds the CA and the serving certificate (created when missing).")
	fs.StringVar(&o.WebhookCert.WebhookConfiguration, "webhook-configuration", "celsched-validating-webhook-configuration", "With --webhook-certs=self-signed: the ValidatingWebhookConfiguration whose caBundle the manager sets.")
	fs.StringVar(&o.WebhookCert.Service, "webhook-service", "celsched-webhook-service", "With --webhook-certs=self-signed: the webhook's Service, whose DNS names the certificate carries.")
	fs.Func("webhook-cert-hosts", "With --webhook-certs=self-signed: more DNS names or IP addresses for the certificate, comma-separated.", func(v string) error {
		o.WebhookCert.Hosts = append(o.WebhookCert.Hosts, strings.Split(v, ",")...)
		return nil
	})
	fs.DurationVar(&o.WebhookCert.Validity, "webhook-cert-validity", webhookcert.DefaultValidity, "With --webhook-certs=self-signed: lifetime of a serving certificate; renewed when a third remains.")
	fs.DurationVar(&o.WebhookCert.CAValidity, "webhook-ca-validity", webhookcert.DefaultCAValidity, "With --webhook-certs=self-signed: lifetime of the CA; renewed when a third remains, the old one trusted until it expires.")
	fs.DurationVar(&o.RolloutInterval, "rollout-interval", 0, "Deprecated, no effect (accepted so that existing command lines still start): the leader advances a policy's rollout on the policy's changes, on new evidence for its waves and at its deadlines (the end of a soak, --rollout-pending-recheck); new evidence alone is written at most once per --audit-status-interval.")
	fs.DurationVar(&o.RolloutPendingRecheck, "rollout-pending-recheck", controllers.DefaultPendingRecheck, "How often the leader counts again the pending pods of a wave its gate paused (each count evaluates the wave's pending pods on the nodes they may use), to promote the wave once they no longer exceed the gate.")
	fs.BoolVar(&o.Remediation, "remediation", true, "Let policies with spec.remediation evict the running pods their enforced filters refuse (through the Eviction API, within their budgets); false disables remediation for every policy, and drift is still reported in status.drift.")
	fs.BoolVar(&o.Reports, "reports", true, "Write what Audit policies would have done as OpenReports Reports (openreports.io/v1alpha1 Report, one per namespace and policy, each written at most once per --audit-status-interval) when the API server serves them; false writes none.")
	fs.StringVar(&o.EmulatedVersion, featuregates.EmulatedVersionFlagName, "", featuregates.EmulatedVersionUsage())
	fs.Var(featuregates.NewFlag(&o.FeatureGates), featuregates.FlagName, featuregates.Usage())
	fs.DurationVar(&o.AuditStatusInterval, "audit-status-interval", controllers.DefaultAuditStatusInterval, "The least time between two writes of a policy's evidence: its status.audit, its OpenReports Reports (each), and the counts of its rollout's waves (status.rollout; a rollout's decisions are written at once). At most one such write per policy (per report) per interval; what comes meanwhile is written together.")
}

// Manager is the celsched manager. Start it with Start.
type Manager struct {
	ctrl.Manager
	// SchedulerNames are the profiles the scheduler serves.
	SchedulerNames []string
	sched          *scheduler.Scheduler
}

// Plugins returns the plugins that the scheduler's framework of the
// profile schedulerName runs at each extension point (its configuration's
// plugins with the defaults and the feature gates applied), or nil when
// no profile has that name.
func (m *Manager) Plugins(schedulerName string) *schedulerconfig.Plugins {
	fw, ok := m.sched.Profiles[schedulerName]
	if !ok {
		return nil
	}
	return fw.ListPlugins()
}

// New builds the manager for the API server of cfg. ctx must be the context
// the manager is started with: the scheduler's plugins live as long as it.
func New(ctx context.Context, cfg *rest.Config, o Options) (*Manager, error) {
	// The emulated version and the gates decide the profiles' default
	// plugins (when the configuration is defaulted), what the framework
	// and its plugins do, and the CEL environment's libraries: they are set
	// first, as kube-scheduler sets them.
	if err := featuregates.Apply(featuregates.Settings{EmulatedVersion: o.EmulatedVersion, FeatureGates: o.FeatureGates}); err != nil {
		return nil, err
	}
	featuregates.AddMetrics()
	versions := featuregates.EffectiveVersion()
	klog.FromContext(ctx).Info("Feature gates set", "binaryVersion", versions.BinaryVersion().String(),
		"emulationVersion", versions.EmulationVersion().String(), "minCompatibilityVersion", versions.MinCompatibilityVersion().String(),
		"featureGates", featuregates.String(o.FeatureGates))
	schedCfg, err := defaultconfig.Load(o.SchedulerConfig)
	if err != nil {
		return nil, err
	}
	mgr, rotator, fence, err := newControllerManager(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	if o.RolloutInterval != 0 {
		klog.FromContext(ctx).Info("--rollout-interval is deprecated and has no effect: rollouts are reconciled on their policy's events, new evidence and deadlines", "rolloutInterval", o.RolloutInterval)
	}
	env, err := engine.NewEnvironment()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	p, err := newPolicies(ctx, cfg, mgr, env)
	if err != nil {
		return nil, err
	}
	p.rt.PercentageOfNodesToScore = ptr.Deref(schedCfg.PercentageOfNodesToScore, 0)
	if err := (&controllers.StatusReconciler{Client: mgr.GetClient(), Policies: p.registry, Compiled: p.compiled,
		Slow: p.rt.Report.Slow, Errors: p.rt.Report.Errors, ParamKinds: p.params}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the status controller: %w", err)
	}
	if o.WebhookPort != 0 {
		if err := addWebhook(mgr, env, rotator); err != nil {
			return nil, err
		}
	}
	if err := (&controllers.AuditStatusWriter{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: p.rt.Report.AuditLog,
		Interval: o.AuditStatusInterval}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the audit status writer: %w", err)
	}
	runner, err := addScheduler(ctx, cfg, mgr, schedCfg, p, fence)
	if err != nil {
		return nil, err
	}
	// The leader gauge, and the rollouts' state from status (every replica).
	if err := mgr.Add(leading()); err != nil {
		return nil, err
	}
	if err := (&controllers.RolloutMetrics{Reader: mgr.GetCache()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the rollout metrics: %w", err)
	}
	names := make([]string, len(schedCfg.Profiles))
	for i, p := range schedCfg.Profiles {
		names[i] = p.SchedulerName
	}
	// The rollouts' gates count pending pods with the one evaluator, over
	// the scheduler's own informers, policies, converter and params.
	pending := &controllers.PendingPods{Live: runner.live(p.rt.Inputs, schedCfg)}
	if err := (&controllers.RolloutController{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: p.rt.Report.AuditLog, Recorder: mgr.GetEventRecorder("celsched-rollout"),
		WriteInterval: o.AuditStatusInterval, Pending: pending, PendingRecheck: o.RolloutPendingRecheck}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the rollout controller: %w", err)
	}
	drift, err := addDrift(ctx, cfg, mgr, o, schedCfg, p, runner, fence)
	if err != nil {
		return nil, err
	}
	if o.Reports {
		// One writer of the reports, with two inputs: the audit evidence
		// and the drift.
		if err := (&controllers.ReportWriter{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Log: p.rt.Report.AuditLog,
			Drift: drift.ReportSource(), Interval: o.AuditStatusInterval}).SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the report writer: %w", err)
		}
	}
	return &Manager{Manager: mgr, SchedulerNames: names, sched: runner.sched}, nil
}

// addDrift adds drift detection and remediation (controllers.DriftController)
// on the leader: it evaluates running pods with the one evaluator over the
// scheduler's own informers, policies, converter and params, and evicts
// through a client that passes the leader fence.
func addDrift(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager, o Options, schedCfg *schedulerconfig.KubeSchedulerConfiguration, p *policies, runner *schedulerRunner, fence *leaderFence) (*controllers.DriftController, error) {
	podInformer := runner.factory.Core().V1().Pods()
	nodeInformer := runner.factory.Core().V1().Nodes()
	nsInformer := runner.factory.Core().V1().Namespaces()
	live := runner.live(p.rt.Inputs, schedCfg)
	// Drift builds the nodes of the pods it evaluates from the pods on
	// them, read from an index, not from every pod.
	podsOnNode, err := controllers.IndexPodsByNode(podInformer.Informer())
	if err != nil {
		return nil, fmt.Errorf("setting up drift detection: %w", err)
	}
	live.PodsOnNode = podsOnNode
	evictCfg := rest.AddUserAgent(rest.CopyConfig(cfg), "celsched-remediation")
	if fence != nil {
		evictCfg.Wrap(fence.wrap)
	}
	evictions, err := kubernetes.NewForConfig(evictCfg)
	if err != nil {
		return nil, fmt.Errorf("creating the remediation's client: %w", err)
	}
	d := &controllers.DriftController{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Live: &live, Pods: podInformer.Lister(),
		Recorder: mgr.GetEventRecorder("celsched-drift"), Remediation: o.Remediation, WriteInterval: o.AuditStatusInterval,
		Evict: func(ctx context.Context, pod *corev1.Pod) error {
			return evictions.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
				// Only the pod the evaluation saw.
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
			})
		}}
	// A params object's change changes the drift of the policies reading it.
	changed := p.params.Changed
	p.params.Changed = func(kind schema.GroupVersionKind, oldObj, newObj *unstructured.Unstructured) {
		changed(kind, oldObj, newObj)
		d.ParamsChanged()
	}
	if err := d.SetupWithManager(mgr, podInformer.Informer(), nodeInformer.Informer(), nsInformer.Informer()); err != nil {
		return nil, fmt.Errorf("setting up drift detection: %w", err)
	}
	if live.PodGroups != nil { // GenericWorkload on: kube-scheduler has the informer
		if err := d.WatchPodGroups(runner.factory.Scheduling().V1beta1().PodGroups().Informer()); err != nil {
			return nil, fmt.Errorf("setting up drift detection: %w", err)
		}
	}
	return d, mgr.Add(&controllers.DriftMetrics{Reader: mgr.GetCache()})
}

// newControllerManager builds the controller-runtime manager: its scheme,
// metrics (with kube-scheduler's at SchedulerMetricsPath), probes,
// profiling, webhook server and leader election; the certificate rotator
// when the manager provisions the webhook's certificate; and, with leader
// election, the fence of the scheduler's writes.
func newControllerManager(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, *webhookcert.Rotator, *leaderFence, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, nil, err
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, nil, err
	}
	if err := reportsv1alpha1.Install(scheme); err != nil {
		return nil, nil, nil, err
	}
	webhookServer, rotator, err := newWebhookServer(cfg, o)
	if err != nil {
		return nil, nil, nil, err
	}
	// The Lease lock is controller-runtime's, built as it builds it (below,
	// once the manager provides the event recorder), wrapped to tell the
	// fence of each acquire and renewal.
	var (
		lock          *fencedLock
		lockInterface resourcelock.Interface // nil, not a nil *fencedLock, without leader election
		fence         *leaderFence
	)
	renewDeadline := cmp.Or(o.RenewDeadline, DefaultRenewDeadline)
	if o.LeaderElection {
		fence = newLeaderFence(renewDeadline, klog.FromContext(ctx).WithName("leader-fence"))
		lock = &fencedLock{fence: fence}
		lockInterface = lock
	}
	// The manager's own metrics, registered explicitly (the CLI, which
	// shares the engine, registers none).
	for _, register := range []func(prometheus.Registerer) error{enginemetrics.Register, audit.Register, registerLeaderGauge} {
		if err := register(ctrlmetrics.Registry); err != nil {
			return nil, nil, nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Metrics: metricsserver.Options{
			BindAddress:   o.MetricsBindAddress,
			ExtraHandlers: map[string]http.Handler{SchedulerMetricsPath: legacyregistry.Handler()},
		},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		PprofBindAddress:              o.PprofBindAddress,
		WebhookServer:                 webhookServer,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOrNil(o.LeaseDuration),
		RenewDeadline:                 durationOrNil(o.RenewDeadline),
		RetryPeriod:                   durationOrNil(o.RetryPeriod),
		// The lock's Interface is set below, before the manager starts.
		LeaderElectionResourceLockInterface: lockInterface,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if lock != nil {
		leaderCfg := rest.CopyConfig(cfg)
		if leaderCfg.UserAgent == "" {
			leaderCfg.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		lock.Interface, err = leaderelection.NewResourceLock(leaderCfg, mgr, leaderelection.Options{
			LeaderElection:          true,
			LeaderElectionID:        o.LeaderElectionID,
			LeaderElectionNamespace: o.LeaderElectionNamespace,
			RenewDeadline:           renewDeadline,
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("creating the leader election lock: %w", err)
		}
	}
	return mgr, rotator, fence, nil
}

// policies is what turns SchedulingPolicies into the CEL plugins' inputs:
// the registry the feed fills, the plugins' runtime, the params store, and
// the names of compiled policies for the status controller.
type policies struct {
	registry *engine.Registry
	rt       *celplugins.Runtime
	params   *celplugins.ParamsStore
	feed     *celplugins.PolicyFeed
	compiled chan event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy]
}

func newPolicies(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager, env *engine.Environment) (*policies, error) {
	p := &policies{registry: engine.NewRegistry(engine.NewCompiler(env))}
	p.rt = celplugins.NewRuntime(p.registry, engine.NewConverter(env, engine.DefaultMaxCachedNodes))
	// The status controller is told of each policy the scheduler compiled;
	// a name it misses (a full channel) it finds by requeueing.
	p.compiled = make(chan event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy], 1024)
	notify := func(name string) {
		select {
		case p.compiled <- event.TypedGenericEvent[*schedv1alpha1.SchedulingPolicy]{Object: &schedv1alpha1.SchedulingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
		default:
		}
	}
	p.rt.Report.Notify = notify
	paramsClient, err := dynamic.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "celsched-params"))
	if err != nil {
		return nil, fmt.Errorf("creating the params client: %w", err)
	}
	p.params = &celplugins.ParamsStore{
		Env:     env,
		Client:  paramsClient,
		Mapper:  mgr.GetRESTMapper(),
		Changed: p.rt.Requeue.ParamsChanged,
		Listed:  p.rt.Requeue.ParamsListed,
		Logger:  klog.FromContext(ctx).WithName("params"),
	}
	p.rt.Inputs.Params = p.params
	p.feed = &celplugins.PolicyFeed{
		Registry:   p.registry,
		Logger:     klog.FromContext(ctx).WithName("policy-feed"),
		Compiled:   notify,
		Namespace:  p.rt.ObserveNamespace,
		Params:     p.params,
		Preemptors: p.rt.Requeue,
	}
	return p, nil
}

// addWebhook adds the validating webhook, its readiness check, and the
// certificate rotator (when the manager provisions the certificate).
func addWebhook(mgr ctrl.Manager, env *engine.Environment, rotator *webhookcert.Rotator) error {
	validator := &controllers.PolicyValidator{Compiler: engine.NewCompiler(env),
		ParamTypes: &controllers.LiveParamTypes{Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper()}}
	if err := validator.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the validating webhook: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if rotator == nil {
		return nil
	}
	if err := mgr.Add(rotator); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook-certificate", rotator.Ready)
}

// addScheduler adds kube-scheduler and its informers, and the health and
// readiness checks: ready once the scheduler's informers synced and every
// stored policy is compiled, what the scheduling loop waits for.
func addScheduler(ctx context.Context, cfg *rest.Config, mgr ctrl.Manager, schedCfg *schedulerconfig.KubeSchedulerConfiguration, p *policies, fence *leaderFence) (*schedulerRunner, error) {
	runner, err := newSchedulerRunner(ctx, cfg, schedCfg, p.rt, p.feed, fence)
	if err != nil {
		return nil, err
	}
	runner.params = p.params
	if err := mgr.Add(runner.informers()); err != nil {
		return nil, err
	}
	if err := mgr.Add(runner); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return runner, mgr.AddReadyzCheck("scheduler-informers", runner.readyz)
}

// newWebhookServer returns the webhook server of o and, when the manager
// provisions its certificate, the rotator it serves from.
func newWebhookServer(cfg *rest.Config, o Options) (webhook.Server, *webhookcert.Rotator, error) {
	opts := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir}
	switch {
	case o.WebhookPort == 0 || o.WebhookCerts == CertsFromFiles || o.WebhookCerts == "":
		return webhook.NewServer(opts), nil, nil
	case o.WebhookCerts == CertsSelfSigned:
	default:
		return nil, nil, fmt.Errorf("--webhook-certs=%q: want %q or %q", o.WebhookCerts, CertsFromFiles, CertsSelfSigned)
	}
	c := o.WebhookCert
	if c.Namespace == "" {
		ns, err := os.ReadFile(serviceAccountNamespaceFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--webhook-certs=%s needs --webhook-cert-namespace outside a cluster: %w", CertsSelfSigned, err)
		}
		c.Namespace = strings.TrimSpace(string(ns))
	}
	var hosts []string
	if c.Service != "" {
		// The names the API server may use for a service reference.
		hosts = append(hosts, c.Service, c.Service+"."+c.Namespace, c.Service+"."+c.Namespace+".svc", c.Service+"."+c.Namespace+".svc.cluster.local")
	}
	for _, h := range c.Hosts {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("--webhook-certs=%s needs --webhook-service or --webhook-cert-hosts: the names of the certificate", CertsSelfSigned)
	}
	clientset, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "celsched-webhook-cert"))
	if err != nil {
		return nil, nil, fmt.Errorf("creating the certificate rotator's client: %w", err)
	}
	r := &webhookcert.Rotator{
		Client:               clientset,
		Secret:               types.NamespacedName{Namespace: c.Namespace, Name: c.Secret},
		WebhookConfiguration: c.WebhookConfiguration,
		Hosts:                hosts,
		Validity:             c.Validity,
		CAValidity:           c.CAValidity,
		PublishDelay:         c.PublishDelay,
	}
	opts.TLSOpts = []func(*tls.Config){func(t *tls.Config) { t.GetCertificate = r.GetCertificate }}
	return webhook.NewServer(opts), r, nil
}

// serviceAccountNamespaceFile is where a pod finds its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// schedulerRunner runs kube-scheduler inside the manager: its informers on
// every replica (so a new leader starts warm, with every policy compiled),
// its scheduling loop on the leader only.
type schedulerRunner struct {
	sched       *scheduler.Scheduler
	factory     informers.SharedInformerFactory
	dynFactory  dynamicinformer.DynamicSharedInformerFactory
	broadcaster events.EventBroadcaster
	// policiesSynced, when set, says whether the feed's own registration
	// (see newSchedulerRunner) has compiled the initial list.
	policiesSynced func() bool
	// params watches the param kinds of the policies; the loop starts once
	// the params of the policies stored at start-up are listed.
	params *celplugins.ParamsStore
	// simulator keeps the frameworks of the evaluations outside the
	// scheduling loop (the rollouts' gates, remediation), built once over
	// the scheduler's informers (live).
	simulator *verdict.Simulator

	syncOnce sync.Once
	synced   chan struct{}
}

// With a fence (leader election), every write of the scheduler but its
// Events passes the fence.
func newSchedulerRunner(ctx context.Context, cfg *rest.Config, schedCfg *schedulerconfig.KubeSchedulerConfiguration, rt *celplugins.Runtime, feed *celplugins.PolicyFeed, fence *leaderFence) (*schedulerRunner, error) {
	// The connection settings of the scheduler configuration, as
	// kube-scheduler applies them.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = schedCfg.ClientConnection.ContentType
	cfg.AcceptContentTypes = schedCfg.ClientConnection.AcceptContentTypes
	cfg.QPS = schedCfg.ClientConnection.QPS
	cfg.Burst = int(schedCfg.ClientConnection.Burst)
	cfg = rest.AddUserAgent(cfg, "celsched-scheduler")
	// Events have a client of their own, as in kube-scheduler, which the
	// fence does not guard.
	eventsClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the scheduler's events client: %w", err)
	}
	if fence != nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(fence.wrap)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the scheduler's client: %w", err)
	}
	dynClient, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the scheduler's dynamic client: %w", err)
	}
	r := &schedulerRunner{
		// No informer name (client-go's informer metrics): the name is
		// unique per process, and tests run several managers in one.
		factory:     scheduler.NewInformerFactory(client, 0, nil),
		dynFactory:  dynamicinformer.NewDynamicSharedInformerFactory(dynClient, 0),
		broadcaster: events.NewBroadcaster(&events.EventSinkImpl{Interface: eventsClient.EventsV1()}),
		synced:      make(chan struct{}),
	}
	registry := frameworkruntime.Registry{
		preenqueue.Name: celplugins.Factory(rt, preenqueue.New),
		filter.Name:     celplugins.Factory(rt, filter.New),
		score.Name:      celplugins.Factory(rt, score.New),
		placement.Name:  celplugins.Factory(rt, placement.New),
		preemption.Name: celplugins.Factory(rt, preemption.New),
	}
	// The scheduler adds its event handler (the queueing hints) to the
	// SchedulingPolicy informer of this factory: the feed runs in it, before
	// the hints, and the scheduler's WaitForHandlersSync waits for it.
	r.sched, err = scheduler.New(ctx, client, r.factory, feed.WrapInformers(r.dynFactory), profile.NewRecorderFactory(r.broadcaster),
		scheduler.WithComponentConfigVersion(schedCfg.APIVersion),
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(schedCfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(schedCfg.PercentageOfNodesToScore),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
		scheduler.WithPodMaxBackoffSeconds(schedCfg.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(schedCfg.PodInitialBackoffSeconds),
		scheduler.WithExtenders(schedCfg.Extenders...),
		scheduler.WithParallelism(schedCfg.Parallelism),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the scheduler: %w", err)
	}
	if !feed.Attached() {
		// No profile runs the CEL plugins, so the scheduler watches no
		// policy; the feed still fills the registry for the status.
		reg, err := r.dynFactory.ForResource(celplugins.PolicyGVR).Informer().AddEventHandler(feed.Handler())
		if err != nil {
			return nil, fmt.Errorf("watching SchedulingPolicies: %w", err)
		}
		r.policiesSynced = reg.HasSynced
	}
	return r, nil
}

// informers returns the runnable that starts the scheduler's informers on
// every replica.
func (r *schedulerRunner) informers() ctrlRunnable {
	return ctrlRunnable{leader: false, start: func(ctx context.Context) error {
		r.factory.Start(ctx.Done())
		r.dynFactory.Start(ctx.Done())
		r.factory.WaitForCacheSync(ctx.Done())
		r.dynFactory.WaitForCacheSync(ctx.Done())
		// The handlers include the policy feed's: every policy stored at
		// start-up is compiled when they have synced.
		if err := r.sched.WaitForHandlersSync(ctx); err != nil {
			return fmt.Errorf("waiting for the scheduler's event handlers: %w", err)
		}
		if r.policiesSynced != nil && !cache.WaitForCacheSync(ctx.Done(), r.policiesSynced) {
			return nil
		}
		if r.params != nil {
			defer r.params.Stop()
			if !r.params.WaitForSync(ctx) {
				return nil
			}
		}
		r.syncOnce.Do(func() { close(r.synced) })
		<-ctx.Done()
		r.factory.Shutdown()
		return nil
	}}
}

// volumeObjects lists, from the scheduler's informers, the objects that
// the built-in volume plugins read (claims, volumes, storage classes, CSI
// nodes and drivers), for an evaluation outside the scheduling loop. The
// listers are requested now, before the informers start.
// live is the cluster as the scheduler's informers hold it, for the one
// evaluator outside scheduling cycles (the rollouts' gates, drift): the
// listers kube-scheduler's framework reads, and the PodGroups when
// GenericWorkload is on (kube-scheduler has their informer then; without
// the gate, the API may not be served, and no informer is started).
func (r *schedulerRunner) live(inputs *celplugins.Inputs, cfg *schedulerconfig.KubeSchedulerConfiguration) controllers.Live {
	if r.simulator == nil {
		r.simulator = verdict.NewSimulator(r.factory)
	}
	live := controllers.Live{Inputs: inputs, Config: cfg,
		Pods: r.factory.Core().V1().Pods().Lister(), Nodes: r.factory.Core().V1().Nodes().Lister(),
		Namespaces: r.factory.Core().V1().Namespaces().Lister(), Objects: r.volumeObjects(),
		Synced: func() bool { return r.readyz(nil) == nil }, Simulator: r.simulator}
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		groups := r.factory.Scheduling().V1beta1().PodGroups().Lister()
		live.PodGroups = func() ([]*schedulingv1beta1.PodGroup, error) { return groups.List(labels.Everything()) }
	}
	return live
}

func (r *schedulerRunner) volumeObjects() func() ([]runtime.Object, error) {
	pvcs := r.factory.Core().V1().PersistentVolumeClaims().Lister()
	pvs := r.factory.Core().V1().PersistentVolumes().Lister()
	classes := r.factory.Storage().V1().StorageClasses().Lister()
	csiNodes := r.factory.Storage().V1().CSINodes().Lister()
	csiDrivers := r.factory.Storage().V1().CSIDrivers().Lister()
	return func() ([]runtime.Object, error) {
		everything := labels.Everything()
		var out []runtime.Object
		var errs []error
		out, errs = listed(out, errs, pvcs.List)(everything)
		out, errs = listed(out, errs, pvs.List)(everything)
		out, errs = listed(out, errs, classes.List)(everything)
		out, errs = listed(out, errs, csiNodes.List)(everything)
		out, errs = listed(out, errs, csiDrivers.List)(everything)
		return out, errors.Join(errs...)
	}
}

// listed appends what a lister's List returns to out, or its error to
// errs.
func listed[T runtime.Object](out []runtime.Object, errs []error, list func(labels.Selector) ([]T, error)) func(labels.Selector) ([]runtime.Object, []error) {
	return func(sel labels.Selector) ([]runtime.Object, []error) {
		objs, err := list(sel)
		if err != nil {
			return out, append(errs, err)
		}
		for _, o := range objs {
			out = append(out, o)
		}
		return out, errs
	}
}

// Start runs the scheduling loop on the leader until ctx is done.
func (r *schedulerRunner) Start(ctx context.Context) error {
	select {
	case <-r.synced:
	case <-ctx.Done():
		return nil
	}
	if err := r.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("recording events: %w", err)
	}
	defer r.broadcaster.Shutdown()
	klog.FromContext(ctx).Info("Starting the scheduler")
	r.sched.Run(ctx)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *schedulerRunner) NeedLeaderElection() bool { return true }

// readyz is ready once the scheduler's informers and handlers synced, the
// policy feed's included.
func (r *schedulerRunner) readyz(*http.Request) error {
	select {
	case <-r.synced:
		return nil
	default:
		return fmt.Errorf("the scheduler's informers have not synced, or not every SchedulingPolicy is compiled yet")
	}
}

// ctrlRunnable is a manager runnable with a leader election choice.
type ctrlRunnable struct {
	leader bool
	start  func(context.Context) error
}

func (c ctrlRunnable) Start(ctx context.Context) error { return c.start(ctx) }
func (c ctrlRunnable) NeedLeaderElection() bool        { return c.leader }
