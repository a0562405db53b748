package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// archive is a platform's archive of the CLI, as the krew manifest names it.
type archive struct {
	name         string // celsched_<version>_<os>_<arch>.tar.gz
	goos, goarch string
	bin          string // the binary in it
	sha256       string
}

// buildPlatform builds the manager and the CLI for platform (os/arch) into
// a directory of build, archives each in the release directory, and
// returns the CLI's archive.
func buildPlatform(opts options, build, platform string) (archive, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	dir := filepath.Join(build, goos+"_"+goarch)
	// One go build for both: they share most of their packages.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", opts.ldflags, "-o", dir+string(filepath.Separator), "./cmd/manager", "./cmd/celsched")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return archive{}, fmt.Errorf("go build: %w\n%s", err, out)
	}
	cli := archive{name: fmt.Sprintf("celsched_%s_%s_%s.tar.gz", opts.version, goos, goarch), goos: goos, goarch: goarch, bin: "celsched"}
	var err error
	if cli.sha256, err = writeArchive(opts, cli.name, filepath.Join(dir, "celsched"), cli.bin); err != nil {
		return archive{}, err
	}
	manager := fmt.Sprintf("celsched-manager_%s_%s_%s.tar.gz", opts.version, goos, goarch)
	if _, err := writeArchive(opts, manager, filepath.Join(dir, "manager"), "celsched-manager"); err != nil {
		return archive{}, err
	}
	return cli, nil
}

// writeArchive writes the release's archive name, a tar.gz of one
// executable (the file binary, named as) at the top, and returns its
// SHA-256. The entry is a regular file owned by root with opts.mtime: krew
// extracts regular files and directories only, and the same binary gives
// the same archive.
func writeArchive(opts options, name, binary, as string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: as, Mode: 0o755, Size: int64(len(data)), ModTime: opts.mtime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if err := writeFile(opts, name, buf.Bytes()); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// writeChecksums writes checksums.txt: the SHA-256 of every file in dir,
// by name, as `sha256sum` prints them (`sha256sum -c checksums.txt`
// checks them).
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, e := range entries { // by name
		if e.Name() == "checksums.txt" {
			continue
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s is not a file", filepath.Join(dir, e.Name()))
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "%x  %s\n", sha256.Sum256(data), e.Name())
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(out.String()), 0o644)
}
