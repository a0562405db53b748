package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// writeSBOM writes celsched_<version>_sbom.cdx.json: cyclonedx-gomod's
// CycloneDX JSON of the main module's graph (the modules its packages
// use, tests' aside) and the Go standard library, whose metadata
// component, the main module, it gives the release's version.
// cyclonedx-gomod reads that version from a git tag at HEAD, when it finds
// one: a release may be built before it is tagged, or in a git worktree,
// which it does not read.
func writeSBOM(opts options, build string) error {
	raw := filepath.Join(build, "sbom.json")
	cmd := exec.Command(opts.cyclonedxGomod, "mod", "-json", "-std", "-output", raw, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", opts.cyclonedxGomod, err, out)
	}
	data, err := os.ReadFile(raw)
	if err != nil {
		return err
	}
	var bom map[string]any
	if err := json.Unmarshal(data, &bom); err != nil {
		return fmt.Errorf("reading cyclonedx-gomod's SBOM: %w", err)
	}
	metadata, _ := bom["metadata"].(map[string]any)
	component, _ := metadata["component"].(map[string]any)
	purl, _ := component["purl"].(string)
	name, qualifiers, _ := strings.Cut(purl, "?")
	if component == nil || !strings.HasPrefix(name, "pkg:golang/") {
		return fmt.Errorf("cyclonedx-gomod's SBOM has no main module component with a Go purl: metadata %v", metadata)
	}
	name, _, _ = strings.Cut(name, "@")
	component["version"] = opts.version
	purl = name + "@" + opts.version
	if qualifiers != "" {
		purl += "?" + qualifiers
	}
	component["purl"] = purl
	data, err = json.MarshalIndent(bom, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(opts, fmt.Sprintf("celsched_%s_sbom.cdx.json", opts.version), append(data, '\n'))
}
