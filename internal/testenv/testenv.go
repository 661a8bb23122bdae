// Package testenv starts one real control plane (kube-apiserver + etcd, built from source by
// hack/tools/build.sh) with every metalhub CRD installed. Each controller package starts it once
// from TestMain and shares it between its tests.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalhub/metalhub/config/crd"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is an uncached client on Config with metalhub's scheme.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for Config, for subprocesses and kubectl.
	Kubeconfig string
	// AssetsDir holds kube-apiserver, etcd and kubectl.
	AssetsDir string

	env *envtest.Environment
	dir string
}

// RepoRoot is the root of the metalhub checkout this package was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns the directory with the control-plane binaries: KUBEBUILDER_ASSETS when set,
// otherwise bin/k8s/current, building it first if missing (the first build takes minutes).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root := RepoRoot()
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"), "envtest")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building control-plane binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Start starts a control plane with metalhub's CRDs installed.
func Start() (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest with assets in %s: %w", assets, err)
	}
	env := &Env{Config: cfg, AssetsDir: assets, env: e}
	if err := env.init(); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}

func (e *Env) init() error {
	var err error
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	user, err := e.env.AddUser(envtest.User{Name: "metalhub-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering kubeconfig: %w", err)
	}
	if e.dir, err = os.MkdirTemp("", "metalhub-testenv-"); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, kubeconfig, 0o600)
}

// Stop stops the control plane and removes its files.
func (e *Env) Stop() error {
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	return e.env.Stop()
}

// Main is the body of a package's TestMain: it starts one control plane, stores it in *env for
// the package's tests, runs them and stops it.
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }
func Main(m *testing.M, env **Env) int {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stopping:", err)
	}
	return code
}
