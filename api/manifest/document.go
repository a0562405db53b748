// Package manifest reads Kubernetes objects from YAML files the way the
// API server would accept them, strictly: an unknown or misspelt field, a
// key given twice or a value of the wrong type is an error naming the
// file, the line and the field path. The celsched CLI reads every file
// with it, and so does the PolicyTest format (api/policytest).
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Document is one YAML document of a file, with its node tree for finding
// the line of a field.
type Document struct {
	File string
	Root *yamlv3.Node // the document's top mapping
	JSON []byte
}

// Line returns the line of a field path such as spec.filters[0].expression
// in the document, or of the closest ancestor found.
func (d *Document) Line(path string) int {
	n := d.Root
	best := n.Line
	for _, step := range pathSteps(path) {
		next := child(n, step)
		if next == nil {
			break
		}
		n, best = next, next.Line
	}
	return best
}

var stepPattern = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

// pathSteps splits a field path into keys and [index] steps.
func pathSteps(path string) []string {
	return stepPattern.FindAllString(path, -1)
}

func child(n *yamlv3.Node, step string) *yamlv3.Node {
	if strings.HasPrefix(step, "[") {
		i, err := strconv.Atoi(strings.Trim(step, "[]"))
		if err != nil || n.Kind != yamlv3.SequenceNode || i >= len(n.Content) {
			return nil
		}
		return n.Content[i]
	}
	if n.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == step {
			return n.Content[i+1]
		}
	}
	return nil
}

// ReadDocuments reads every YAML document of the files given: a file, a
// directory (its *.yaml and *.yml files, recursively, in name order) or "-"
// for standard input.
func ReadDocuments(paths []string, stdin io.Reader) ([]*Document, error) {
	var files []string
	for _, p := range paths {
		if p == "-" {
			files = append(files, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	var out []*Document
	for _, f := range files {
		var data []byte
		var err error
		if f == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		docs, err := parseDocuments(f, data)
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
	}
	return out, nil
}

// parseDocuments splits a file into its non-empty documents.
func parseDocuments(file string, data []byte) ([]*Document, error) {
	// A file of one document (a dump, as kubectl get -o yaml prints a
	// List) has the file's JSON, without writing the document out again
	// first. Converted while the document's tree is built, on another
	// core, when no line starts a second document: both walk the whole
	// file (on 5000 nodes and 10,000 pods, 1.5 and 0.8 s).
	var whole []byte
	var wholeErr error
	converted := make(chan struct{})
	if !bytes.Contains(data, []byte("\n---")) && !bytes.Contains(data, []byte("\n...")) {
		go func() {
			defer close(converted)
			whole, wholeErr = yaml.YAMLToJSON(data)
		}()
	} else {
		close(converted)
	}
	// Whatever the decoding below returns, the conversion is over first.
	defer func() { <-converted }()
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var roots []*yamlv3.Node
	for decoded := 0; ; decoded++ {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			if decoded == 1 && len(roots) == 1 {
				<-converted
				json, err := whole, wholeErr
				if json == nil && err == nil {
					json, err = yaml.YAMLToJSON(data)
				}
				if err != nil {
					return nil, fmt.Errorf("%s:%d: %w", file, roots[0].Line, err)
				}
				return []*Document{{File: file, Root: roots[0], JSON: json}}, nil
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(n.Content) == 0 || n.Content[0].Kind == yamlv3.ScalarNode && n.Content[0].Tag == "!!null" {
			continue
		}
		roots = append(roots, n.Content[0])
	}
	out := make([]*Document, 0, len(roots))
	for _, root := range roots {
		raw, err := yamlv3.Marshal(root)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, root.Line, err)
		}
		json, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, root.Line, err)
		}
		out = append(out, &Document{File: file, Root: root, JSON: json})
	}
	return out, nil
}

// Kind returns the document's apiVersion and kind.
func (d *Document) Kind() (string, string) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = json.Unmarshal(d.JSON, &tm) // JSON: YAMLToJSON's
	return tm.APIVersion, tm.Kind
}

// IsPolicy says whether the document is a SchedulingPolicy.
func (d *Document) IsPolicy() bool {
	_, kind := d.Kind()
	return kind == "SchedulingPolicy"
}

// Policy decodes a SchedulingPolicy strictly: unknown fields are errors.
func (d *Document) Policy() (*schedv1alpha1.SchedulingPolicy, error) {
	apiVersion, kind := d.Kind()
	if kind != "SchedulingPolicy" || apiVersion != schedv1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("%s:%d: want apiVersion %s, kind SchedulingPolicy; got %q, %q", d.File, d.Root.Line, schedv1alpha1.GroupVersion, apiVersion, kind)
	}
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := d.Decode(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Decode decodes the document strictly (decodeStrict) into out.
func (d *Document) Decode(out any) error {
	return decodeStrict(d.File, d.Root, d.JSON, out)
}
