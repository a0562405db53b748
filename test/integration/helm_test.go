package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/celsched/celsched/celplugins/featuregates"
	"github.com/celsched/celsched/cmd/manager/app"
	defaultconfig "github.com/celsched/celsched/config/scheduler"
)

// TestHelmChartMatchesKustomize renders charts/celsched with helm (built
// into bin/ by the Makefile) and compares it, object by object, with the
// kustomizations it packages: the default values with config/default,
// webhook.certs=cert-manager with config/certmanager. Helm's own labels,
// the ConfigMap's name hash (kustomize) and checksum annotation (helm) are
// the only differences allowed; the chart leaves the Namespace to
// `helm install --create-namespace`.
func TestHelmChartMatchesKustomize(t *testing.T) {
	for name, tc := range map[string]struct {
		kustomization string
		set           []string
	}{
		"default":      {kustomization: "default"},
		"cert-manager": {kustomization: "certmanager", set: []string{"--set", "webhook.certs=cert-manager"}},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := kustomize(tc.kustomization)
			if err != nil {
				t.Fatal(err)
			}
			wantByKey := map[string]*unstructured.Unstructured{}
			for _, obj := range want {
				if obj.GetKind() != "Namespace" {
					wantByKey[objectKey(normalize(obj))] = obj
				}
			}
			got := helmTemplate(t, tc.set...)
			for _, obj := range got {
				key := objectKey(normalize(obj))
				w := wantByKey[key]
				if w == nil {
					t.Errorf("the chart renders %s, which config/%s does not have", key, tc.kustomization)
					continue
				}
				delete(wantByKey, key)
				if diff := cmp.Diff(w.Object, obj.Object); diff != "" {
					t.Errorf("%s (-config/%s +chart):\n%s", key, tc.kustomization, diff)
				}
			}
			for key := range wantByKey {
				t.Errorf("the chart does not render %s of config/%s", key, tc.kustomization)
			}
		})
	}
}

// TestHelmChartValues checks the values for replicas, leader election and
// the scheduler name: they reach the Deployment and a scheduler
// configuration that the manager loads.
func TestHelmChartValues(t *testing.T) {
	objects := helmTemplate(t, "--set", "replicas=1,leaderElection.enabled=false,schedulerName=batch-celsched")
	var deployment *appsv1.Deployment
	var config string
	for _, obj := range objects {
		switch obj.GetKind() {
		case "Deployment":
			deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, cm); err != nil {
				t.Fatal(err)
			}
			config = cm.Data["scheduler-config.yaml"]
		}
	}
	if deployment == nil || *deployment.Spec.Replicas != 1 {
		t.Fatalf("Deployment %+v, want 1 replica", deployment)
	}
	args := strings.Join(deployment.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--leader-elect=false") {
		t.Errorf("manager args %q lack --leader-elect=false", args)
	}
	path := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := defaultconfig.Load(path)
	if err != nil {
		t.Fatalf("the chart's scheduler configuration does not load: %v\n%s", err, config)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "batch-celsched" {
		t.Errorf("profiles %+v, want one named batch-celsched", cfg.Profiles)
	}
}

// helmTemplate renders the chart into namespace celsched-system, CRDs
// included.
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("HELM is not set: run through make test, which builds bin/helm")
	}
	args = append([]string{"template", "celsched", filepath.Join(repoRoot, "charts", "celsched"), "--namespace", managerNamespace, "--include-crds"}, args...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var objects []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var raw json.RawMessage
		err := decoder.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objects
		}
		if err != nil {
			t.Fatalf("reading helm's output: %v", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			t.Fatalf("reading helm's output: %v", err)
		}
		objects = append(objects, obj)
	}
}

var configMapHash = regexp.MustCompile(`^(celsched-scheduler-config)-[a-z0-9]{10}$`)

