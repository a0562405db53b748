package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// packageChart packages charts/celsched as celsched-<version>.tgz with
// version and appVersion the release's: the chart's image tag defaults to
// its appVersion.
func packageChart(opts options) error {
	cmd := exec.Command(opts.helm, "package", filepath.Join("charts", "celsched"),
		"--version", opts.version, "--app-version", opts.version, "--destination", opts.dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s package: %w\n%s", opts.helm, err, out)
	}
	return nil
}

// writeInstall writes install.yaml and install-certmanager.yaml: what
// `kubectl apply -k config/default` and `-k config/certmanager` apply,
// with the manager's image tagged with the release's version (kustomize's
// images, as `kustomize edit set image` sets it), in an overlay under
// build.
func writeInstall(opts options, build string) error {
	for kustomization, name := range map[string]string{"default": "install.yaml", "certmanager": "install-certmanager.yaml"} {
		overlay := filepath.Join(build, "install-"+kustomization)
		// kustomize takes a relative path to the base, never an absolute one.
		base, err := filepath.Abs(filepath.Join("config", kustomization))
		if err != nil {
			return err
		}
		if base, err = filepath.Rel(overlay, base); err != nil {
			return err
		}
		k, err := yaml.Marshal(types.Kustomization{
			Resources: []string{base},
			Images:    []types.Image{{Name: image, NewTag: opts.version}},
		})
		if err != nil {
			return err
		}
		if err := os.MkdirAll(overlay, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), k, 0o644); err != nil {
			return err
		}
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
		if err != nil {
			return fmt.Errorf("kustomize build config/%s: %w", kustomization, err)
		}
		data, err := resources.AsYaml()
		if err != nil {
			return err
		}
		header := fmt.Sprintf("# celsched %s: kubectl apply -k config/%s, with the image %s:%s.\n", opts.version, kustomization, image, opts.version)
		if err := writeFile(opts, name, append([]byte(header), data...)); err != nil {
			return err
		}
	}
	return nil
}
