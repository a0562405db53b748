package testenv

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
)

// BuildCLI builds the celsched CLI (cmd/celsched) into dir and returns the
// binary's path: the tests run the program a user runs, as a process, and
// import no package of cmd/.
func BuildCLI(dir string) (string, error) {
	bin := filepath.Join(dir, "celsched")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/celsched/celsched/cmd/celsched").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the celsched CLI: %w: %s", err, out)
	}
	return bin, nil
}

// RunCLI runs the CLI binary with args, stdin, stdout and stderr (the same
// writer for both keeps their order), and returns its exit code; -1 when
// it could not be started.
func RunCLI(bin string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintf(stderr, "running %s: %v\n", bin, err)
		return -1
	}
}
