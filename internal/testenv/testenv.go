// Package testenv starts one real control plane (kube-apiserver + etcd with every metalhub CRD)
// per test package, from TestMain, shared by the package's tests. Beside it, what those tests use
// to watch a manager from outside: its writes counted (WriteCounter), its failed passes counted
// (ReconcileErrors), a link to the API server that can be cut (APILink), the built metalhub binary
// and a metrics scraper.
//
// It is for tests only: only test files and internal/testenv/suite import it. It imports no
// controller package.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controlplane"
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
	// AuditLog is the API server's audit log of writes, when it keeps one (METALHUB_AUDIT_LOG).
	AuditLog string

	cp  *controlplane.ControlPlane
	dir string
}

// RepoRoot is the root of the metalhub checkout.
func RepoRoot() string { return controlplane.RepoRoot() }

// Start starts a control plane with metalhub's CRDs installed.
func Start() (*Env, error) { return StartWith(controlplane.Options{}) }

// StartWith starts a control plane with o (kube-controller-manager, say).
//
// METALHUB_AUDIT_LOG names a file for the API server's audit log of writes (AuditWrites reads it).
func StartWith(o controlplane.Options) (*Env, error) {
	if o.AuditLog == "" {
		o.AuditLog = os.Getenv("METALHUB_AUDIT_LOG")
	}
	cp, err := controlplane.Start(o)
	if err != nil {
		return nil, err
	}
	env := &Env{Config: cp.Config, AssetsDir: cp.AssetsDir, AuditLog: o.AuditLog, cp: cp}
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
	if e.dir, err = os.MkdirTemp("", "metalhub-testenv-"); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return e.cp.WriteAdminKubeconfig(e.Kubeconfig)
}

// Stop stops the control plane and removes its files.
func (e *Env) Stop() error {
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	return e.cp.Stop()
}

// Main is the body of a package's TestMain: it starts one control plane, stores it in *env for
// the package's tests, runs them (through run, when a package starts more around them) and
// stops it.
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }
func Main(m *testing.M, env **Env, run ...func(*testing.M) int) int {
	return MainWith(m, env, controlplane.Options{}, run...)
}

// MainWith is Main with a control plane started with o.
func MainWith(m *testing.M, env **Env, o controlplane.Options, run ...func(*testing.M) int) int {
	e, err := StartWith(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*env = e
	var code int
	if len(run) > 0 {
		code = run[0](m)
	} else {
		code = m.Run()
	}
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stopping:", err)
	}
	return code
}

// Eventually polls cond until it holds or timeout passes, and fails tb with what and cond's last
// word otherwise: the one polling loop of the suites and benchmarks.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
}
