package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// zoneLabel is the node label the tenant policies read.
const zoneLabel = "topology.kubernetes.io/zone"

// tenantZonesFilter admits the nodes whose zone is listed in the params
// ConfigMap's data.zones (comma-separated).
const tenantZonesFilter = "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in params.data['zones'].split(',')"

// grantConfigMapParams lets the manager read ConfigMaps, as an admin does
// for a param kind (docs/policy-reference.md, "RBAC for param kinds").
func grantConfigMapParams(t *testing.T) {
	t.Helper()
	grantParams(t, "", "configmaps")
}

// grantParams lets the manager read a param kind's resource: a ClusterRole
// for it, labelled for celsched-params, bound to the manager's service
// account (envtest has no aggregation controller to do it through
// celsched-params).
func grantParams(t *testing.T, group, resource string) {
	t.Helper()
	name := "celsched-params-" + strings.ReplaceAll(resource+"."+group, ".", "-")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"scheduling.celsched.io/aggregate-to-params": "true"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: managerNamespace, Name: managerServiceAccount}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
		t.Cleanup(func() { deleteObject(t, obj) })
	}
}

// createParams creates a params ConfigMap.
func createParams(t *testing.T, namespace, name, zones string, objLabels map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: objLabels},
		Data:       map[string]string{"zones": zones},
	}
	if err := k8sClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("creating ConfigMap %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() { deleteObject(t, cm) })
	return cm
}

// setZones updates a params ConfigMap's zones and returns when it did.
func setZones(t *testing.T, cm *corev1.ConfigMap, zones string) time.Time {
	t.Helper()
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["zones"] = zones
	if err := k8sClient.Patch(t.Context(), cm, patch); err != nil {
		t.Fatalf("updating ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err)
	}
	return time.Now()
}

// avoidZones keeps the pod off the nodes of the zones, by a required node
// affinity.
func avoidZones(zones ...string) podOption {
	return func(p *corev1.Pod) {
		requireNodes(p, metav1.LabelSelectorRequirement{Key: zoneLabel, Operator: metav1.LabelSelectorOpNotIn, Values: zones})
	}
}

// createZoneNodes creates a node zone-Z in each zone Z.
func createZoneNodes(t *testing.T, zones ...string) {
	t.Helper()
	specs := make([]nodeSpec, len(zones))
	for i, z := range zones {
		specs[i] = nodeSpec{name: "zone-" + z, labels: map[string]string{zoneLabel: z}}
	}
	createNodes(t, specs...)
}

func TestParamsPerNamespace(t *testing.T) {
	grantConfigMapParams(t)
	createZoneNodes(t, "a", "b", "c")
	tenant := map[string]string{"params-test": "per-namespace"}
	nsA := createNamespace(t, "tenant-a", tenant)
	nsB := createNamespace(t, "tenant-b", tenant)
	nsC := createNamespace(t, "tenant-c", tenant)
	cmA := createParams(t, nsA, "placement", "a", nil)
	cmB := createParams(t, nsB, "placement", "b", nil)
	createParams(t, nsC, "placement", "c", nil)
	applyPolicy(t, builder.MakePolicy("tenant-zones").NamespaceLabels(tenant).
		ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
		Filter("zone", tenantZonesFilter).Obj())

	// Each tenant's pods land only in its zones.
	expectNode(t, createPod(t, nsA, "a-1"), "zone-a")
	expectNode(t, createPod(t, nsB, "b-1"), "zone-b")
	expectNode(t, createPod(t, nsC, "c-1"), "zone-c")

	// The scheduler reads params from its own informer, which sees an edit
	// some time after the API server took it. So each pod below that follows
	// an edit keeps off, by its own node affinity, the zones that the params
	// before the edit allow: a scheduler that has not seen the edit yet
	// rejects the pod instead of placing it by the old params, and the edit
	// releases it. Where it lands is then the edit's doing.

	// Editing the params moves the tenant's next pod.
	setZones(t, cmA, "b")
	expectNode(t, createPod(t, nsA, "a-2", avoidZones("a")), "zone-b")

	// A pod rejected by its params is released when they change. (a-2's
	// node shows the scheduler holds zones "b", so a-3 is rejected by them.)
	rejected := createPod(t, nsA, "a-3", avoidZones("b"))
	waitPending(t, rejected, reasonUnschedulable, "rejected by SchedulingPolicy tenant-zones, rule zone: expression is false")
	updated := setZones(t, cmA, "c")
	expectNode(t, rejected, "zone-c")
	t.Logf("a rejected pod was seen bound %v after its params changed", time.Since(updated))

	// Deleting the params applies parameterNotFoundAction Deny; creating
	// them again releases the pod.
	deleteObject(t, cmB)
	missing := createPod(t, nsB, "b-2", avoidZones("b"))
	waitPending(t, missing, reasonUnschedulable,
		"rejected by SchedulingPolicy tenant-zones, rule paramRef: no params ConfigMap placement in namespace "+nsB+" found (parameterNotFoundAction Deny)")
	created := time.Now()
	createParams(t, nsB, "placement", "a", nil)
	expectNode(t, missing, "zone-a")
	t.Logf("a pod rejected for missing params was seen bound %v after they were created", time.Since(created))
}

func TestParamsAllowAndSelector(t *testing.T) {
	grantConfigMapParams(t)
	createZoneNodes(t, "a", "b", "c")
	tenant := map[string]string{"params-test": "selector"}
	shared := createNamespace(t, "shared-params", nil)
	ns := createNamespace(t, "tenant", tenant)
	createParams(t, shared, "p1", "a,b", map[string]string{"zones-for": "tenants"})
	createParams(t, shared, "p2", "b,c", map[string]string{"zones-for": "tenants"})
	createParams(t, shared, "other", "a", nil)
	applyPolicy(t, builder.MakePolicy("tenant-zones-selector").NamespaceLabels(tenant).
		ParamKind("v1", "ConfigMap").ParamSelector(map[string]string{"zones-for": "tenants"}, shared, schedv1alpha1.DenyAction).
		Filter("zone", tenantZonesFilter).Obj())
	// Both params objects apply: only zone b passes both.
	for _, name := range []string{"s-1", "s-2"} {
		expectNode(t, createPod(t, ns, name), "zone-b")
	}

	// parameterNotFoundAction Allow: without params the policy is skipped.
	allowNs := createNamespace(t, "allow", map[string]string{"params-test": "allow"})
	applyPolicy(t, builder.MakePolicy("tenant-zones-allow").NamespaceLabels(map[string]string{"params-test": "allow"}).
		ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.AllowAction).
		Filter("zone", tenantZonesFilter).Obj())
	waitForNode(t, createPod(t, allowNs, "free"))
	createParams(t, allowNs, "placement", "c", nil)
	// Without params every node would do: wait until the scheduler has
	// them, or the next pod may be placed by their absence.
	waitParamsSeen(t)
	expectNode(t, createPod(t, allowNs, "placed"), "zone-c")
}

