package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// TestDefaultInstall renders config/default and applies it with a
// server-side dry run: every object is valid for the API server, the
// Deployment mounts the generated scheduler ConfigMap, and runs as the
// service account that config/rbac binds.
func TestDefaultInstall(t *testing.T) {
	objects, err := kustomize("default")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, obj := range objects {
		kinds[obj.GetKind()+"/"+obj.GetName()] = obj
		err := k8sClient.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll, client.FieldOwner("celsched-test"), client.ForceOwnership)
		if err != nil {
			t.Errorf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	for _, want := range []string{
		"Namespace/celsched-system", "CustomResourceDefinition/schedulingpolicies.scheduling.celsched.io",
		"ServiceAccount/celsched", "ClusterRole/celsched-manager", "ClusterRoleBinding/celsched-manager",
		"ClusterRoleBinding/celsched-as-kube-scheduler", "ClusterRoleBinding/celsched-as-volume-scheduler",
		"Role/celsched-leader-election", "RoleBinding/celsched-leader-election", "Deployment/celsched",
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
}
