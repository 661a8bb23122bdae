// Package deploy tests what users install: config/ (kustomize) and charts/metalhub render the
// same objects, the API server accepts both, and the operator runs with no more rights than
// config/rbac grants it.
package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/metalhub/metalhub/internal/testenv"
)

var (
	env  *testenv.Env
	root = testenv.RepoRoot()
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// helmBinary is bin/helm, built from hack/tools/helm by hack/tools/build.sh (once per version).
var helmBinary = sync.OnceValues(func() (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"), "helm")
	cmd.Dir = root
	cmd.Stderr = os.Stderr // the first build takes a few minutes and prints progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building helm: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
})
