package integration

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		"bind pods":                       {authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "default"}, true},
		"update pod status":               {authorizationv1.ResourceAttributes{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default"}, true},
		"watch nodes":                     {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "nodes"}, true},
		"watch namespaces":                {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "namespaces"}, true},
		"watch policies":                  {authorizationv1.ResourceAttributes{Verb: "watch", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, true},
		"patch policy status":             {authorizationv1.ResourceAttributes{Verb: "patch", Group: "scheduling.celsched.io", Resource: "schedulingpolicies", Subresource: "status"}, true},
		"update its lease":                {authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: managerNamespace, Name: "celsched"}, true},
		"create events":                   {authorizationv1.ResourceAttributes{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: "default"}, true},
		"read its certificate":            {authorizationv1.ResourceAttributes{Verb: "watch", Resource: "secrets", Namespace: managerNamespace, Name: "celsched-webhook-server-cert"}, true},
		"renew its certificate":           {authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: managerNamespace, Name: "celsched-webhook-server-cert"}, true},
		"publish its CA":                  {authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "celsched-validating-webhook-configuration"}, true},
		"change other webhooks":           {authorizationv1.ResourceAttributes{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "other"}, false},
		"read other secrets":              {authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: managerNamespace, Name: "other"}, false},
		"read secrets":                    {authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: managerNamespace}, false},
		"list secrets":                    {authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		"change policies":                 {authorizationv1.ResourceAttributes{Verb: "update", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"create policies":                 {authorizationv1.ResourceAttributes{Verb: "create", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"delete policies":                 {authorizationv1.ResourceAttributes{Verb: "delete", Group: "scheduling.celsched.io", Resource: "schedulingpolicies"}, false},
		"create pods":                     {authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}, false},
		"update nodes":                    {authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, false},
		"change namespaces":               {authorizationv1.ResourceAttributes{Verb: "update", Resource: "namespaces"}, false},
		"edit cluster roles":              {authorizationv1.ResourceAttributes{Verb: "update", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
		"delete other namespaces' leases": {authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               serviceaccount.MakeUsername(managerNamespace, managerServiceAccount),
				Groups:             serviceaccount.MakeGroupNames(managerNamespace),
				ResourceAttributes: &tc.attrs,
			}}
			got, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != tc.want {
				t.Errorf("allowed = %v, want %v (%s)", got.Status.Allowed, tc.want, got.Status.Reason)
			}
		})
	}
}
