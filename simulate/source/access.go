package source

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Access asks the cluster read live who may write its objects: the
// subjects bound in an object's namespace (by its RoleBindings, and its
// service accounts by ClusterRoleBindings), each asked of the API
// server's authorizer with a SubjectAccessReview. Its user needs to list
// RoleBindings and ClusterRoleBindings and to create SubjectAccessReviews.
// It is not safe for concurrent use.
type Access struct {
	c client.Client
	// Caches, written by Writers only and bounded by the namespaces and
	// kinds asked about: bound, the subjects bound in a namespace (by
	// namespace); clusterBindings, the ClusterRoleBindings, listed once
	// (listedCluster); everywhere, whether a subject may do a verb on a
	// resource in every namespace (by subject, verb, group, resource).
	// Nothing invalidates them: an Access lives for one report.
	bound           map[string][]BoundSubject
	clusterBindings []*rbacv1.ClusterRoleBinding
	listedCluster   bool
	everywhere      map[string]bool
}

// accessQPS and accessBurst are the client-side rate limit of Access's
// requests: a SubjectAccessReview reads nothing from storage, and one is
// asked per subject, object and verb.
const (
	accessQPS   = 50
	accessBurst = 100
)

func newAccess(kube *genericclioptions.ConfigFlags) (*Access, error) {
	c, err := newClient(kube, accessQPS, accessBurst)
	if err != nil {
		return nil, err
	}
	return &Access{c: c, bound: map[string][]BoundSubject{}, everywhere: map[string]bool{}}, nil
}

// BoundSubject is an RBAC subject and the bindings that bind it in a
// namespace.
type BoundSubject struct {
	rbacv1.Subject
	// Bindings name them: RoleBinding edit-team (ClusterRole edit).
	Bindings []string
}

// String names the subject: User alice, Group devs, ServiceAccount
// team-a/ci.
func (s BoundSubject) String() string {
	if s.Kind == rbacv1.ServiceAccountKind {
		return s.Kind + " " + s.Namespace + "/" + s.Name
	}
	return s.Kind + " " + s.Name
}

// Writer is a subject that may write an object, and how.
type Writer struct {
	BoundSubject
	// Verbs are what it may do that changes the object: update, patch,
	// create (of a missing object, or with delete: replace it), delete,
	// and what lets it grant itself those (bind, escalate, impersonate).
	Verbs []string
}

// Writers returns the subjects bound in a namespaced object's namespace
// that may change it, but may not do so to every object of its kind in
// every namespace (those are cluster admins, or a platform team bound
// cluster-wide: not the namespace's users), sorted by subject. A subject
// changes the object when RBAC lets it update or patch it, delete it and
// create it again, or grant itself those (create RoleBindings with bind
// or escalate on roles, or impersonate). A cluster-scoped object has
// none: RoleBindings grant no cluster-scoped resource.
func (a *Access) Writers(ctx context.Context, obj *unstructured.Unstructured) ([]Writer, error) {
	return a.writers(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName(), true)
}

// Creators returns the subjects bound in the namespace that may create
// the object of that kind, namespace and name, which does not exist (or
// grant themselves that), as Writers does for an existing one. An empty
// name is any object of the kind (a paramRef selector).
func (a *Access) Creators(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) ([]Writer, error) {
	return a.writers(ctx, gvk, namespace, name, false)
}

// LabelWriters returns the subjects bound in a namespace that may update
// or patch the Namespace itself (its labels, which namespaceSelectors and
// namespaceObject read), or grant themselves that, as Writers does for
// an object: a RoleBinding in the namespace may grant it (a request on a
// Namespace is authorized in that namespace).
func (a *Access) LabelWriters(ctx context.Context, namespace string) ([]Writer, error) {
	out, err := a.writers(ctx, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, namespace, namespace, true)
	if err != nil {
		return nil, err
	}
	// Deleting a Namespace and creating it again is not a way to relabel
	// it (it takes every object of the namespace with it).
	return slices.DeleteFunc(out, func(w Writer) bool {
		return !slices.Contains(w.Verbs, "update") && !slices.Contains(w.Verbs, "patch") && !slices.ContainsFunc(w.Verbs, isGrant)
	}), nil
}

// isGrant says whether a verb of Writer.Verbs is a way to grant oneself
// the others (bind, escalate, impersonate).
func isGrant(verb string) bool {
	return strings.HasPrefix(verb, "bind ") || strings.HasPrefix(verb, "escalate ") || strings.HasPrefix(verb, "impersonate ")
}

