package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	// The tests' own clients log API warnings (the manager is another process): to stderr,
	// instead of controller-runtime's complaint that no logger was set.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(testenv.Main(m, &env))
}

func waitHTTP200(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not OK after %s: %s", url, timeout, last)
}

// The manager binary starts against the control plane, becomes leader, reports healthy and
// ready, serves metrics, and exits 0 on SIGTERM, releasing its lease.
func TestManagerStartsHealthyAndStopsOnSIGTERM(t *testing.T) {
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(t.TempDir(), "addresses.json")
	var out syncbuf.Buffer
	cmd := exec.Command(bin,
		"--kubeconfig", env.Kubeconfig,
		"--health-probe-bind-address", "127.0.0.1:0",
		"--metrics-bind-address", "127.0.0.1:0",
		"--registry-bind-address", "127.0.0.1:0",
		"--address-file", addrFile,
		"--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", "metalhub-test",
		"--controllers", "metal,delivery")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited, stopped := make(chan error, 1), make(chan struct{})
	go func() { exited <- cmd.Wait(); close(stopped) }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Port 0 everywhere: the ports are the ones the manager reports.
	addrs, err := readAddressFile(addrFile, stopped, 30*time.Second)
	if err != nil {
		t.Fatalf("%v\n--- manager output ---\n%s", err, out.String())
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := waitHTTP200("http://"+addrs.Health+path, 30*time.Second); err != nil {
			t.Fatalf("%v\n--- manager output ---\n%s", err, out.String())
		}
	}
	if err := waitHTTP200("http://"+addrs.Metrics+"/metrics", 10*time.Second); err != nil {
		t.Fatalf("%v\n--- manager output ---\n%s", err, out.String())
	}
	lease := &coordinationv1.Lease{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "metalhub-test"}, lease)
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader after 20s (err %v)\n%s", err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("manager exited with %v after SIGTERM\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("manager still running 30s after SIGTERM\n%s", out.String())
	}
	if !strings.Contains(out.String(), "metalhub stopped") {
		t.Errorf("no clean-stop log line:\n%s", out.String())
	}
	// Released on a clean stop, so a standby replica does not wait out the lease.
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "metalhub-test"}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("lease still held by %q after a clean stop", *lease.Spec.HolderIdentity)
	}
}

// Bad flags fail fast with a message instead of starting half-configured.
func TestManagerRejectsBadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--controllers", "metal,bogus"}, nil, &stdout, &stderr)
	if code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown controller family "bogus"`) {
		t.Fatalf("stderr does not explain: %s", stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"--cleaning-policy", "Shred"}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "want None, Metadata, RootDisk or AllDisks") {
		t.Fatalf("bad cleaning policy: code %d, stderr %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"frobnicate"}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: code %d, stderr %s", code, stderr.String())
	}
}

// The companion commands are reachable through the one binary.
func TestSubcommandsWired(t *testing.T) {
	for _, args := range [][]string{{"emulate", "bmc", "-h"}, {"emulate", "infrahub", "-h"}, {"bmc", "-h"}, {"dev", "-h"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, nil, &stdout, &stderr); code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, stderr.String())
		}
	}
}