// normalize removes, in place, what only helm or only kustomize adds.
func normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	labels := obj.GetLabels()
	delete(labels, "helm.sh/chart")
	delete(labels, "app.kubernetes.io/managed-by")
	if len(labels) == 0 {
		unstructured.RemoveNestedField(obj.Object, "metadata", "labels")
	} else {
		obj.SetLabels(labels)
	}
	obj.SetName(configMapHash.ReplaceAllString(obj.GetName(), "$1"))
	if obj.GetKind() == "Deployment" {
		unstructured.RemoveNestedField(obj.Object, "spec", "template", "metadata", "annotations")
		volumes, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "template", "spec", "volumes")
		for _, v := range volumes.([]any) {
			if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok {
				cm["name"] = configMapHash.ReplaceAllString(cm["name"].(string), "$1")
			}
		}
	}
	return obj
}

func objectKey(obj *unstructured.Unstructured) string {
	return obj.GetKind() + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// TestHelmChartParamKinds: the paramKinds value renders a ClusterRole that
// grants reading exactly those resources, labelled for celsched-params.
func TestHelmChartParamKinds(t *testing.T) {
	objects := helmTemplate(t, "--set", "paramKinds[0].apiGroup=,paramKinds[0].resource=configmaps,paramKinds[1].apiGroup=example.com,paramKinds[1].resource=tenantplacements")
	var role *rbacv1.ClusterRole
	for _, obj := range objects {
		if obj.GetKind() == "ClusterRole" && obj.GetName() == "celsched-params-kinds" {
			role = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole celsched-params-kinds")
	}
	if got := role.Labels["scheduling.celsched.io/aggregate-to-params"]; got != "true" {
		t.Errorf("label scheduling.celsched.io/aggregate-to-params = %q, want true", got)
	}
	read := []string{"get", "list", "watch"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: read},
		{APIGroups: []string{"example.com"}, Resources: []string{"tenantplacements"}, Verbs: read},
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// TestHelmChartFeatureGates: the featureGates value renders the manager's
// --feature-gates, and the emulatedVersion value its --emulated-version,
// which the manager's flags parse into the gates and version given; none
// by default; a gate the manager does not know, or a version out of its
// range, renders, and fails the manager's check with its name.
func TestHelmChartFeatureGates(t *testing.T) {
	for name, tc := range map[string]struct {
		set         []string
		want        map[string]bool
		wantVersion string
		wantErr     string
	}{
		"default": {},
		"two gates": {
			set:  []string{"--set", "featureGates.InPlacePodVerticalScalingSchedulerPreemption=true,featureGates.GenericWorkload=false"},
			want: map[string]bool{"InPlacePodVerticalScalingSchedulerPreemption": true, "GenericWorkload": false},
		},
		"unknown gate": {
			set:     []string{"--set", "featureGates.NoSuchGate=true"},
			want:    map[string]bool{"NoSuchGate": true},
			wantErr: "unrecognized feature gate: NoSuchGate",
		},
		"emulated version": {
			set:         []string{"--set", "emulatedVersion=1.36,featureGates.GenericWorkload=true"},
			want:        map[string]bool{"GenericWorkload": true},
			wantVersion: "1.36",
		},
		"emulated version out of range": {
			set:         []string{"--set-string", "emulatedVersion=1.30"},
			wantVersion: "1.30",
			wantErr:     "--emulated-version=1.30: emulation version 1.30 is not between [1.34, 1.37.0]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			var args []string
			for _, obj := range helmTemplate(t, tc.set...) {
				if obj.GetKind() != "Deployment" {
					continue
				}
				deployment := &appsv1.Deployment{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment); err != nil {
					t.Fatal(err)
				}
				args = deployment.Spec.Template.Spec.Containers[0].Args
			}
			if args == nil {
				t.Fatal("the chart renders no Deployment with args")
			}
			var o app.Options
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(args); err != nil {
				t.Fatalf("the manager's flags do not parse the chart's args %q: %v", args, err)
			}
			if diff := cmp.Diff(tc.want, o.FeatureGates); diff != "" {
				t.Errorf("feature gates (-want +got) from args %q:\n%s", args, diff)
			}
			if o.EmulatedVersion != tc.wantVersion {
				t.Errorf("emulated version %q from args %q, want %q", o.EmulatedVersion, args, tc.wantVersion)
			}
			err := featuregates.Check(featuregates.Settings{EmulatedVersion: o.EmulatedVersion, FeatureGates: o.FeatureGates})
			if tc.wantErr == "" && err != nil {
				t.Errorf("the rendered gates fail the manager's check: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("checking the rendered gates: error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
