// Package tools pins cyclonedx-gomod in a module of its own, so its
// dependencies never change the versions celsched is built and tested
// with. The Makefile builds it into bin/; `make release` writes the
// release's SBOM (CycloneDX JSON of the Go module graph) with it.
package tools
