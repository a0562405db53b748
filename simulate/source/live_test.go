package source

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestListAllPages: listAll reads every page (the fake client does not
// page by itself: the interceptor serves Limit and Continue as an API
// server does).
func TestListAllPages(t *testing.T) {
	const n = 2*pageSize + 1
	objs := make([]runtime.Object, n)
	for i := range n {
		objs[i] = st.MakeNode().Name(fmt.Sprintf("node-%04d", i)).Obj()
	}
	var calls []client.ListOptions
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithRuntimeObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			o := (&client.ListOptions{}).ApplyOptions(opts)
			calls = append(calls, *o)
			if err := c.List(ctx, list); err != nil {
				return err
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return err
			}
			start := 0
			if o.Continue != "" {
				if start, err = strconv.Atoi(o.Continue); err != nil {
					return err
				}
			}
			end := min(start+int(o.Limit), len(items))
			if end < len(items) {
				list.SetContinue(strconv.Itoa(end))
			}
			return meta.SetList(list, items[start:end])
		},
	}).Build()
	nodes, err := listAll[*corev1.Node](context.Background(), c, &corev1.NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != n || nodes[0].Name != "node-0000" || nodes[n-1].Name != fmt.Sprintf("node-%04d", n-1) {
		t.Errorf("%d nodes, from %s to %s; want %d", len(nodes), nodes[0].Name, nodes[len(nodes)-1].Name, n)
	}
	if len(calls) != 3 || calls[0].Limit != pageSize || calls[2].Continue != strconv.Itoa(2*pageSize) {
		t.Errorf("list calls %+v: want 3 pages of %d", calls, pageSize)
	}
}
