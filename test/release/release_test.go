// Package release tests `make release`: it builds a release for this
// platform and checks every file in it as a user would read it.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root, relative to this package's directory.
var repoRoot = filepath.Join("..", "..")

const (
	version = "v0.1.0-test"
	image   = "ghcr.io/celsched/celsched"
)

// TestRelease runs `make release` for this platform into a temporary
// directory and checks what a user downloads: the archives hold the
// binaries, which print the version; checksums.txt covers every file; the
// SBOM is CycloneDX JSON that lists the modules celsched is built from;
// the chart, the install YAML and the krew manifest name the version and
// the archives.
func TestRelease(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	dist := filepath.Join(t.TempDir(), "dist")
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "release",
		"VERSION="+version, "PLATFORMS="+platform, "DIST="+dist)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}

	cliArchive := fmt.Sprintf("celsched_%s_%s_%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)
	managerArchive := fmt.Sprintf("celsched-manager_%s_%s_%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)
	sbom := fmt.Sprintf("celsched_%s_sbom.cdx.json", version)
	chart := fmt.Sprintf("celsched-%s.tgz", version)
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	want := []string{cliArchive, managerArchive, "celsched.yaml", chart, sbom, "checksums.txt", "install-certmanager.yaml", "install.yaml"}
	slices.Sort(want)
	if diff := cmp.Diff(want, files); diff != "" {
		t.Fatalf("files in the release (-want +got):\n%s", diff)
	}

	sums := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums[f] = hex.EncodeToString(sum[:])
	}
	bin := t.TempDir()

	t.Run("archives", func(t *testing.T) {
		for archive, binary := range map[string]string{cliArchive: "celsched", managerArchive: "celsched-manager"} {
			entries := readTarGz(t, filepath.Join(dist, archive))
			if len(entries) != 1 || entries[0].hdr.Name != binary || entries[0].hdr.Typeflag != tar.TypeReg || entries[0].hdr.Mode != 0o755 {
				var got []string
				for _, e := range entries {
					got = append(got, fmt.Sprintf("%s (type %c, mode %o)", e.hdr.Name, e.hdr.Typeflag, e.hdr.Mode))
				}
				t.Errorf("%s holds %v, want the one regular file %s (mode 755): krew extracts regular files only", archive, got, binary)
				continue
			}
			if err := os.WriteFile(filepath.Join(bin, binary), entries[0].data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("versions", func(t *testing.T) {
		want := fmt.Sprintf("celsched %s (kube-scheduler %s)\n", version, moduleVersion(t, "k8s.io/kubernetes"))
		for _, args := range [][]string{{"celsched", "version"}, {"celsched-manager", "--version"}} {
			out, err := exec.CommandContext(t.Context(), filepath.Join(bin, args[0]), args[1:]...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
			} else if diff := cmp.Diff(want, string(out)); diff != "" {
				t.Errorf("%s prints (-want +got):\n%s", strings.Join(args, " "), diff)
			}
		}
	})

	t.Run("checksums", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for line := range strings.Lines(string(data)) {
			sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
			if !ok || got[name] != "" {
				t.Fatalf("checksums.txt: line %q is not sha256sum's, or names a file twice", line)
			}
			got[name] = sum
		}
		want := maps.Clone(sums)
		delete(want, "checksums.txt")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("checksums.txt (-want +got):\n%s", diff)
		}
	})

	t.Run("sbom", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dist, sbom))
		if err != nil {
			t.Fatal(err)
		}
		var bom struct {
			BOMFormat   string `json:"bomFormat"`
			SpecVersion string `json:"specVersion"`
			Metadata    struct {
				Component component `json:"component"`
			} `json:"metadata"`
			Components []component `json:"components"`
		}
		if err := json.Unmarshal(data, &bom); err != nil {
			t.Fatalf("%s: %v", sbom, err)
		}
		if bom.BOMFormat != "CycloneDX" || bom.SpecVersion == "" {
			t.Errorf("%s: bomFormat %q, specVersion %q: not CycloneDX", sbom, bom.BOMFormat, bom.SpecVersion)
		}
		if got, want := bom.Metadata.Component, (component{Name: "github.com/celsched/celsched", Version: version}); got.Name != want.Name || got.Version != want.Version {
			t.Errorf("%s describes %s@%s, want %s@%s", sbom, got.Name, got.Version, want.Name, want.Version)
		}
		for _, module := range []string{"k8s.io/kubernetes", "github.com/google/cel-go"} {
			want := component{Name: module, Version: moduleVersion(t, module)}
			if !slices.ContainsFunc(bom.Components, func(c component) bool { return c.Name == want.Name && c.Version == want.Version }) {
				t.Errorf("%s does not list %s@%s (of go.mod)", sbom, want.Name, want.Version)
			}
		}
	})

	t.Run("chart", func(t *testing.T) {
		var meta struct {
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		}
		found := false
		for _, e := range readTarGz(t, filepath.Join(dist, chart)) {
			if e.hdr.Name == "celsched/Chart.yaml" {
				found = true
				if err := yaml.Unmarshal(e.data, &meta); err != nil {
					t.Fatalf("%s: Chart.yaml: %v", chart, err)
				}
			}
		}
		if !found || meta.Version != version || meta.AppVersion != version {
			t.Errorf("%s: Chart.yaml version %q, appVersion %q (found: %t), want %s", chart, meta.Version, meta.AppVersion, found, version)
		}
		// The chart's default image is its appVersion's.
		out, err := exec.CommandContext(t.Context(), filepath.Join(repoRoot, "bin", "helm"), "template", "celsched", filepath.Join(dist, chart)).Output()
		if err != nil {
			t.Fatalf("helm template %s: %v", chart, err)
		}
		checkImages(t, chart, out)
	})

	t.Run("install", func(t *testing.T) {
		for _, f := range []string{"install.yaml", "install-certmanager.yaml"} {
			data, err := os.ReadFile(filepath.Join(dist, f))
			if err != nil {
				t.Fatal(err)
			}
			checkImages(t, f, data)
		}
	})

	t.Run("krew", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dist, "celsched.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var plugin struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Version          string `json:"version"`
				Homepage         string `json:"homepage"`
				ShortDescription string `json:"shortDescription"`
				Description      string `json:"description"`
				Caveats          string `json:"caveats"`
				Platforms        []struct {
					Selector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
					URI    string `json:"uri"`
					SHA256 string `json:"sha256"`
					Bin    string `json:"bin"`
				} `json:"platforms"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(data, &plugin); err != nil {
			t.Fatalf("celsched.yaml: %v", err)
		}
		if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "celsched" ||
			plugin.Spec.Version != version || plugin.Spec.ShortDescription == "" || plugin.Spec.Description == "" {
			t.Errorf("celsched.yaml: %s %s %q, version %q, shortDescription %q, description %q: want the Plugin celsched of krew's v1alpha2 at %s",
				plugin.APIVersion, plugin.Kind, plugin.Metadata.Name, plugin.Spec.Version, plugin.Spec.ShortDescription, plugin.Spec.Description, version)
		}
		if len(plugin.Spec.Platforms) != 1 {
			t.Fatalf("celsched.yaml has %d platforms, want 1 (%s)", len(plugin.Spec.Platforms), platform)
		}
		p := plugin.Spec.Platforms[0]
		if want := map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}; !cmp.Equal(want, p.Selector.MatchLabels) {
			t.Errorf("celsched.yaml: platform selector %v, want %v", p.Selector.MatchLabels, want)
		}
		if want := "https://github.com/celsched/celsched/releases/download/" + version + "/" + cliArchive; p.URI != want {
			t.Errorf("celsched.yaml: uri %s, want %s", p.URI, want)
		}
		if p.SHA256 != sums[cliArchive] {
			t.Errorf("celsched.yaml: sha256 %s, want %s's %s", p.SHA256, cliArchive, sums[cliArchive])
		}
		if p.Bin != "celsched" {
			t.Errorf("celsched.yaml: bin %q, want celsched (the file in %s)", p.Bin, cliArchive)
		}
	})
}

type component struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readTarGz returns the entries of a .tar.gz and their contents.
func readTarGz(t *testing.T, path string) []tarEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(gz)
	var entries []tarEntry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, hdr.Name, err)
		}
		entries = append(entries, tarEntry{hdr: hdr, data: data})
	}
}

// checkImages checks that the manifests in data have the one Deployment,
// whose every container runs the manager's image at the release's version.
func checkImages(t *testing.T, name string, data []byte) {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var images []string
	deployments := 0
	for {
		var obj unstructured.Unstructured
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj.GetKind() != "Deployment" {
			continue
		}
		deployments++
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			img, _, _ := unstructured.NestedString(c.(map[string]any), "image")
			images = append(images, img)
		}
	}
	if want := []string{image + ":" + version}; deployments != 1 || !slices.Equal(images, want) {
		t.Errorf("%s: %d Deployments with images %v, want one with %v", name, deployments, images, want)
	}
}

// moduleVersion is the version of module in go.mod's build list.
func moduleVersion(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
}
