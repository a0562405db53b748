package app

import (
	"bytes"
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

// document is one YAML document of a file, with its node tree for finding
// the line of a field.
type document struct {
	file string
	root *yamlv3.Node // the document's top mapping
	json []byte
}

// line returns the line of a field path such as spec.filters[0].expression
// in the document, or of the closest ancestor found.
func (d *document) line(path string) int {
	n := d.root
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

// readDocuments reads every YAML document of the files given: a file, a
// directory (its *.yaml and *.yml files, recursively, in name order) or "-"
// for standard input.
func readDocuments(paths []string, stdin io.Reader) ([]*document, error) {
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
	var out []*document
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
func parseDocuments(file string, data []byte) ([]*document, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var out []*document
	for {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(n.Content) == 0 || n.Content[0].Kind == yamlv3.ScalarNode && n.Content[0].Tag == "!!null" {
			continue
		}
		root := n.Content[0]
		raw, err := yamlv3.Marshal(root)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, root.Line, err)
		}
		json, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, root.Line, err)
		}
		out = append(out, &document{file: file, root: root, json: json})
	}
}

// kind returns the document's apiVersion and kind.
func (d *document) kind() (string, string) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = yaml.Unmarshal(d.json, &tm)
	return tm.APIVersion, tm.Kind
}

// isPolicy says whether the document is a SchedulingPolicy.
func (d *document) isPolicy() bool {
	_, kind := d.kind()
	return kind == "SchedulingPolicy"
}

// policy decodes a SchedulingPolicy strictly: unknown fields are errors.
func (d *document) policy() (*schedv1alpha1.SchedulingPolicy, error) {
	apiVersion, kind := d.kind()
	if kind != "SchedulingPolicy" || apiVersion != schedv1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("%s:%d: want apiVersion %s, kind SchedulingPolicy; got %q, %q", d.file, d.root.Line, schedv1alpha1.GroupVersion, apiVersion, kind)
	}
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := d.decode(p); err != nil {
		return nil, err
	}
	return p, nil
}

// decode decodes the document strictly (decodeStrict).
func (d *document) decode(out any) error {
	return decodeStrict(d.file, d.root, d.json, out)
}
