package app

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// decoder decodes Kubernetes objects strictly: unknown fields are errors.
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// decodeObjects decodes every document of the files as objects of type T;
// a List (as `kubectl get -o yaml` prints) contributes its items.
func decodeObjects[T runtime.Object](docs []*document, kind string) ([]T, error) {
	var out []T
	for _, d := range docs {
		if _, k := d.kind(); k == "List" {
			list := &corev1.List{}
			if _, _, err := decoder.Decode(d.json, nil, list); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.file, d.root.Line, err)
			}
			for _, item := range list.Items {
				obj, err := decodeOne[T](item.Raw, d, kind)
				if err != nil {
					return nil, err
				}
				out = append(out, obj)
			}
			continue
		}
		obj, err := decodeOne[T](d.json, d, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

func decodeOne[T runtime.Object](data []byte, d *document, kind string) (T, error) {
	var zero T
	where := d.file
	if d.root.Line > 0 {
		where = fmt.Sprintf("%s:%d", d.file, d.root.Line)
	}
	obj, _, err := decoder.Decode(data, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		// A kind the CLI does not know (a custom resource: params) is read
		// as it is, where any object is wanted.
		if u, uerr := unstructuredOf(data, d); uerr == nil {
			if t, ok := any(u).(T); ok {
				return t, nil
			}
		}
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", where, err)
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("%s: want a %s, got a %s", where, kind, obj.GetObjectKind().GroupVersionKind().Kind)
	}
	return t, nil
}

// readObjects reads files of objects of one kind.
func readObjects[T runtime.Object](s *streams, files []string, kind string) ([]T, error) {
	if len(files) == 0 {
		return nil, nil
	}
	docs, err := readDocuments(files, s.in)
	if err != nil {
		return nil, err
	}
	return decodeObjects[T](docs, kind)
}

// readPolicies reads the SchedulingPolicies of files and directories,
// skipping documents of other kinds.
func readPolicies(s *streams, files []string) ([]*schedv1alpha1.SchedulingPolicy, error) {
	docs, err := readDocuments(files, s.in)
	if err != nil {
		return nil, err
	}
	var out []*schedv1alpha1.SchedulingPolicy
	for _, d := range docs {
		if !d.isPolicy() {
			continue
		}
		p, err := d.policy()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// decodeUnstructured decodes documents of any kind (params objects:
// ConfigMaps, custom resources); a List contributes its items.
func decodeUnstructured(docs []*document) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, d := range docs {
		obj, err := unstructuredOf(d.json, d)
		if err != nil {
			return nil, err
		}
		if obj.IsList() {
			err := obj.EachListItem(func(item runtime.Object) error {
				out = append(out, item.(*unstructured.Unstructured))
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.file, d.root.Line, err)
			}
			continue
		}
		out = append(out, obj)
	}
	return out, nil
}

func unstructuredOf(data []byte, d *document) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", d.file, d.root.Line, err)
	}
	if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" && !obj.IsList() {
		return nil, fmt.Errorf("%s:%d: a params object needs apiVersion, kind and metadata.name", d.file, d.root.Line)
	}
	return obj, nil
}

// readParams reads files of params objects.
func readParams(s *streams, files []string) ([]*unstructured.Unstructured, error) {
	if len(files) == 0 {
		return nil, nil
	}
	docs, err := readDocuments(files, s.in)
	if err != nil {
		return nil, err
	}
	return decodeUnstructured(docs)
}
