package integration

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/celsched/celsched/cmd/manager/app"
)

// kustomize renders a kustomization of config/, as `kubectl apply -k` does.
func kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/%s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// TestDefaultInstall renders config/default and applies it with a
// server-side dry run: every object is valid for the API server, the
// Deployment mounts the generated scheduler ConfigMap, and runs as the
// service account that config/rbac binds.
func TestDefaultInstall(t *testing.T) {
	kinds := dryRunInstall(t, "default")
	for _, want := range []string{
		"Namespace/celsched-system", "CustomResourceDefinition/schedulingpolicies.scheduling.celsched.io",
		"ServiceAccount/celsched", "ClusterRole/celsched-manager", "ClusterRoleBinding/celsched-manager",
		"ClusterRoleBinding/celsched-as-kube-scheduler", "ClusterRoleBinding/celsched-as-volume-scheduler",
		"Role/celsched-leader-election", "RoleBinding/celsched-leader-election", "Deployment/celsched",
		"Service/celsched-webhook-service", "ValidatingWebhookConfiguration/celsched-validating-webhook-configuration",
		"Role/celsched-webhook-cert", "ClusterRole/celsched-webhook-cert",
		"CustomResourceDefinition/tenantplacements.scheduling.celsched.io",
		"ClusterRole/celsched-tenantplacement-editor", "ClusterRole/celsched-tenantplacement-viewer",
	} {
		if kinds[want] == nil {
			t.Errorf("config/default has no %s", want)
		}
	}
	deployment := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kinds["Deployment/celsched"].Object, deployment); err != nil {
		t.Fatal(err)
	}
	spec := deployment.Spec.Template.Spec
	configMap := spec.Volumes[0].ConfigMap.Name
	if kinds["ConfigMap/"+configMap] == nil || !strings.HasPrefix(configMap, "celsched-scheduler-config-") {
		t.Errorf("the Deployment mounts ConfigMap %q, not the generated scheduler configuration", configMap)
	}
	if spec.ServiceAccountName != managerServiceAccount || deployment.Namespace != managerNamespace {
		t.Errorf("the Deployment runs as %s/%s, want %s/%s", deployment.Namespace, spec.ServiceAccountName, managerNamespace, managerServiceAccount)
	}
	c := spec.Containers[0]
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("the manager container lacks probes or leader election: %+v", c)
	}
	if !slices.Contains(c.Args, "--webhook-certs=self-signed") {
		t.Errorf("the manager does not provision its webhook certificate: %v", c.Args)
	}
	checkWebhookWiring(t, kinds, deployment)

	// The names the manager's flags default to are those of the install.
	var opts app.Options
	opts.AddFlags(flag.NewFlagSet("manager", flag.ContinueOnError))
	for _, name := range []string{"Service/" + opts.WebhookCert.Service, "ValidatingWebhookConfiguration/" + opts.WebhookCert.WebhookConfiguration} {
		if kinds[name] == nil {
			t.Errorf("the manager's default %s is not in config/default", name)
		}
	}
	if !roleNames(kinds["Role/celsched-webhook-cert"], "secrets")[opts.WebhookCert.Secret] {
		t.Errorf("the Role celsched-webhook-cert does not name the manager's default Secret %s", opts.WebhookCert.Secret)
	}
	if !roleNames(kinds["ClusterRole/celsched-webhook-cert"], "validatingwebhookconfigurations")[opts.WebhookCert.WebhookConfiguration] {
		t.Errorf("the ClusterRole celsched-webhook-cert does not name %s", opts.WebhookCert.WebhookConfiguration)
	}
}

