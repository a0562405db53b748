package integration

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Who can move a fence: a namespace's users hold the built-in edit (or
// admin) role there, as namespace owners usually do. Under the shipped
// tenant sample (tenant-zones-and-pools, params in a TenantPlacement) they
// cannot widen their own placement; under its ConfigMap variant
// (config/samples/configmap-params) they can, which is why the webhook
// warns of it.

// TestTenantCannotWidenTenantPlacement: a user bound to edit in its
// namespace reads its TenantPlacement but may not update, create or delete
// one (Forbidden), and a pod of the namespace that wants a zone outside
// the placement stays pending; a user bound to admin may not either, nor
// grant itself celsched-tenantplacement-editor. The platform team's change
// of the placement moves the pod.
func TestTenantCannotWidenTenantPlacement(t *testing.T) {
	aggregateBuiltinRoles(t)
	createZoneNodes(t, "a", "b")
	ns := createNamespace(t, "tenant-tp", map[string]string{"celsched.io/tenant": "x"})
	users := map[string]string{"edit": "tenant-editor", "admin": "tenant-owner"}
	clients := map[string]client.Client{}
	for role, name := range users {
		clients[role] = namespaceUser(t, ns, role, name)
	}

	placement := &schedv1alpha1.TenantPlacement{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "placement"},
		Spec:       schedv1alpha1.TenantPlacementSpec{Zones: []string{"a"}},
	}
	if err := k8sClient.Create(t.Context(), placement); err != nil {
		t.Fatalf("creating the TenantPlacement as the platform team: %v", err)
	}
	t.Cleanup(func() { deleteObject(t, placement) })
	applyPolicy(t, loadSample(t, "tenant-zones-and-pools"))

	for role, c := range clients {
		t.Run(role, func(t *testing.T) {
			got := &schedv1alpha1.TenantPlacement{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(placement), got); err != nil {
				t.Fatalf("reading the namespace's TenantPlacement: %v", err)
			}
			widened := got.DeepCopy()
			widened.Spec.Zones = []string{"a", "b"}
			if err := c.Update(t.Context(), widened); !apierrors.IsForbidden(err) {
				t.Errorf("updating the TenantPlacement: got %v, want Forbidden", err)
			}
			patch := client.MergeFrom(got.DeepCopy())
			widened = got.DeepCopy()
			widened.Spec.Zones = []string{"a", "b"}
			if err := c.Patch(t.Context(), widened, patch); !apierrors.IsForbidden(err) {
				t.Errorf("patching the TenantPlacement: got %v, want Forbidden", err)
			}
			other := &schedv1alpha1.TenantPlacement{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-" + role},
				Spec: schedv1alpha1.TenantPlacementSpec{Zones: []string{"b"}}}
			if err := c.Create(t.Context(), other); !apierrors.IsForbidden(err) {
				t.Errorf("creating a TenantPlacement: got %v, want Forbidden", err)
			}
			if err := c.Delete(t.Context(), got); !apierrors.IsForbidden(err) {
				t.Errorf("deleting the TenantPlacement: got %v, want Forbidden", err)
			}
			grant := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "self-grant-" + role},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "celsched-tenantplacement-editor"},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: users[role]}},
			}
			if err := c.Create(t.Context(), grant); !apierrors.IsForbidden(err) {
				t.Errorf("binding celsched-tenantplacement-editor: got %v, want Forbidden", err)
			}
		})
	}
	stored := &schedv1alpha1.TenantPlacement{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(placement), stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Spec.Zones) != 1 || stored.Spec.Zones[0] != "a" {
		t.Fatalf("the TenantPlacement changed: zones %v", stored.Spec.Zones)
	}

	inZoneB := func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "b"} }
	pod := createPod(t, ns, "wants-zone-b", inZoneB)
	waitPending(t, pod, corev1.PodReasonUnschedulable, "SchedulingPolicy tenant-zones-and-pools, rule tenant-zone")

	// The platform team widens the placement: the pod is placed.
	patch := client.MergeFrom(stored.DeepCopy())
	stored.Spec.Zones = []string{"a", "b"}
	if err := k8sClient.Patch(t.Context(), stored, patch); err != nil {
		t.Fatalf("patching the TenantPlacement as the platform team: %v", err)
	}
	expectNode(t, pod, "zone-b")
}

