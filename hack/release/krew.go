package main

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// krewPlugin is krew's Plugin manifest
// (krew.googlecontainertools.github.com/v1alpha2), with the fields
// celsched's uses.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Caveats          string         `json:"caveats"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	// Bin is the file in the archive that krew links as kubectl-celsched.
	Bin string `json:"bin"`
}

// writeKrewManifest writes celsched.yaml, krew's manifest of the plugin
// `kubectl celsched`: a platform per archive of the CLI, at its URL on the
// release's page (`kubectl krew install --manifest=celsched.yaml` reads
// it, or a krew index serves it).
func writeKrewManifest(opts options, archives []archive) error {
	p := krewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	p.Metadata.Name = "celsched"
	p.Spec.Version = opts.version
	p.Spec.Homepage = "https://github.com/celsched/celsched"
	p.Spec.ShortDescription = "Dry-run and test celsched SchedulingPolicies"
	p.Spec.Description = `Validates, evaluates, explains and tests celsched SchedulingPolicies
(placement rules written in CEL) with the engine and the kube-scheduler
framework the celsched scheduler runs: what a draft policy would do to a
pod, a node or the running cluster before it acts, and why a pod is
pending. It also shows and steers a policy's rollout.
`
	p.Spec.Caveats = `validate, eval and test work offline. explain, impact, analyze and rollout
read a cluster's SchedulingPolicies (rollout asks its celsched manager to
act): install celsched in it with the release's install.yaml or Helm chart.
`
	for _, a := range archives {
		var platform krewPlatform
		platform.Selector.MatchLabels = map[string]string{"os": a.goos, "arch": a.goarch}
		platform.URI = fmt.Sprintf("%s/%s/%s", releaseURL, opts.version, a.name)
		platform.SHA256 = a.sha256
		platform.Bin = a.bin
		p.Spec.Platforms = append(p.Spec.Platforms, platform)
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	return writeFile(opts, "celsched.yaml", data)
}
