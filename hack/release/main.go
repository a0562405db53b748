// Command release builds a celsched release into a directory (`make
// release VERSION=v0.1.0`; docs/release.md says what is in it and how it
// is installed):
//
//   - per platform, the CLI's archive celsched_<version>_<os>_<arch>.tar.gz
//     (the binary celsched, which krew links as kubectl-celsched) and the
//     manager's celsched-manager_<version>_<os>_<arch>.tar.gz (the binary
//     celsched-manager), built with CGO_ENABLED=0 and -ldflags;
//   - the SBOM celsched_<version>_sbom.cdx.json (CycloneDX JSON of the Go
//     module graph, by cyclonedx-gomod);
//   - the Helm chart celsched-<version>.tgz, whose version and appVersion
//     (the image tag it defaults to) are the version;
//   - install.yaml and install-certmanager.yaml, config/default and
//     config/certmanager with the image tagged with the version;
//   - the krew manifest celsched.yaml, one platform per archive of the CLI;
//   - checksums.txt, the SHA-256 of every other file, as sha256sum writes
//     them.
//
// It runs from the repository root.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// image is the manager's image, as config/manager and the chart's values
// name it; a release tags it with the release's version.
const image = "ghcr.io/celsched/celsched"

// releaseURL is where a release's files are downloaded from: the krew
// manifest points at the archives there.
const releaseURL = "https://github.com/celsched/celsched/releases/download"

func main() {
	var opts options
	flag.StringVar(&opts.version, "version", "", "the release's version, a semantic version with a leading v (v0.1.0)")
	platforms := flag.String("platforms", "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64", "the os/arch pairs to build, separated by spaces or commas")
	flag.StringVar(&opts.dist, "dist", "dist", "the directory to write the release into; absent or empty")
	flag.StringVar(&opts.ldflags, "ldflags", "", "go build's -ldflags for the binaries (the Makefile's, which stamp the version)")
	flag.StringVar(&opts.helm, "helm", "bin/helm", "the helm binary that packages the chart")
	flag.StringVar(&opts.cyclonedxGomod, "cyclonedx-gomod", "bin/cyclonedx-gomod", "the cyclonedx-gomod binary that writes the SBOM")
	mtime := flag.Int64("mtime", 0, "the modification time of the files in the archives, in seconds since the epoch (the Makefile gives the commit's): the same commit gives the same archives")
	flag.Parse()
	opts.platforms = strings.FieldsFunc(*platforms, func(r rune) bool { return r == ' ' || r == ',' })
	opts.mtime = time.Unix(*mtime, 0)
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

type options struct {
	version        string
	platforms      []string
	dist           string
	ldflags        string
	helm           string
	cyclonedxGomod string
	mtime          time.Time
}

func run(opts options) error {
	if _, err := version.ParseSemantic(opts.version); err != nil || !strings.HasPrefix(opts.version, "v") {
		return fmt.Errorf("version %q is not a semantic version with a leading v: give one, e.g. make release VERSION=v0.1.0", opts.version)
	}
	if len(opts.platforms) == 0 {
		return errors.New("no platforms")
	}
	for _, p := range opts.platforms {
		if goos, goarch, ok := strings.Cut(p, "/"); !ok || goos == "" || goarch == "" {
			return fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", p)
		}
	}
	if entries, err := os.ReadDir(opts.dist); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: remove it first (a release's checksums cover every file in it)", opts.dist)
	}
	if err := os.MkdirAll(opts.dist, 0o755); err != nil {
		return err
	}
	build, err := os.MkdirTemp("", "celsched-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(build)

	// The quick steps first: a broken chart or kustomization fails the
	// release before minutes of compiling.
	step := func(what string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintf(os.Stderr, "release: %s (%s)\n", what, time.Since(start).Round(time.Second))
		return nil
	}
	if err := step("the SBOM", func() error { return writeSBOM(opts, build) }); err != nil {
		return err
	}
	if err := step("the Helm chart", func() error { return packageChart(opts) }); err != nil {
		return err
	}
	if err := step("the install YAML", func() error { return writeInstall(opts, build) }); err != nil {
		return err
	}
	var cli []archive
	for _, p := range opts.platforms {
		err := step("the binaries for "+p, func() error {
			a, err := buildPlatform(opts, build, p)
			cli = append(cli, a)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := step("the krew manifest", func() error { return writeKrewManifest(opts, cli) }); err != nil {
		return err
	}
	return step("checksums.txt", func() error { return writeChecksums(opts.dist) })
}

// writeFile writes data to name in the release directory.
func writeFile(opts options, name string, data []byte) error {
	return os.WriteFile(filepath.Join(opts.dist, name), data, 0o644)
}