// TestTenantWidensConfigMapPlacement: under the ConfigMap variant, the
// same user bound to edit in its namespace updates the ConfigMap, and its
// pod that wants a zone outside the placement is placed there.
func TestTenantWidensConfigMapPlacement(t *testing.T) {
	aggregateBuiltinRoles(t)
	grantConfigMapParams(t)
	createZoneNodes(t, "a", "b")
	ns := createNamespace(t, "tenant-cm", map[string]string{"celsched.io/placement": "configmap"})
	editor := namespaceUser(t, ns, "edit", "tenant-editor")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "celsched-placement"}, Data: map[string]string{"zones": "a"}}
	if err := k8sClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, cm) })
	applyPolicy(t, loadPolicyFile(t, "configmap-params", "scheduling_v1alpha1_tenant-zones-configmap.yaml"))

	pod := createPod(t, ns, "wants-zone-b", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{zoneLabel: "b"} })
	waitPending(t, pod, corev1.PodReasonUnschedulable, "SchedulingPolicy tenant-zones-configmap, rule tenant-zone")

	got := &corev1.ConfigMap{}
	if err := editor.Get(t.Context(), client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	got.Data["zones"] = "a,b"
	if err := editor.Update(t.Context(), got); err != nil {
		t.Fatalf("updating the namespace's ConfigMap as its editor: %v", err)
	}
	expectNode(t, pod, "zone-b")
}

// namespaceUser binds a user to a built-in ClusterRole (edit, admin) in a
// namespace, as a platform grants a namespace to a team, and returns a
// client acting as that user (impersonated by the test's admin).
func namespaceUser(t *testing.T, namespace, clusterRole, name string) client.Client {
	t.Helper()
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := k8sClient.Create(t.Context(), binding); err != nil {
		t.Fatalf("binding %s to %s in %s: %v", name, clusterRole, namespace, err)
	}
	cfg := rest.CopyConfig(testConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{user.AllAuthenticated}}
	c, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// aggregateBuiltinRoles gives the built-in view, edit and admin
// ClusterRoles the rules of the ClusterRoles their aggregationRule
// selects, as kube-controller-manager's clusterrole-aggregation controller
// does in a cluster; envtest runs no controller manager, so they have none.
// The rules are those of a real cluster of this version, with celsched's
// roles installed (celsched-tenantplacement-viewer is aggregated to view,
// and view to edit and edit to admin, hence the order).
func aggregateBuiltinRoles(t *testing.T) {
	t.Helper()
	for _, name := range []string{"view", "edit", "admin"} {
		role := &rbacv1.ClusterRole{}
		if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: name}, role); err != nil {
			t.Fatal(err)
		}
		var rules []rbacv1.PolicyRule
		for _, selector := range role.AggregationRule.ClusterRoleSelectors {
			var list rbacv1.ClusterRoleList
			if err := k8sClient.List(t.Context(), &list, client.MatchingLabels(selector.MatchLabels)); err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Items {
				if r.Name != name {
					rules = append(rules, r.Rules...)
				}
			}
		}
		role.Rules = rules
		if err := k8sClient.Update(t.Context(), role); err != nil {
			t.Fatalf("aggregating the rules of ClusterRole %s: %v", name, err)
		}
	}
}

// loadPolicyFile reads a SchedulingPolicy of config/samples/<path>.
func loadPolicyFile(t *testing.T, path ...string) *schedv1alpha1.SchedulingPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{repoRoot, "config", "samples"}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	policy := &schedv1alpha1.SchedulingPolicy{}
	if err := yaml.UnmarshalStrict(data, policy); err != nil {
		t.Fatal(err)
	}
	return policy
}
