package manifest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	goruntime "runtime"

	yamlv3 "go.yaml.in/yaml/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// scheme knows the kinds decoded into Go types; other kinds are
// read as unstructured objects where any object is wanted.
var scheme = func() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(schedv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	return scheme
}()

// DecodeObjects decodes every document as objects of type T,
// strictly (decodeStrict); a List (as `kubectl get -o yaml` prints)
// contributes its items.
func DecodeObjects[T runtime.Object](docs []*Document, kind string) ([]T, error) {
	return decodeObjects[T](docs, kind, false)
}

// decodeObjects is DecodeObjects; with release, it drops each List
// item's YAML tree and JSON once the item is decoded (the documents are
// the caller's own and not read again), so that a large dump is not held
// twice.
func decodeObjects[T runtime.Object](docs []*Document, kind string, release bool) ([]T, error) {
	var out []T
	for _, d := range docs {
		if _, k := d.Kind(); k == "List" {
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(d.JSON, &list); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.File, d.Root.Line, err)
			}
			if release {
				d.JSON = nil
			}
			items := child(d.Root, "items")
			objs := make([]T, len(list.Items))
			errs := make([]error, len(list.Items))
			// The items one per CPU: a dump's thousands of objects decode
			// independently. The first error in the list's order is said.
			workqueue.ParallelizeUntil(context.Background(), goruntime.GOMAXPROCS(0), len(list.Items), func(i int) {
				node := d.Root
				if items != nil && i < len(items.Content) {
					node = items.Content[i]
				}
				objs[i], errs[i] = DecodeOne[T](d.File, node, list.Items[i], kind)
				if release {
					list.Items[i] = nil
					if items != nil && i < len(items.Content) {
						items.Content[i] = nil
					}
				}
			})
			for _, err := range errs {
				if err != nil {
					return nil, err
				}
			}
			out = append(out, objs...)
			continue
		}
		obj, err := DecodeOne[T](d.File, d.Root, d.JSON, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// DecodeOne decodes one object, of the Go type its apiVersion and kind
// name; node is its YAML tree (for lines), data its JSON.
func DecodeOne[T runtime.Object](file string, node *yamlv3.Node, data []byte, kind string) (T, error) {
	var zero T
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return zero, fmt.Errorf("%s:%d: %w", file, node.Line, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return zero, fmt.Errorf("%s:%d: want a %s: apiVersion and kind are required", file, node.Line, kind)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	obj, err := scheme.New(gvk)
	if runtime.IsNotRegisteredError(err) {
		// A kind the CLI does not know (a custom resource: params) is read
		// as it is, where any object is wanted.
		u, uerr := Unstructured(data, file, node.Line)
		if uerr != nil {
			return zero, uerr
		}
		if t, ok := any(u).(T); ok {
			return t, nil
		}
		return zero, fmt.Errorf("%s:%d: want a %s, got a %s", file, node.Line, kind, tm.Kind)
	}
	if err != nil {
		return zero, fmt.Errorf("%s:%d: %w", file, node.Line, err)
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("%s:%d: want a %s, got a %s", file, node.Line, kind, tm.Kind)
	}
	if err := decodeStrict(file, node, data, obj); err != nil {
		return zero, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return t, nil
}

// ReadObjects reads files of objects of one kind (kind names it in
// errors); "-" is stdin.
func ReadObjects[T runtime.Object](stdin io.Reader, files []string, kind string) ([]T, error) {
	if len(files) == 0 {
		return nil, nil
	}
	docs, err := ReadDocuments(files, stdin)
	if err != nil {
		return nil, err
	}
	return decodeObjects[T](docs, kind, true)
}

// ReadPolicies reads the SchedulingPolicies of files and directories,
// skipping documents of other kinds.
func ReadPolicies(stdin io.Reader, files []string) ([]*schedv1alpha1.SchedulingPolicy, error) {
	docs, err := ReadDocuments(files, stdin)
	if err != nil {
		return nil, err
	}
	var out []*schedv1alpha1.SchedulingPolicy
	for _, d := range docs {
		if !d.IsPolicy() {
			continue
		}
		p, err := d.Policy()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// DecodeUnstructured decodes documents of any kind (params objects:
// ConfigMaps, custom resources); a List contributes its items.
func DecodeUnstructured(docs []*Document) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, d := range docs {
		obj, err := Unstructured(d.JSON, d.File, d.Root.Line)
		if err != nil {
			return nil, err
		}
		if obj.IsList() {
			err := obj.EachListItem(func(item runtime.Object) error {
				out = append(out, item.(*unstructured.Unstructured))
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.File, d.Root.Line, err)
			}
			continue
		}
		out = append(out, obj)
	}
	return out, nil
}

// Unstructured decodes one params object (a ConfigMap, a custom resource)
// as it is.
func Unstructured(data []byte, file string, line int) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, line, err)
	}
	if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" && !obj.IsList() {
		return nil, fmt.Errorf("%s:%d: a params object needs apiVersion, kind and metadata.name", file, line)
	}
	return obj, nil
}

// ReadUnstructured reads files of objects of any kind as they are
// (params objects).
func ReadUnstructured(stdin io.Reader, files []string) ([]*unstructured.Unstructured, error) {
	if len(files) == 0 {
		return nil, nil
	}
	docs, err := ReadDocuments(files, stdin)
	if err != nil {
		return nil, err
	}
	return DecodeUnstructured(docs)
}
