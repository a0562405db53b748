package integration

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/analyze"
)

// TestAnalyzeFindsTenantWritableParams runs `celsched analyze` against
// the live cluster with both tenant samples applied, each namespace with
// a user bound to the built-in edit role, another to view, and a platform
// user bound to edit there and cluster-wide. Under the ConfigMap variant
// the editor may update and patch the namespace's params (it widens its
// own placement: TestTenantWidensConfigMapPlacement), and analyze names
// exactly it: not the viewer, who may not, nor the platform user, who may
// in every namespace. RBAC decides who can change an object, not update
// alone: in team-y a user who may create and delete ConfigMaps (not
// update or patch) replaces it; in team-z, which has no params object
// yet, the editor creates it with the zones it chooses; both are named.
// Under the secure sample (TenantPlacement) nobody bound in the
// namespace may: no finding.
func TestAnalyzeFindsTenantWritableParams(t *testing.T) {
	const suggestion = "keep the params in a kind these subjects cannot write (celsched's TenantPlacement, written by celsched-tenantplacement-editor), " +
		"or take update, patch, create and delete of it (and bind, escalate, impersonate) out of their roles"
	aggregateBuiltinRoles(t)
	grantConfigMapParams(t)
	createZoneNodes(t, "a", "b")
	platform := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "analyze-platform-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "analyze-platform"}},
	}
	if err := k8sClient.Create(t.Context(), platform); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, platform) })
	bindUsers := func(ns string) {
		namespaceUser(t, ns, "edit", "analyze-editor")
		namespaceUser(t, ns, "view", "analyze-viewer")
		namespaceUser(t, ns, "edit", "analyze-platform")
	}

	cmNamespace := createNamespace(t, "analyze-cm", map[string]string{"celsched.io/placement": "configmap"})
	bindUsers(cmNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cmNamespace, Name: "celsched-placement"}, Data: map[string]string{"zones": "a"}}
	if err := k8sClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, cm) })
	applyPolicy(t, loadPolicyFile(t, "configmap-params", "scheduling_v1alpha1_tenant-zones-configmap.yaml"))

	// team-y's user may create and delete ConfigMaps, not update or patch.
	recreatorRole := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "analyze-configmap-recreator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "delete"}}},
	}
	if err := k8sClient.Create(t.Context(), recreatorRole); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, recreatorRole) })
	yNamespace := createNamespace(t, "analyze-cmy", map[string]string{"celsched.io/placement": "configmap"})
	namespaceUser(t, yNamespace, recreatorRole.Name, "analyze-recreator")
	namespaceUser(t, yNamespace, "view", "analyze-viewer")
	cmY := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: yNamespace, Name: "celsched-placement"}, Data: map[string]string{"zones": "a"}}
	if err := k8sClient.Create(t.Context(), cmY); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, cmY) })
	// In team-y a user may also relabel the namespace (a Role in it that
	// grants update on namespaces: a request on a Namespace is authorized
	// in that namespace), and so move it out of the ConfigMap fence.
	labeller := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: yNamespace, Name: "analyze-labeller"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "update"}}}}
	if err := k8sClient.Create(t.Context(), labeller); err != nil {
		t.Fatal(err)
	}
	labellerBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: yNamespace, Name: "analyze-labeller"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: labeller.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "analyze-labeller"}}}
	if err := k8sClient.Create(t.Context(), labellerBinding); err != nil {
		t.Fatal(err)
	}
	// team-z has no params object yet; its editor may create one.
	zNamespace := createNamespace(t, "analyze-cmz", map[string]string{"celsched.io/placement": "configmap"})
	namespaceUser(t, zNamespace, "edit", "analyze-editor")
	namespaceUser(t, zNamespace, "view", "analyze-viewer")

	tpNamespace := createNamespace(t, "analyze-tp", map[string]string{"celsched.io/tenant": "x"})
	bindUsers(tpNamespace)
	placement := &schedv1alpha1.TenantPlacement{
		ObjectMeta: metav1.ObjectMeta{Namespace: tpNamespace, Name: "placement"},
		Spec:       schedv1alpha1.TenantPlacementSpec{Zones: []string{"a"}},
	}
	if err := k8sClient.Create(t.Context(), placement); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, placement) })
	applyPolicy(t, loadSample(t, "tenant-zones-and-pools"))

	r := analyzeReport(t)
	got := map[string]analyze.Finding{}
	for _, f := range r.Findings {
		if f.Kind == analyze.TenantWritableInput && slices.ContainsFunc([]string{cmNamespace, tpNamespace, yNamespace, zNamespace}, func(ns string) bool { return strings.Contains(f.Subject, ns+"/") }) {
			got[f.Subject] = f
		}
	}
	subject := "ConfigMap " + cmNamespace + "/celsched-placement"
	want := map[string]analyze.Finding{subject: {
		Kind: analyze.TenantWritableInput, Policies: []string{"tenant-zones-configmap"}, Subject: subject,
		Writers: []string{"User analyze-editor"},
		Evidence: "subjects bound in namespace " + cmNamespace + " may write it, and so move the fence of the pods of namespace " + cmNamespace +
			": User analyze-editor (update, patch, create, delete; RoleBinding analyze-editor (ClusterRole edit))",
		Suggestion: suggestion,
	}}
	// team-y: a user who may create and delete the namespace's ConfigMaps,
	// but not update or patch them, replaces the params object.
	recreator := "ConfigMap " + yNamespace + "/celsched-placement"
	want[recreator] = analyze.Finding{
		Kind: analyze.TenantWritableInput, Policies: []string{"tenant-zones-configmap"}, Subject: recreator,
		Writers: []string{"User analyze-recreator"},
		Evidence: "subjects bound in namespace " + yNamespace + " may write it, and so move the fence of the pods of namespace " + yNamespace +
			": User analyze-recreator (create, delete; RoleBinding analyze-recreator (ClusterRole analyze-configmap-recreator))",
		Suggestion: suggestion,
	}
	// team-z: no params object yet; an editor creates it with the zones
	// it chooses.
	missing := "ConfigMap " + zNamespace + "/celsched-placement (missing)"
	want[missing] = analyze.Finding{
		Kind: analyze.TenantWritableInput, Policies: []string{"tenant-zones-configmap"}, Subject: missing,
		Writers: []string{"User analyze-editor"},
		Evidence: "policy tenant-zones-configmap reads ConfigMap " + zNamespace + "/celsched-placement, which does not exist; subjects bound in namespace " + zNamespace +
			" may create it with the values they choose, and so set the fence of its pods: User analyze-editor (create; RoleBinding analyze-editor (ClusterRole edit))",
		Suggestion: "create the params object before the namespace's users can (a platform team's GitOps), in a kind they cannot create (celsched's TenantPlacement); " + suggestion,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tenant-writable-input findings of the two namespaces (-want +got):\n%s", diff)
	}
	// Who may relabel a namespace, of the four: team-y's labeller only
	// (edit and admin do not grant updating a Namespace).
	var relabel []analyze.Finding
	for _, f := range r.Findings {
		if f.Kind == analyze.TenantWritableInput && strings.HasPrefix(f.Subject, "Namespace ") &&
			slices.ContainsFunc([]string{cmNamespace, tpNamespace, yNamespace, zNamespace}, func(ns string) bool { return f.Subject == "Namespace "+ns+" (labels)" }) {
			relabel = append(relabel, f)
		}
	}
	if len(relabel) != 1 || relabel[0].Subject != "Namespace "+yNamespace+" (labels)" || !slices.Equal(relabel[0].Writers, []string{"User analyze-labeller"}) ||
		!slices.Contains(relabel[0].Policies, "tenant-zones-configmap") ||
		!strings.Contains(relabel[0].Evidence, "User analyze-labeller (update; RoleBinding analyze-labeller (Role analyze-labeller))") {
		t.Errorf("namespace label findings %+v, want one for %s naming User analyze-labeller (update)", relabel, yNamespace)
	}
	if slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "tenant-writable-input") }) {
		t.Errorf("live, the params writers are checked; notes: %q", r.Notes)
	}

	// A user who may read the cluster but not list RoleBindings nor ask
	// SubjectAccessReviews: the report says what was not checked, and
	// has the rest.
	reader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "analyze-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "pods", "configmaps", "persistentvolumes", "persistentvolumeclaims"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{schedv1alpha1.GroupVersion.Group}, Resources: []string{"schedulingpolicies", "tenantplacements"}, Verbs: []string{"get", "list"}},
		},
	}
	readerBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "analyze-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "analyze-reader"}},
	}
	for _, obj := range []client.Object{reader, readerBinding} {
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, obj) })
	}
	r = analyzeReport(t, "--as", "analyze-reader")
	for _, f := range r.Findings {
		if f.Kind == analyze.TenantWritableInput && len(f.Writers) > 0 {
			t.Errorf("a user who may not ask: finding %+v", f)
		}
	}
	const note = "who may write the params objects (tenant-writable-input) was not checked: it needs permission to list RoleBindings and ClusterRoleBindings and to create SubjectAccessReviews: "
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, note) && strings.Contains(n, "forbidden") }) {
		t.Errorf("a user who may not ask: want a note %q..., got %q", note, r.Notes)
	}
}
