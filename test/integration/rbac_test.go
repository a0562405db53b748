package integration

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// TestManagerRBAC checks what the manager's service account may do. That
// it can do what it needs is shown by every scheduling test, which runs the
// manager as that account; this test checks that it can do no more.
func TestManagerRBAC(t *testing.T) {
	cases := map[string]struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		"bind pods":                                {authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default"}, true},
		"update pod status":                        {authorizationv1.ResourceAttributes{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default"}, true},
		"watch nodes":                              {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "nodes"}, true},
		"watch namespaces":                         {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "namespaces"}, true},
		"watch policies":                           {authorizationv1.ResourceAttributes{Verb: "watch", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, true},
		"patch policy status":                      {authorizationv1.ResourceAttributes{Verb: "patch", Group: "scheduling.celsched.io", Resource: "schedulingpolicies", Subresource: "status"}, true},
		"update its lease":                         {authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: managerNamespace, Name: "celsched"}, true},
		"create events":                            {authorizationv1.ResourceAttributes{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: "default"}, true},
		"read its certificate":                     {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "secrets", Namespace: managerNamespace, Name: "celsched-webhook-server-cert"}, true},
		"renew its certificate":                    {authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: managerNamespace, Name: "celsched-webhook-server-cert"}, true},
		"publish its CA":                           {authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "celsched-validating-webhook-configuration"}, true},
		"change other webhooks":                    {authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "other"}, false},
		"read other secrets":                       {authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: managerNamespace, Name: "other"}, false},
		"read secrets":                             {authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: managerNamespace}, false},
		"list secrets":                             {authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		"change policies":                          {authorizationv1.ResourceAttributes{Verb: "update", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"create policies":                          {authorizationv1.ResourceAttributes{Verb: "create", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"delete policies":                          {authorizationv1.ResourceAttributes{Verb: "delete", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"create pods":                              {authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, false},
		"update nodes":                             {authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, false},
		"change namespaces":                        {authorizationv1.ResourceAttributes{Verb: "update", Resource: "namespaces"}, false},
		"edit cluster roles":                       {authorizationv1.ResourceAttributes{Verb: "update", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
		"watch tenant placements":                  {authorizationv1.ResourceAttributes{Verb: "watch", Group: "scheduling.celsched.io", Resource: "tenantplacements"}, true},
		"change tenant placements":                 {authorizationv1.ResourceAttributes{Verb: "update", Group: "scheduling.celsched.io", Resource: "tenantplacements", Namespace: "default"}, false},
		"read a param kind's CRD (webhook typing)": {authorizationv1.ResourceAttributes{Verb: "get", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "tenantplacements.example.com"}, true},
		"change CRDs":                              {authorizationv1.ResourceAttributes{Verb: "update", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, false},
		"read configmaps (no param kind granted)":  {authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "default"}, false},
		"watch configmaps (no param kind granted)": {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps"}, false},
		"delete other namespaces' leases":          {authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkAccess(t, tc.attrs, tc.want)
		})
	}
}

// checkAccess asks the API server whether the manager's service account
// may do something.
func checkAccess(t *testing.T, attrs authorizationv1.ResourceAttributes, want bool) {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               serviceaccount.MakeUsername(managerNamespace, managerServiceAccount),
		Groups:             serviceaccount.MakeGroupNames(managerNamespace),
		ResourceAttributes: &attrs,
	}}
	got, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allowed != want {
		t.Errorf("%s %s: allowed = %v, want %v (%s)", attrs.Verb, attrs.Resource, got.Status.Allowed, want, got.Status.Reason)
	}
}

// TestParamKindRBAC: a param kind granted as docs/policy-reference.md says
// (a ClusterRole for the kind, labelled for celsched-params) lets the
// manager read that kind and nothing more. envtest runs no
// kube-controller-manager, so no aggregation: the test binds the role as
// the aggregation would grant it.
func TestParamKindRBAC(t *testing.T) {
	configMaps := authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps"}
	checkAccess(t, configMaps, false)
	grantConfigMapParams(t)
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: serviceaccount.MakeUsername(managerNamespace, managerServiceAccount), Groups: serviceaccount.MakeGroupNames(managerNamespace),
			ResourceAttributes: &configMaps,
		}}
		got, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed, err
	})
	if err != nil {
		t.Fatalf("the granted param kind is not readable: %v", err)
	}
	for _, verb := range []string{"get", "list", "watch"} {
		checkAccess(t, authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps", Namespace: "team-a"}, true)
	}
	checkAccess(t, authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: "team-a"}, false)
	checkAccess(t, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false)
}