// waitParamsSeen waits until the scheduler's informer of ConfigMap params
// has seen every ConfigMap written before the call. It creates a witness:
// a pod held by a policy for want of its params ConfigMap, then the
// ConfigMap. One informer watches all ConfigMaps, and sees their changes
// in the order the API server made them: once the witness's ConfigMap
// releases the pod, the scheduler holds the ConfigMaps written before it.
// (A pod placed right after a ConfigMap write that restricts it could
// otherwise be placed by the old params: nothing else says when the
// scheduler has the new ones.)
func waitParamsSeen(t *testing.T) {
	t.Helper()
	labels := map[string]string{"params-test": "witness"}
	ns := createNamespace(t, "params-witness", labels)
	applyPolicy(t, builder.MakePolicy(ns).NamespaceLabels(labels).
		ParamKind("v1", "ConfigMap").ParamRef("witness", "", schedv1alpha1.DenyAction).
		PreEnqueue("params-seen", "true", "").Obj())
	pod := createPod(t, ns, "witness")
	waitPending(t, pod, reasonGated, "no params ConfigMap witness in namespace "+ns+" found")
	createParams(t, ns, "witness", "", nil)
	waitForNode(t, pod)
}

// TestParamsKindNotServed: a policy whose paramKind no CRD serves. (Not
// TestParamsCustomResource's TenantPlacement: that test deletes its CRD,
// but the kind stays known for a while after, and -count=2 or -shuffle
// runs this test after it: it then failed.)
func TestParamsKindNotServed(t *testing.T) {
	createNodes(t, nodeSpec{name: "node-1"})
	labels := map[string]string{"params-test": "missing-kind"}
	ns := createNamespace(t, "missing-kind", labels)
	policy := builder.MakePolicy("missing-param-kind").NamespaceLabels(labels).
		ParamKind("example.com/v1", "UnservedPlacement").ParamRef("placement", "", schedv1alpha1.DenyAction).
		Filter("zone", "'a' in params.spec.zones").Obj()
	if err := k8sClient.Create(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, policy) })
	// ParamsListing may come first, while the kind is looked up.
	waitCondition(t, policy.Name, schedv1alpha1.ConditionReady, func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonParamKindNotFound
	})
	// failurePolicy Fail: the pod is rejected, saying why.
	waitPending(t, createPod(t, ns, "p"), reasonUnschedulable,
		"SchedulingPolicy missing-param-kind: reading its params (UnservedPlacement placement): paramKind example.com/v1, Kind=UnservedPlacement is not served by the API server")
}

