package engine

import (
	"reflect"
	"strings"
	"sync"

	"github.com/google/cel-go/common/types/ref"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// A pod is converted to a CEL value only as far as the policies evaluated
// on it read it: the fields of the pod (apiVersion, kind, metadata, spec,
// status) they read and, of metadata, spec and status, those of their own
// fields they select, found in the checked expressions (podProjection).
// Converting a whole pod as the API server returns it (its managedFields,
// defaulted spec and status) costs about 40 µs and 30 KB; its labels and
// containers, what most rules read, a third of that. The value of a field
// that is converted is the value the whole pod's conversion gives it, and
// a field that is not is absent: a policy whose expressions read it finds
// it converted (PodInput.podValue grows the value it reads), so no
// expression ever reads a field that was left out.

// podFields is a set of the pod's fields, as bits of podFieldTable: bit 0
// is the whole pod; each of the pod's fields has a bit for all of it, and
// each field of metadata, spec and status one of its own. A set that
// holds a field whole holds the bits of its fields too, and the whole pod
// every bit, so that covers is a comparison of bits.
type podFields [2]uint64

const podWholeBit = 0

func (f *podFields) set(bit int)                { f[bit/64] |= 1 << (bit % 64) }
func (f podFields) has(bit int) bool            { return f[bit/64]&(1<<(bit%64)) != 0 }
func (f podFields) union(o podFields) podFields { return podFields{f[0] | o[0], f[1] | o[1]} }

// covers says whether f holds every field of o.
func (f podFields) covers(o podFields) bool { return o[0]&^f[0] == 0 && o[1]&^f[1] == 0 }

// meets says whether f and o share a field.
func (f podFields) meets(o podFields) bool { return f[0]&o[0] != 0 || f[1]&o[1] != 0 }

// podFieldTable numbers the fields of corev1.Pod and of its metadata, spec
// and status by their JSON names, from the Go types the OpenAPI schema of
// a pod is generated from.
type podFieldTable struct {
	top    []podTopField
	byName map[string]int // JSON name -> index in top
	every  podFields
}

// podTopField is a field of the pod.
type podTopField struct {
	name string
	// bit is the field's (all of it); all is bit with the bits of its
	// fields.
	bit int
	all podFields
	// index is the field's index in corev1.Pod (for apiVersion and kind:
	// in the inline TypeMeta, whose fields are strings).
	index  []int
	str    bool
	fields map[string]podSubField // JSON name -> field; nil for strings
}

// podSubField is a field of metadata, spec or status: its index in its
// struct, and its bit (0 when the table ran out of bits: reading it then
// reads its parent whole).
type podSubField struct {
	index int
	bit   int
}

var podTable = sync.OnceValue(newPodFieldTable)

func newPodFieldTable() *podFieldTable {
	t := &podFieldTable{byName: map[string]int{}}
	t.every.set(podWholeBit)
	next := 1
	newBit := func() int {
		if next >= len(podFields{})*64 {
			return 0
		}
		next++
		return next - 1
	}
	podType := reflect.TypeFor[corev1.Pod]()
	var add func(typ reflect.Type, index []int)
	add = func(typ reflect.Type, index []int) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			idx := append(append([]int(nil), index...), i)
			if name == "" && sf.Anonymous { // TypeMeta, inline
				add(sf.Type, idx)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			f := podTopField{name: name, bit: newBit(), index: idx}
			f.all.set(f.bit)
			switch {
			case sf.Type.Kind() == reflect.String:
				f.str = true
			case sf.Type.Kind() == reflect.Struct:
				f.fields = map[string]podSubField{}
				for j := range sf.Type.NumField() {
					sub, _, _ := strings.Cut(sf.Type.Field(j).Tag.Get("json"), ",")
					if sub == "" || sub == "-" {
						continue
					}
					b := newBit()
					f.fields[sub] = podSubField{index: j, bit: b}
					if b != 0 {
						f.all.set(b)
					}
				}
			default:
				continue // none in corev1.Pod: read as the whole pod
			}
			t.byName[name] = len(t.top)
			t.top = append(t.top, f)
			t.every = t.every.union(f.all)
		}
	}
	add(podType, nil)
	return t
}

// podProjection is what one expression reads of the pod, by name, as the
// reference analysis finds it (referenceVisitor): the whole pod, or some
// of its fields, each whole (nil) or some of its fields.
type podProjection struct {
	whole  bool
	fields map[string]map[string]bool
}

// fieldsOf returns the set of bits of what p names; a name the table does
// not know reads as its parent whole (the whole pod for a field of the
// pod).
func (t *podFieldTable) fieldsOf(p *podProjection) podFields {
	if p.whole {
		return t.every
	}
	var out podFields
	for name, subs := range p.fields {
		i, ok := t.byName[name]
		if !ok {
			return t.every
		}
		top := &t.top[i]
		if subs == nil || top.fields == nil {
			out = out.union(top.all)
			continue
		}
		for sub := range subs {
			if unescaped, ok := apiservercel.Unescape(sub); ok {
				sub = unescaped
			}
			f, ok := top.fields[sub]
			if !ok || f.bit == 0 {
				out = out.union(top.all)
				break
			}
			out.set(f.bit)
		}
	}
	return out
}

// podVal converts the fields f of a pod: each field of the pod in f whole
// by ToUnstructured of that field, each field of which f holds only some
// fields by ToUnstructured of a copy with only those set (the others
// dropped from its map), then the schema converter of the pod over the
// map they make, as the whole pod's conversion (toVal) does.
func (e *Environment) podVal(pod *corev1.Pod, f podFields) (ref.Val, error) {
	t := podTable()
	if f.has(podWholeBit) {
		return e.toVal(pod, e.podValues)
	}
	u := make(map[string]any, len(t.top))
	podStruct := reflect.ValueOf(pod).Elem()
	for i := range t.top {
		top := &t.top[i]
		if !f.meets(top.all) {
			continue
		}
		field := podStruct.FieldByIndex(top.index)
		if top.str {
			// omitempty, as ToUnstructured writes them.
			if s := field.String(); s != "" {
				u[top.name] = s
			}
			continue
		}
		whole := f.has(top.bit)
		obj := field.Addr().Interface()
		if !whole {
			projected := reflect.New(field.Type())
			for _, sub := range top.fields {
				if sub.bit != 0 && f.has(sub.bit) {
					projected.Elem().Field(sub.index).Set(field.Field(sub.index))
				}
			}
			obj = projected.Interface()
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		if !whole {
			for name := range m {
				if sub, ok := top.fields[name]; !ok || sub.bit == 0 || !f.has(sub.bit) {
					delete(m, name)
				}
			}
		}
		u[top.name] = m
	}
	return e.podValues.convert(u), nil
}
