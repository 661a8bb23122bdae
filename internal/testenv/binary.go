package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// MetalhubBinary builds cmd/metalhub once per test binary, for tests that run the real
// executable as a user does (a subprocess, a pty, a pipeline).
var MetalhubBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "metalhub-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "metalhub")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/metalhub")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})
