package manifest

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	yamlv3 "go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
)

// decodeStrict is the one strict decoder: it checks a document's
// YAML tree against the Go type of out (unknown or misspelt fields,
// duplicated keys, values of the wrong kind), then decodes the document's
// JSON into out as the API server would (case-sensitive field names). An
// error names FILE:LINE and the field path of the first problem found,
// and how many more there are.
func decodeStrict(file string, node *yamlv3.Node, data []byte, out any) error {
	var problems []fieldProblem
	checkStrict(node, reflect.TypeOf(out), "", &problems)
	if len(problems) > 0 {
		p := problems[0]
		msg := fmt.Sprintf("%s:%d: %s: %s", file, p.line, p.path, p.msg)
		if len(problems) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(problems)-1)
		}
		return fmt.Errorf("%s", msg)
	}
	// A type that decodes itself (a quantity, a time) may still refuse
	// its value.
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, out); err != nil {
		return fmt.Errorf("%s:%d: %w", file, node.Line, err)
	}
	return nil
}

// fieldProblem is a field that does not fit its type.
type fieldProblem struct {
	line      int
	path, msg string
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkStrict walks a YAML node and the Go type it decodes into together.
// Types that decode themselves (json.Unmarshaler: quantities, times,
// int-or-strings, raw objects) are left to their decoder.
func checkStrict(n *yamlv3.Node, t reflect.Type, path string, out *[]fieldProblem) {
	for n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" {
		return // null is every type's zero value
	}
	problem := func(n *yamlv3.Node, path, msg string) {
		*out = append(*out, fieldProblem{line: n.Line, path: orRoot(path), msg: msg})
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// The type decodes itself (a quantity, a time, an int-or-string):
		// its decoder judges the value, here, where its line is known.
		if err := unmarshalNode(n, t); err != nil {
			problem(n, path, err.Error())
		}
		return
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) && t.Kind() != reflect.String {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yamlv3.MappingNode {
			problem(n, path, "want an object, got "+describe(n))
			return
		}
		fields := cachedJSONFields(t)
		for key, value := range pairs(n, path, problem) {
			f, ok := fields[key.Value]
			if !ok {
				problem(key, join(path, key.Value), "unknown field"+suggest(key.Value, fields))
				continue
			}
			checkStrict(value, f, join(path, key.Value), out)
		}
	case reflect.Map:
		if n.Kind != yamlv3.MappingNode {
			problem(n, path, "want an object, got "+describe(n))
			return
		}
		for key, value := range pairs(n, path, problem) {
			checkStrict(value, t.Elem(), path+"["+key.Value+"]", out)
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 { // []byte: a base64 string
			checkScalar(n, reflect.TypeFor[string](), path, problem)
			return
		}
		if n.Kind != yamlv3.SequenceNode {
			problem(n, path, "want a list, got "+describe(n))
			return
		}
		for i, item := range n.Content {
			checkStrict(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Interface:
		checkDuplicates(n, path, problem)
	default:
		checkScalar(n, t, path, problem)
	}
}

// unmarshalNode decodes a YAML value with the JSON decoder of type t.
func unmarshalNode(n *yamlv3.Node, t reflect.Type) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil // not JSON (a map with non-string keys): the decode after says so
	}
	u, ok := reflect.New(t).Interface().(json.Unmarshaler)
	if !ok {
		return nil
	}
	return u.UnmarshalJSON(data)
}

// pairs yields a mapping's keys and values, reporting a key given twice
// (the API server refuses duplicated fields).
func pairs(n *yamlv3.Node, path string, problem func(*yamlv3.Node, string, string)) func(func(*yamlv3.Node, *yamlv3.Node) bool) {
	return func(yield func(*yamlv3.Node, *yamlv3.Node) bool) {
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			if first, dup := seen[key.Value]; dup {
				problem(key, join(path, key.Value), fmt.Sprintf("duplicate field (first at line %d)", first))
				continue
			}
			seen[key.Value] = key.Line
			if !yield(key, n.Content[i+1]) {
				return
			}
		}
	}
}

// checkDuplicates reports duplicated keys in a value of any type.
func checkDuplicates(n *yamlv3.Node, path string, problem func(*yamlv3.Node, string, string)) {
	switch n.Kind {
	case yamlv3.MappingNode:
		for key, value := range pairs(n, path, problem) {
			checkDuplicates(value, join(path, key.Value), problem)
		}
	case yamlv3.SequenceNode:
		for i, item := range n.Content {
			checkDuplicates(item, fmt.Sprintf("%s[%d]", path, i), problem)
		}
	}
}

// checkScalar checks a value for a string, a boolean or a number.
func checkScalar(n *yamlv3.Node, t reflect.Type, path string, problem func(*yamlv3.Node, string, string)) {
	if n.Kind != yamlv3.ScalarNode {
		problem(n, path, fmt.Sprintf("want %s, got %s", kindName(t), describe(n)))
		return
	}
	ok := true
	switch t.Kind() {
	case reflect.String:
		// An unquoted date is a YAML timestamp, which becomes a string.
		ok = n.Tag == "!!str" || n.Tag == "!!timestamp"
	case reflect.Bool:
		ok = n.Tag == "!!bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		ok = n.Tag == "!!int"
	case reflect.Float32, reflect.Float64:
		ok = n.Tag == "!!int" || n.Tag == "!!float"
	}
	if !ok {
		problem(n, path, fmt.Sprintf("want %s, got %s", kindName(t), describe(n)))
	}
}

// fieldsByType caches jsonFields. Key: the struct type; bound: the types
// decoded (a fixed set); never invalidated; written by the first decode
// of a type. Its maps are only read.
var fieldsByType sync.Map // reflect.Type -> map[string]reflect.Type

func cachedJSONFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsByType.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f := jsonFields(t)
	fieldsByType.Store(t, f)
	return f
}

// jsonFields are a struct's fields by JSON name, with the fields of
// embedded and inlined structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if (f.Anonymous && name == "" || strings.Contains(","+opts+",", ",inline,")) && ft.Kind() == reflect.Struct {
			for k, v := range jsonFields(ft) {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// suggest names the field a misspelt one may be: one of case or at most
// two edits away.
func suggest(name string, fields map[string]reflect.Type) string {
	best, bestDistance := "", 3
	for f := range fields {
		d := editDistance(strings.ToLower(name), strings.ToLower(f))
		if d < bestDistance || d == bestDistance && f < best {
			best, bestDistance = f, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func describe(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "an object"
	case yamlv3.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return "the string " + strconv.Quote(n.Value)
	case "!!bool":
		return "the boolean " + n.Value
	case "!!int", "!!float":
		return "the number " + n.Value
	}
	return strconv.Quote(n.Value)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	default:
		return "an integer"
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}
