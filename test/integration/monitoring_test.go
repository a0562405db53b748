package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/legacyregistry"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
	"github.com/celsched/celsched/test/testenv"
)

// The chart's monitoring values, all on.
var monitoringValues = []string{"--set", "monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true,monitoring.podMonitor.enabled=true"}

// webhookPath is the path the manager serves the policy webhook on
// (config/webhook/manifests.yaml), the label controller-runtime's webhook
// metrics carry.
const webhookPath = "/validate-scheduling-celsched-io-v1alpha1-schedulingpolicy"

// TestHelmChartMonitoring renders the chart with its monitoring on and
// checks what it ships for operators:
//   - the PrometheusRule loads as Prometheus loads rule files (model/rulefmt,
//     what promtool check rules runs: YAML, expressions, durations, label and
//     annotation templates), and has the alerts of wantAlerts, each with a
//     severity, a summary, a description and a runbook_url into a section of
//     docs/operations.md;
//   - the dashboard's ConfigMap carries the Grafana sidecar's label, and each
//     of its queries (panels and variables) parses as PromQL;
//   - every metric the rules and the dashboard read is one the in-process
//     manager exports (controller-runtime's registry, served at /metrics, or
//     kube-scheduler's, at /metrics/scheduler) after a workload that makes
//     each of them count, or, for apiserver_* names, one the API server
//     exports: the names come from the live registries, not from a list.
func TestHelmChartMonitoring(t *testing.T) {
	objects := helmTemplate(t, monitoringValues...)
	rule := findObject(t, objects, "PrometheusRule", "celsched")
	dashboard := findObject(t, objects, "ConfigMap", "celsched-dashboard")
	monitor := findObject(t, objects, "PodMonitor", "celsched")

	// The PodMonitor scrapes both metrics paths of the manager's pods.
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "podMetricsEndpoints")
	var paths []string
	for _, e := range endpoints {
		paths = append(paths, e.(map[string]any)["path"].(string))
	}
	if want := []string{"/metrics", "/metrics/scheduler"}; !slices.Equal(paths, want) {
		t.Errorf("PodMonitor paths %v, want %v", paths, want)
	}

	selected := map[string][]string{} // metric name -> the rules and queries that read it
	for name, metrics := range checkRules(t, rule) {
		for _, m := range metrics {
			selected[m] = append(selected[m], "alert "+name)
		}
	}
	for key, metrics := range checkDashboard(t, dashboard) {
		for _, m := range metrics {
			selected[m] = append(selected[m], "dashboard "+key)
		}
	}
	for _, want := range []string{"celsched_policy_evaluations_total", "celsched_policy_cycle_duration_seconds_bucket", "celsched_rollout_waves", "celsched_rollout_paused"} {
		if !slices.ContainsFunc(selected[want], func(s string) bool { return strings.HasPrefix(s, "dashboard ") }) {
			t.Errorf("no dashboard panel reads %s", want)
		}
	}

	exportMonitoredMetrics(t)
	var missing []string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		manager, apiserver := managerFamilies(t), apiserverFamilies(t)
		missing = missing[:0]
		for name, users := range selected {
			families := manager
			if strings.HasPrefix(name, "apiserver_") {
				families = apiserver
			}
			if !exported(families, name) {
				missing = append(missing, fmt.Sprintf("%s (read by %s)", name, strings.Join(users, ", ")))
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		slices.Sort(missing)
		t.Errorf("metrics not exported:\n%s", strings.Join(missing, "\n"))
	}

	// The label values the rules select on are those the metrics carry.
	families := map[string]*dto.MetricFamily{}
	for _, g := range []func() ([]*dto.MetricFamily, error){ctrlmetrics.Registry.Gather, legacyregistry.DefaultGatherer.Gather} {
		fs, err := g()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			families[f.GetName()] = f
		}
	}
	if !slices.ContainsFunc(families["controller_runtime_webhook_requests_total"].GetMetric(), func(m *dto.Metric) bool {
		return hasLabels(m, map[string]string{"webhook": webhookPath})
	}) {
		t.Errorf("controller_runtime_webhook_requests_total has no series for webhook=%q", webhookPath)
	}
	if !apiserverSeries(t, "apiserver_admission_webhook_request_total", `name="vschedulingpolicy.celsched.io"`) {
		t.Error(`the API server's apiserver_admission_webhook_request_total has no series for name="vschedulingpolicy.celsched.io"`)
	}
	if f := families["celsched_leader"]; f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("celsched_leader of the in-process manager (the leader, without election) = %v, want 1", f.GetMetric())
	}
}