func (a *Access) writers(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, exists bool) ([]Writer, error) {
	if namespace == "" {
		return nil, nil
	}
	mapping, err := a.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	resource := mapping.Resource
	subjects, err := a.boundIn(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var out []Writer
	for _, s := range subjects {
		// may says whether the subject may do the verb on the resource in
		// the namespace (of that name, when named), and not everywhere.
		may := func(verb, group, res, name string) (bool, error) {
			attrs := authorizationv1.ResourceAttributes{Namespace: namespace, Name: name, Verb: verb, Group: group, Resource: res}
			allowed, err := a.allowed(ctx, s.Subject, attrs)
			if err != nil || !allowed {
				return false, err
			}
			key := strings.Join([]string{s.String(), verb, group, res}, "\x00")
			all, ok := a.everywhere[key]
			if !ok {
				if all, err = a.allowed(ctx, s.Subject, authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: res}); err != nil {
					return false, err
				}
				a.everywhere[key] = all
			}
			return !all, nil
		}
		verbs := []string{"create", "delete"}
		if exists {
			verbs = []string{"update", "patch", "create", "delete"}
		}
		w := Writer{BoundSubject: s}
		can := map[string]bool{}
		for _, verb := range verbs {
			named := name
			if verb == "create" {
				named = "" // a create request has no name: RBAC's resourceNames never allow it
			}
			ok, err := may(verb, resource.Group, resource.Resource, named)
			if err != nil {
				return nil, err
			}
			can[verb] = ok
		}
		// Granting itself: a RoleBinding to a role that allows more
		// (create RoleBindings, with bind on any ClusterRole or escalate
		// on roles), or acting as someone else.
		grants := []string{}
		if ok, err := may("create", rbacv1.GroupName, "rolebindings", ""); err != nil {
			return nil, err
		} else if ok {
			for _, g := range []struct{ verb, res string }{{"bind", "clusterroles"}, {"bind", "roles"}, {"escalate", "roles"}} {
				ok, err := may(g.verb, rbacv1.GroupName, g.res, "")
				if err != nil {
					return nil, err
				}
				if ok {
					grants = append(grants, g.verb+" "+g.res)
				}
			}
		}
		// (Impersonating the namespace's service accounts, which the
		// edit role allows, gives what they are bound to: they are among
		// the subjects asked about themselves.)
		for _, res := range []string{"users", "groups"} {
			ok, err := may("impersonate", "", res, "")
			if err != nil {
				return nil, err
			}
			if ok {
				grants = append(grants, "impersonate "+res)
			}
		}
		switch {
		case exists && (can["update"] || can["patch"]):
			for _, verb := range []string{"update", "patch", "create", "delete"} {
				if can[verb] {
					w.Verbs = append(w.Verbs, verb)
				}
			}
		case exists && can["create"] && can["delete"]:
			w.Verbs = []string{"create", "delete"}
		case !exists && can["create"]:
			w.Verbs = []string{"create"}
		}
		w.Verbs = append(w.Verbs, grants...)
		if len(w.Verbs) > 0 {
			out = append(out, w)
		}
	}
	return out, nil
}

// boundIn lists the subjects bound in a namespace: those of its
// RoleBindings, and its service accounts that ClusterRoleBindings bind,
// sorted by subject.
func (a *Access) boundIn(ctx context.Context, namespace string) ([]BoundSubject, error) {
	if subjects, ok := a.bound[namespace]; ok {
		return subjects, nil
	}
	roleBindings, err := listAll[*rbacv1.RoleBinding](ctx, a.c, &rbacv1.RoleBindingList{}, client.InNamespace(namespace))
	if err != nil {
		return nil, fmt.Errorf("listing the RoleBindings of namespace %s: %w", namespace, err)
	}
	if !a.listedCluster {
		if a.clusterBindings, err = listAll[*rbacv1.ClusterRoleBinding](ctx, a.c, &rbacv1.ClusterRoleBindingList{}); err != nil {
			return nil, fmt.Errorf("listing ClusterRoleBindings: %w", err)
		}
		a.listedCluster = true
	}
	byName := map[string]*BoundSubject{}
	add := func(s rbacv1.Subject, binding string) {
		if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == "" {
			s.Namespace = namespace // a RoleBinding's service account defaults to its namespace
		}
		s.APIGroup = ""
		b := BoundSubject{Subject: s}
		if byName[b.String()] == nil {
			byName[b.String()] = &b
		}
		byName[b.String()].Bindings = append(byName[b.String()].Bindings, binding)
	}
	for _, rb := range roleBindings {
		for _, s := range rb.Subjects {
			add(s, fmt.Sprintf("RoleBinding %s (%s %s)", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name))
		}
	}
	for _, crb := range a.clusterBindings {
		for _, s := range crb.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace {
				add(s, fmt.Sprintf("ClusterRoleBinding %s (ClusterRole %s)", crb.Name, crb.RoleRef.Name))
			}
		}
	}
	out := make([]BoundSubject, 0, len(byName))
	for _, s := range byName {
		slices.Sort(s.Bindings)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y BoundSubject) int { return cmp.Compare(x.String(), y.String()) })
	a.bound[namespace] = out
	return out, nil
}

// allowed asks the authorizer whether a subject may act on a resource,
// as a request of that subject would be: a user or a service account is
// authenticated (system:authenticated), a service account is in its
// groups.
func (a *Access) allowed(ctx context.Context, s rbacv1.Subject, attrs authorizationv1.ResourceAttributes) (bool, error) {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &attrs}}
	switch s.Kind {
	case rbacv1.UserKind:
		review.Spec.User, review.Spec.Groups = s.Name, []string{user.AllAuthenticated}
	case rbacv1.GroupKind:
		review.Spec.Groups = []string{s.Name}
	case rbacv1.ServiceAccountKind:
		review.Spec.User = serviceaccount.MakeUsername(s.Namespace, s.Name)
		review.Spec.Groups = append(serviceaccount.MakeGroupNames(s.Namespace), user.AllAuthenticated)
	default:
		return false, nil
	}
	if err := a.c.Create(ctx, review); err != nil {
		where := "in every namespace"
		if attrs.Namespace != "" {
			where = "in namespace " + attrs.Namespace
		}
		return false, fmt.Errorf("asking whether %s %s may %s %s %s (a SubjectAccessReview): %w", s.Kind, s.Name, attrs.Verb, attrs.Resource, where, err)
	}
	return review.Status.Allowed, nil
}
