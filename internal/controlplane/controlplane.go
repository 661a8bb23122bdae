// Package controlplane runs a local kube-apiserver + etcd (built from source by
// hack/tools/build.sh) with every metalhub CRD installed. Tests start one per package through
// internal/testenv; `metalhub dev` starts one for a newcomer's first run.
//
// It starts no controller and creates no object beyond the CRDs: what runs against the control
// plane is the caller's. The operator's own packages (internal/manager, the controllers) must not
// import it.
package controlplane

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalhub/metalhub/config/crd"
)

// RepoRoot is the root of the metalhub checkout this package was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns the directory with kube-apiserver, etcd and kubectl: KUBEBUILDER_ASSETS when
// set, otherwise bin/k8s/<version> of the checkout, built first if missing (minutes, once).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root := RepoRoot()
	script := filepath.Join(root, "hack", "tools", "build.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("no control-plane binaries: set KUBEBUILDER_ASSETS or run from a metalhub checkout (%w)", err)
	}
	cmd := exec.Command(script, "envtest")
	cmd.Dir = root
	cmd.Stderr = os.Stderr // the first build takes minutes and prints progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building control-plane binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Options configure a control plane.
type Options struct {
	// DataDir keeps etcd's data between runs; empty means a temporary directory removed on Stop.
	DataDir string
	// ControllerManager also runs kube-controller-manager's deployment, replicaset, garbage
	// collector and cluster-role aggregation controllers: Deployments get real rollouts
	// (revisions, ReplicaSets, status), owned objects are collected, and the built-in view, edit
	// and admin roles get their rules. No scheduler or kubelet: pods stay Pending.
	ControllerManager bool
	// AuditLog, when set, has the API server log every write request (its body included) to
	// this file, one JSON audit event a line: where a benchmark's writes come from and what
	// each one changed, which the request counters do not say.
	AuditLog string
}

// ControlPlane is a running kube-apiserver + etcd.
type ControlPlane struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// AssetsDir holds kube-apiserver, etcd and kubectl.
	AssetsDir string

	env *envtest.Environment
	kcm *exec.Cmd
	dir string // the controller manager's kubeconfig
}

// Start starts a control plane with metalhub's CRDs installed.
func Start(o Options) (*ControlPlane, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	// envtest picks etcd's and kube-apiserver's ports by listening on port 0 and closing, and
	// neither binary can report a port of its own choosing. Another process (the next test
	// package, go test runs them side by side) can take a port in between: the start fails on
	// the bind, and a fresh attempt picks new ports.
	var (
		e   *envtest.Environment
		cfg *rest.Config
	)
	for attempt := 1; ; attempt++ {
		e = &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
			ErrorIfCRDPathMissing: true,
		}
		if o.DataDir != "" {
			dir := filepath.Join(o.DataDir, "etcd")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("creating etcd data dir: %w", err)
			}
			e.ControlPlane.Etcd = &envtest.Etcd{DataDir: dir}
		}
		if o.AuditLog != "" {
			if err := configureAudit(e, o.AuditLog); err != nil {
				return nil, err
			}
		}
		if cfg, err = e.Start(); err == nil {
			break
		}
		_ = e.Stop()
		if attempt == 3 {
			return nil, fmt.Errorf("starting control plane with binaries in %s (%d attempts): %w", assets, attempt, err)
		}
		fmt.Fprintf(os.Stderr, "controlplane: start failed (%v), trying again with new ports\n", err)
	}
	c := &ControlPlane{Config: cfg, AssetsDir: assets, env: e}
	if o.ControllerManager {
		if err := c.startControllerManager(); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// auditPolicy logs writes with their bodies and nothing else; a Secret's write is logged
// without its body, which holds credentials and tokens.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

func configureAudit(e *envtest.Environment, path string) error {
	policy := path + ".policy.yaml"
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("writing audit policy: %w", err)
	}
	args := e.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", path)
	args.Set("audit-log-format", "json")
	args.Set("audit-log-mode", "blocking")
	return nil
}

// startControllerManager runs kube-controller-manager against the API server, serving nothing
// (no port to pick): the controllers it runs act through the API alone.
func (c *ControlPlane) startControllerManager() error {
	bin := filepath.Join(c.AssetsDir, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no kube-controller-manager in %s (hack/tools/build.sh envtest builds it): %w", c.AssetsDir, err)
	}
	var err error
	if c.dir, err = os.MkdirTemp("", "metalhub-kcm-"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.dir, "kubeconfig")
	if err := c.WriteAdminKubeconfig(kubeconfig); err != nil {
		return err
	}
	c.kcm = exec.Command(bin, "--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--controllers=deployment,replicaset,garbagecollector,clusterrole-aggregation", "--use-service-account-credentials=false")
	c.kcm.Stdout, c.kcm.Stderr = io.Discard, io.Discard
	if err := c.kcm.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	return nil
}

// WriteAdminKubeconfig writes a kubeconfig for a cluster-admin user to path.
func (c *ControlPlane) WriteAdminKubeconfig(path string) error {
	user, err := c.env.AddUser(envtest.User{Name: "metalhub-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Stop stops kube-controller-manager, kube-apiserver and etcd.
func (c *ControlPlane) Stop() error {
	if c.kcm != nil && c.kcm.Process != nil {
		_ = c.kcm.Process.Kill()
		_ = c.kcm.Wait()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	return c.env.Stop()
}

// Kill ends the control plane's processes at once, without waiting: for a forced exit (a second
// Ctrl-C) that must not leave kube-apiserver and etcd running. envtest starts them in process
// groups of their own, so a terminal's signal does not reach them; they are found as this
// process's children run from the assets directory.
func (c *ControlPlane) Kill() {
	for _, pid := range childrenFrom(c.AssetsDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// childrenFrom lists this process's children whose executable lies in dir (Linux /proc; none
// elsewhere).
func childrenFrom(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces, so read after the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		fields := strings.Fields(string(stat[i+1:]))
		if i < 0 || len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(dir, exe); err == nil && !strings.HasPrefix(rel, "..") {
			pids = append(pids, pid)
		}
	}
	return pids
}
