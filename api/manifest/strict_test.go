package manifest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDecodeStrict: what the API server accepts decodes (an unquoted date
// in a string map is a YAML timestamp, a string in JSON; null; a List
// item), and what it refuses is one error at the field's line.
func TestDecodeStrict(t *testing.T) {
	cases := map[string]struct {
		yaml, wantErr string
	}{
		"timestamp in a string map": {yaml: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    built: 2024-01-01\nspec:\n  containers: null\n"},
		"quantity":                  {yaml: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 100m, memory: 1}}\n"},
		"bad quantity":              {yaml: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n", wantErr: "f.yaml:7: spec.containers[0].resources.requests[cpu]: quantities must match"},
		"number for a string":       {yaml: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: 12\n", wantErr: "f.yaml:4: metadata.name: want a string, got the number 12"},
		"list for an object":        {yaml: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: []\n", wantErr: "f.yaml:4: spec: want an object, got a list"},
		"two problems":              {yaml: "apiVersion: v1\nkind: Pod\nmetadata: {name: p, nayme: q, name: r}\n", wantErr: "(and 1 more)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			docs, err := parseDocuments("f.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeObjects[*corev1.Pod](docs, "Pod")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("decoding: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