// TestCertManagerInstall renders config/certmanager: the manager serves
// the Certificate's Secret, mounted where --webhook-cert-dir points, the
// Certificate names the webhook's Service, cert-manager injects its CA
// into the webhook configuration, and the manager has no rights on Secrets
// or webhook configurations. Everything but cert-manager's own objects
// (whose CRDs envtest does not have) is applied with a server-side dry run.
func TestCertManagerInstall(t *testing.T) {
	kinds := dryRunInstall(t, "certmanager")
	for _, gone := range []string{"Role/celsched-webhook-cert", "RoleBinding/celsched-webhook-cert", "ClusterRole/celsched-webhook-cert", "ClusterRoleBinding/celsched-webhook-cert"} {
		if kinds[gone] != nil {
			t.Errorf("config/certmanager installs %s", gone)
		}
	}
	certificate := kinds["Certificate/celsched-serving-cert"]
	if certificate == nil || kinds["Issuer/celsched-selfsigned-issuer"] == nil {
		t.Fatalf("config/certmanager has no Certificate celsched-serving-cert or Issuer")
	}
	deployment := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kinds["Deployment/celsched"].Object, deployment); err != nil {
		t.Fatal(err)
	}
	checkWebhookWiring(t, kinds, deployment)

	secretName, _, _ := unstructured.NestedString(certificate.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(certificate.Object, "spec", "dnsNames")
	if want := "celsched-webhook-service." + managerNamespace + ".svc"; !slices.Contains(dnsNames, want) {
		t.Errorf("the Certificate's dnsNames %v lack %s", dnsNames, want)
	}
	webhooks := kinds["ValidatingWebhookConfiguration/celsched-validating-webhook-configuration"]
	if got, want := webhooks.GetAnnotations()["cert-manager.io/inject-ca-from"], managerNamespace+"/"+certificate.GetName(); got != want {
		t.Errorf("cert-manager.io/inject-ca-from = %q, want %q", got, want)
	}
	spec := deployment.Spec.Template.Spec
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--webhook-certs=files") {
		t.Errorf("the manager does not read its certificate from files: %v", c.Args)
	}
	var certDir string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
			certDir = v
		}
	}
	mounted := ""
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && m.MountPath == certDir {
				mounted = v.Secret.SecretName
			}
		}
	}
	if mounted != secretName {
		t.Errorf("--webhook-cert-dir=%s mounts Secret %q, want the Certificate's %q", certDir, mounted, secretName)
	}
}

// dryRunInstall renders config/dir and applies every object with a
// server-side dry run, except cert-manager's (envtest has not its CRDs). The
// webhook configuration is applied under another name: the suite's own,
// which envtest points at a URL, has the install's name. It returns the
// objects by kind and name.
func dryRunInstall(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	objects, err := kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, obj := range objects {
		kinds[obj.GetKind()+"/"+obj.GetName()] = obj
		if obj.GroupVersionKind().Group == "cert-manager.io" {
			continue
		}
		if obj.GetKind() == "ValidatingWebhookConfiguration" {
			obj = obj.DeepCopy()
			obj.SetName(obj.GetName() + "-dry-run")
		}
		err := k8sClient.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll, client.FieldOwner("celsched-test"), client.ForceOwnership)
		if err != nil {
			t.Errorf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	return kinds
}

// checkWebhookWiring checks that the webhook configuration calls the
// Service, which selects the manager's pods on their webhook port.
func checkWebhookWiring(t *testing.T, kinds map[string]*unstructured.Unstructured, deployment *appsv1.Deployment) {
	t.Helper()
	webhooks := kinds["ValidatingWebhookConfiguration/celsched-validating-webhook-configuration"]
	if webhooks == nil {
		t.Fatal("no ValidatingWebhookConfiguration celsched-validating-webhook-configuration")
	}
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(webhooks.Object, config); err != nil {
		t.Fatal(err)
	}
	ref := config.Webhooks[0].ClientConfig.Service
	service := &corev1.Service{}
	if obj := kinds["Service/"+ref.Name]; obj == nil || obj.GetNamespace() != ref.Namespace {
		t.Fatalf("the webhook calls Service %s/%s, which is not installed", ref.Namespace, ref.Name)
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, service); err != nil {
		t.Fatal(err)
	}
	if !labels.SelectorFromSet(service.Spec.Selector).Matches(labels.Set(deployment.Spec.Template.Labels)) {
		t.Errorf("Service %s selects %v, not the manager's pods %v", service.Name, service.Spec.Selector, deployment.Spec.Template.Labels)
	}
	target := service.Spec.Ports[0].TargetPort.String()
	found := false
	for _, p := range deployment.Spec.Template.Spec.Containers[0].Ports {
		found = found || (p.Name == target && p.ContainerPort == 9443)
	}
	if !found || !slices.Contains(deployment.Spec.Template.Spec.Containers[0].Args, "--webhook-port=9443") {
		t.Errorf("Service %s targets port %q, which the manager does not serve the webhook on", service.Name, target)
	}
}

// roleNames returns the resourceNames that role grants on resource.
func roleNames(role *unstructured.Unstructured, resource string) map[string]bool {
	names := map[string]bool{}
	if role == nil {
		return names
	}
	// A Role has the rules of a ClusterRole.
	r := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, r); err != nil {
		return names
	}
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, resource) {
			for _, n := range rule.ResourceNames {
				names[n] = true
			}
		}
	}
	return names
}
