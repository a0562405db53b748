package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestDenyPodNodeNameSample applies docs/security.md's
// ValidatingAdmissionPolicy (config/samples/admission) to the API
// server: in a tenant namespace a pod created with spec.nodeName is
// refused, even when the cluster admin creates it (the policy matches
// the namespace, not the user, as a controller creating a tenant's
// pods would be), with the policy's message; a pod without nodeName is
// created, and a pod with nodeName in a namespace that is not a
// tenant's too.
func TestDenyPodNodeNameSample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "samples", "admission", "deny-pod-nodename.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want a policy and its binding, got %d documents", len(docs))
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for i, obj := range []client.Object{vap, binding} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), obj); err != nil {
			t.Fatal(err)
		}
		if err := k8sClient.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(t, obj) })
	}
	tenant := createNamespace(t, "nodename-tenant", map[string]string{"celsched.io/tenant": "x"})
	other := createNamespace(t, "nodename-other", nil)
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	// The policy is enforced once the API server has loaded it.
	var refusal error
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := pod(tenant, "pinned", "some-node")
		refusal = k8sClient.Create(ctx, p)
		if refusal == nil {
			_ = k8sClient.Delete(ctx, p, client.GracePeriodSeconds(0))
			return false, nil
		}
		return true, nil
	}); err != nil {
		t.Fatalf("a pod with nodeName in a tenant namespace was still created after a minute: %v", err)
	}
	if want := "pods in tenant namespaces are placed by the scheduler: spec.nodeName is not allowed"; !strings.Contains(refusal.Error(), want) {
		t.Errorf("refusal %q does not say %q", refusal, want)
	}
	for _, p := range []*corev1.Pod{pod(tenant, "scheduled", ""), pod(other, "pinned", "some-node")} {
		if err := k8sClient.Create(t.Context(), p); err != nil {
			t.Errorf("pod %s/%s: %v", p.Namespace, p.Name, err)
			continue
		}
		t.Cleanup(func() { deleteObject(t, p) })
	}
}