// wantAlerts are the alerts the chart ships: no leader, a rollout paused by
// its gate, evaluation errors, time-budget cut-offs, the webhook failing.
var wantAlerts = []string{
	"CelschedNoLeader", "CelschedPolicyEvaluationErrors", "CelschedRolloutPaused",
	"CelschedTimeBudgetExceeded", "CelschedWebhookErrors", "CelschedWebhookUnreachable",
}

// checkRules loads the PrometheusRule's groups with Prometheus's rule
// loader and checks each alert's labels and annotations; it returns the
// metric names each alert reads.
func checkRules(t *testing.T, rule *unstructured.Unstructured) map[string][]string {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	groups, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Errors []string
		Rules  map[string]struct {
			Type    string
			Metrics []string
			Error   string
		}
	}
	runPromQL(t, "rules", groups, &report)
	if len(report.Errors) > 0 {
		t.Errorf("Prometheus does not load the PrometheusRule's groups:\n%s\n%s", strings.Join(report.Errors, "\n"), groups)
	}

	values, err := os.ReadFile(filepath.Join(repoRoot, "charts", "celsched", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Monitoring struct {
			PrometheusRule struct {
				RunbookURL string `json:"runbookURL"`
			} `json:"prometheusRule"`
		} `json:"monitoring"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	headings := markdownHeadings(t, filepath.Join(repoRoot, "docs", "operations.md"))

	metrics := map[string][]string{}
	var alerts []string
	ruleGroups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range ruleGroups {
		group := g.(map[string]any)
		for _, r := range group["rules"].([]any) {
			r := r.(map[string]any)
			alert, _ := r["alert"].(string)
			if alert == "" {
				t.Errorf("group %s has a rule that is not an alert: %v", group["name"], r)
				continue
			}
			alerts = append(alerts, alert)
			parsed := report.Rules[group["name"].(string)+"/"+alert]
			if parsed.Error != "" || parsed.Type != "vector" || len(parsed.Metrics) == 0 {
				t.Errorf("alert %s: expression %q: type %q, metrics %v, error %q; want a vector over metrics", alert, r["expr"], parsed.Type, parsed.Metrics, parsed.Error)
			}
			metrics[alert] = parsed.Metrics
			labels, _ := r["labels"].(map[string]any)
			if s := labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %v, want critical, warning or info", alert, s)
			}
			annotations, _ := r["annotations"].(map[string]any)
			for _, a := range []string{"summary", "description"} {
				if s, _ := annotations[a].(string); len(s) < 20 {
					t.Errorf("alert %s: annotation %s is %q: want a sentence", alert, a, s)
				}
			}
			anchor := strings.ToLower(alert)
			if got, want := annotations["runbook_url"], v.Monitoring.PrometheusRule.RunbookURL+"#"+anchor; got != want {
				t.Errorf("alert %s: runbook_url %v, want %s", alert, got, want)
			}
			if !headings[anchor] {
				t.Errorf("alert %s: docs/operations.md has no heading %q for its runbook_url", alert, alert)
			}
		}
	}
	slices.Sort(alerts)
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts %v, want %v", alerts, wantAlerts)
	}
	return metrics
}

// grafanaVariables are what Grafana puts in place of the dashboard's
// variables before it sends a query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$namespace", managerNamespace, "$policy", ".*")

// labelValues is a Grafana variable query: label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)

// checkDashboard checks the dashboard's ConfigMap and parses its queries;
// it returns the metric names each query reads.
func checkDashboard(t *testing.T, cm *unstructured.Unstructured) map[string][]string {
	t.Helper()
	if got := cm.GetLabels()["grafana_dashboard"]; got != "1" {
		t.Errorf("dashboard ConfigMap label grafana_dashboard=%q, want \"1\" (what the Grafana sidecar looks for)", got)
	}
	text, _, _ := unstructured.NestedString(cm.Object, "data", "celsched.json")
	var dashboard struct {
		UID        string
		Title      string
		Panels     []dashboardPanel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query any
			}
		}
	}
	if err := json.Unmarshal([]byte(text), &dashboard); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dashboard.UID == "" || dashboard.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", dashboard.UID, dashboard.Title)
	}
	queries := map[string]string{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			for _, target := range p.Targets {
				queries[fmt.Sprintf("panel %q %s", p.Title, target.RefID)] = target.Expr
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(dashboard.Panels)
	for _, v := range dashboard.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Errorf("variable %s: query %v, want label_values(SELECTOR, LABEL)", v.Name, v.Query)
			continue
		}
		queries["variable "+v.Name] = m[1]
	}
	for key, q := range queries {
		q = grafanaVariables.Replace(q)
		if strings.Contains(q, "$") {
			t.Errorf("%s: %q uses a variable the dashboard does not define", key, q)
		}
		queries[key] = q
	}
	in, err := json.Marshal(queries)
	if err != nil {
		t.Fatal(err)
	}
	var parsed map[string]struct {
		Type    string
		Metrics []string
		Error   string
	}
	runPromQL(t, "exprs", in, &parsed)
	metrics := map[string][]string{}
	for key, q := range queries {
		p := parsed[key]
		if p.Error != "" || len(p.Metrics) == 0 {
			t.Errorf("%s: %q: metrics %v, error %q", key, q, p.Metrics, p.Error)
		}
		metrics[key] = p.Metrics
	}
	return metrics
}

type dashboardPanel struct {
	Title   string
	Type    string
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string
	}
	Panels []dashboardPanel
}

// runPromQL runs hack/tools/promql (built into bin/ by the Makefile, passed
// as $PROMQL) in mode on input, and decodes its output into out.
func runPromQL(t *testing.T, mode string, input []byte, out any) {
	t.Helper()
	tool := os.Getenv("PROMQL")
	if tool == "" {
		t.Fatal("PROMQL is not set: run through make test, which builds bin/promql")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), tool, mode)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(input), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("promql %s: %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("promql %s: %v\n%s", mode, err, stdout.String())
	}
}

// markdownHeadings returns the GitHub anchors of a Markdown file's
// headings whose text is one word (the alerts' sections).
func markdownHeadings(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		if text, ok := strings.CutPrefix(strings.TrimLeft(s.Text(), "#"), " "); ok && strings.HasPrefix(s.Text(), "#") && !strings.Contains(text, " ") {
			anchors[strings.ToLower(text)] = true
		}
	}
	return anchors
}

func findObject(t *testing.T, objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, obj := range objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	t.Fatalf("the chart with %v renders no %s %s", monitoringValues, kind, name)
	return nil
}

// family is a metric family's name and type.
type family = map[string]dto.MetricType

// exported says whether a PromQL metric name is a family of families, or a
// histogram's (summary's) _bucket, _sum or _count series.
func exported(families family, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if typ, found := families[base]; ok && found && (typ == dto.MetricType_HISTOGRAM || (typ == dto.MetricType_SUMMARY && suffix != "_bucket")) {
			return true
		}
	}
	return false
}

// managerFamilies are the metric families the in-process manager exports:
// controller-runtime's registry (/metrics) and kube-scheduler's
// (/metrics/scheduler).
func managerFamilies(t *testing.T) family {
	t.Helper()
	out := family{}
	for _, g := range []func() ([]*dto.MetricFamily, error){ctrlmetrics.Registry.Gather, legacyregistry.DefaultGatherer.Gather} {
		families, err := g()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			out[f.GetName()] = f.GetType()
		}
	}
	return out
}

// apiserverMetrics scrapes the envtest kube-apiserver's /metrics.
func apiserverMetrics(t *testing.T) []byte {
	t.Helper()
	body, err := clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("scraping the API server's /metrics: %v", err)
	}
	return body
}

// apiserverSeries says whether the API server serves a series of the
// metric whose labels include label (name="value").
func apiserverSeries(t *testing.T, metric, label string) bool {
	t.Helper()
	for line := range strings.SplitSeq(string(apiserverMetrics(t)), "\n") {
		if labels, ok := strings.CutPrefix(line, metric+"{"); ok && (strings.HasPrefix(labels, label+",") || strings.Contains(labels, ","+label+",") || strings.Contains(labels, ","+label+"}") || strings.HasPrefix(labels, label+"}")) {
			return true
		}
	}
	return false
}

// apiserverFamilies are the metric families the envtest kube-apiserver
// serves at /metrics (the "# TYPE name type" lines of its text format).
func apiserverFamilies(t *testing.T) family {
	t.Helper()
	body := apiserverMetrics(t)
	out := family{}
	s := bufio.NewScanner(bytes.NewReader(body))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 4 && fields[0] == "#" && fields[1] == "TYPE" {
			out[fields[2]] = dto.MetricType(dto.MetricType_value[strings.ToUpper(fields[3])])
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exportMonitoredMetrics gives every metric the rules and the dashboard
// read a series, as a cluster would: policies that allow, deny (audited,
// with an enforcement override) and run out of the cycle's time budget,
// enough pods for a timed cycle, a rollout, and webhook calls (one
// denied).
func exportMonitoredMetrics(t *testing.T) {
	t.Helper()
	ns := createNamespace(t, "monitoring", map[string]string{"monitoring-test": "true"})
	createNodes(t, nodeSpec{name: "monitoring-a"}, nodeSpec{name: "monitoring-b"}, nodeSpec{name: "monitoring-c"})
	mine := map[string]string{"monitoring-test": "true"}

	// Allow, deny (audited) and an override: evaluations, would-be
	// rejections, enforcement counts; TimingSample pods and more, so that
	// some of their cycles are timed.
	applyPolicy(t, builder.MakePolicy("monitoring-audit").NamespaceLabels(mine).PodLabels(map[string]string{"app": "counted"}).
		Filter("any", "node.metadata.name != ''").
		FilterMsg("nowhere", "node.metadata.name == ''", "never", "").
		Audit().Override(map[string]string{"monitoring-enforce": "never"}, schedv1alpha1.Enforce).Obj())
	// A rollout: its status, read at each scrape.
	applyPolicy(t, builder.MakePolicy("monitoring-rollout").NamespaceLabels(map[string]string{"monitoring-rollout": "none"}).
		Filter("any", "true").Audit().Wave("only", map[string]string{"monitoring-rollout": "none"}, time.Hour).Obj())
	// Rules that together run far longer than the cycle's time budget
	// (evaluationBudget, 100 ms) on any node: one of them is cut off. Each
	// costs 900,000 (within the per-expression limit, about 30 ms on a
	// shared 2-core machine); eight of them stay within a policy's
	// evaluation budget; three such policies take about 0.7 s per node.
	for p := range 3 {
		slow := builder.MakePolicy(fmt.Sprintf("monitoring-slow-%d", p)).NamespaceLabels(mine).PodLabels(map[string]string{"app": "slow"}).Ignore()
		for i := range 8 {
			slow = slow.Filter(fmt.Sprintf("slow-%d", i), fmt.Sprintf("lists.range(150000).all(i, i >= -%d)", i+1))
		}
		applyPolicy(t, slow.Obj())
	}

	for i := range 20 {
		createPod(t, ns, fmt.Sprintf("counted-%d", i), withLabels(map[string]string{"app": "counted"}))
	}
	createPod(t, ns, "slow", withLabels(map[string]string{"app": "slow"}))
	waitPolicy(t, "monitoring-rollout", "with a rollout status", func(p *schedv1alpha1.SchedulingPolicy) bool {
		return p.Status.Rollout != nil && len(p.Status.Rollout.Waves) == 1
	})
	// A policy the webhook denies: the API server's rejection count.
	if err := testenv.WaitWebhook(t.Context(), k8sClient, true, waitTimeout); err != nil {
		t.Fatal(err)
	}
}