// TestParamsPreEnqueue: a pod held because its namespace has no params
// object is released when one is created; held again by the rule when the
// params say so.
func TestParamsPreEnqueue(t *testing.T) {
	grantConfigMapParams(t)
	createNodes(t, nodeSpec{name: "node-1"})
	labels := map[string]string{"params-test": "pre-enqueue"}
	ns := createNamespace(t, "approval", labels)
	applyPolicy(t, builder.MakePolicy("tenant-approved").NamespaceLabels(labels).
		ParamKind("v1", "ConfigMap").ParamRef("approval", "", schedv1alpha1.DenyAction).
		PreEnqueue("approved", "params.data[?'approved'].orValue('') == 'true'", "the namespace's approval ConfigMap does not say approved: \"true\"").Obj())

	held := createPod(t, ns, "held")
	waitPending(t, held, reasonGated,
		"held by SchedulingPolicy tenant-approved, rule paramRef: no params ConfigMap approval in namespace "+ns+" found (parameterNotFoundAction Deny)")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approval"}, Data: map[string]string{"approved": "no"}}
	if err := k8sClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, cm) })
	waitPending(t, held, reasonGated, "held by SchedulingPolicy tenant-approved, rule approved: the namespace's approval ConfigMap does not say approved: \"true\"")
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["approved"] = "true"
	if err := k8sClient.Patch(t.Context(), cm, patch); err != nil {
		t.Fatal(err)
	}
	expectNode(t, held, "node-1")
}

// tenantPlacementCRD is a small custom param kind.
const tenantPlacementCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tenantplacements.example.com
spec:
  group: example.com
  names: {kind: TenantPlacement, listKind: TenantPlacementList, plural: tenantplacements, singular: tenantplacement}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              zones: {type: array, maxItems: 16, items: {type: string, maxLength: 63}}
`

// TestParamsCustomResource: with the param kind's CRD installed, the
// webhook types params from its schema (a misspelt field is denied with
// its field path and CEL position), and the scheduler reads the custom
// resources as params.
func TestParamsCustomResource(t *testing.T) {
	installCRD(t, []byte(tenantPlacementCRD))
	grantParams(t, "example.com", "tenantplacements")

	labels := map[string]string{"params-test": "custom-resource"}
	policy := func(field string) *schedv1alpha1.SchedulingPolicy {
		return builder.MakePolicy("tenant-zones-cr").NamespaceLabels(labels).
			ParamKind("example.com/v1", "TenantPlacement").ParamRef("placement", "", schedv1alpha1.DenyAction).
			Filter("zone", "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in params.spec."+field).Obj()
	}
	err := k8sClient.Create(t.Context(), policy("zonez"))
	want := `spec.filters[0].expression: Invalid value: "node.metadata.labels[?'topology.kubernetes.io/zone'].orValue('') in params.spec.zonez": compilation failed: ERROR: <input>:1:80: undefined field 'zonez'`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("creating a policy with a misspelt params field: %v, want a denial with %q", err, want)
	}

	createZoneNodes(t, "a", "b")
	ns := createNamespace(t, "tenant-cr", labels)
	placement := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "TenantPlacement",
		"metadata": map[string]any{"name": "placement", "namespace": ns},
		"spec":     map[string]any{"zones": []any{"b"}},
	}}
	if err := k8sClient.Create(t.Context(), placement); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, placement) })
	applyPolicy(t, policy("zones"))
	expectNode(t, createPod(t, ns, "p"), "zone-b")
}

// TestParamsNotReadable: a param kind the manager was not granted holds up
// neither the scheduler nor other policies; its policy is not Ready and
// rejects its pods until the kind is granted, and then places them.
func TestParamsNotReadable(t *testing.T) {
	createZoneNodes(t, "a")
	labels := map[string]string{"params-test": "not-readable"}
	ns := createNamespace(t, "not-readable", labels)
	createParams(t, ns, "placement", "a", nil)
	policy := builder.MakePolicy("tenant-zones-not-readable").NamespaceLabels(labels).
		ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
		Filter("zone", tenantZonesFilter).Obj()
	if err := k8sClient.Create(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, policy) })
	// ParamsListing first, while the kind's first list is tried.
	waitCondition(t, policy.Name, schedv1alpha1.ConditionReady, func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonParamsNotReadable
	})
	pod := createPod(t, ns, "p")
	waitPending(t, pod, reasonUnschedulable, "the objects of paramKind /v1, Kind=ConfigMap cannot be listed")
	grantConfigMapParams(t)
	expectNode(t, pod, "zone-a")
}

// installCRD creates a CustomResourceDefinition (YAML) for the test and
// waits until it is established.
func installCRD(t *testing.T, data []byte) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(t, crd) })
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the CRD %s is not established: %v", crd.Name, err)
	}
	return crd
}
