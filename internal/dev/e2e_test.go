package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controlplane"
	emuinfrahub "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// devRun is one `metalhub dev` subprocess.
type devRun struct {
	cmd     *exec.Cmd
	exited  chan error
	control string
	// infrahub is the Infrahub emulator's address.
	infrahub string
	// dashboard is the web view's URL.
	dashboard string
	c         client.Client
}

// startDev runs `metalhub dev` with every address on port 0 and returns once it has written
// where it listens.
func startDev(t *testing.T, bin, dataDir string, args []string) *devRun {
	t.Helper()
	tmp := t.TempDir()
	log, err := os.Create(filepath.Join(tmp, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(tmp, "addresses.json")
	cmd := exec.Command(bin, append([]string{"dev", "--data-dir", dataDir, "--address-file", addrFile,
		"--emulator-control-address", "127.0.0.1:0", "--bmc-base-port", "0", "--infrahub-address", "127.0.0.1:0",
		"--registry-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0", "--webhook-port", "0",
		"--dashboard-address", "127.0.0.1:0", "--receiver-address", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &devRun{cmd: cmd, exited: make(chan error, 1)}
	go func() { r.exited <- cmd.Wait(); log.Close() }()
	t.Cleanup(func() {
		// Ctrl-C, as a user stops it: a killed run would leave its kube-apiserver and etcd
		// running (they are in process groups of their own). A test that stopped it already
		// finds it gone.
		if cmd.Process.Signal(syscall.SIGINT) != nil {
			return
		}
		select {
		case <-r.exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			lines := strings.Split(string(b), "\n")
			t.Logf("last lines of this metalhub dev run:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	// The address file comes last, once the emulators are registered and the operator starts.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if b, err := os.ReadFile(addrFile); err == nil {
			var addrs Addresses
			if err := json.Unmarshal(b, &addrs); err != nil {
				t.Fatalf("address file: %v\n%s", err, b)
			}
			if addrs.EmulatorControl == "" || len(addrs.BMCs) == 0 {
				t.Fatalf("address file without the emulators:\n%s", b)
			}
			r.control = addrs.EmulatorControl
			r.infrahub = addrs.Infrahub
			r.dashboard = addrs.Dashboard
			cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "kubeconfig"))
			if err != nil {
				t.Fatal(err)
			}
			if r.c, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
				t.Fatal(err)
			}
			return r
		}
		select {
		case err := <-r.exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("metalhub dev exited early: %v\n%s", err, b)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("metalhub dev not up after 3m")
		}
	}
}

// stop sends Ctrl-C and checks a clean exit that leaves nothing listening.
func (r *devRun) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-r.exited:
		if err != nil {
			t.Fatalf("metalhub dev exited with %v after Ctrl-C", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("metalhub dev still running 1m after Ctrl-C")
	}
	if conn, err := net.Dial("tcp", r.control); err == nil {
		conn.Close()
		t.Fatal("emulator still listening after exit")
	}
}

func (r *devRun) records(t *testing.T) []map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + r.control + "/emulator/records")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all, recs []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	// Event subscriptions are BMC configuration (a restart on a new receiver port moves them),
	// not an action on a box.
	for _, rec := range all {
		if a := rec["action"]; a != "Subscribe" && a != "Unsubscribe" {
			recs = append(recs, rec)
		}
	}
	return recs
}

func (r *devRun) wait(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%s)", what, timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *devRun) states(t *testing.T) map[string]string {
	t.Helper()
	list := &metalv1alpha1.ServerList{}
	if err := r.c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.Annotations[lifecycle.StateAnnotation] + "/" + string(s.Status.PowerState)
	}
	return out
}

// `make run` end to end: 8/8 servers Available through the real discovery path, the sample
// InfrahubSync synced, the sample claim binds a server and powers it on; a second run on the same
// data dir resumes everything with no rediscovery and no power action.
func TestMakeRunEndToEnd(t *testing.T) {
	t.Parallel() // a run of its own: every address on port 0, its own data directory
	if testing.Short() {
		t.Skip("end to end")
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	// Every address is on port 0 (startDev), so the second run listens elsewhere than the
	// first: resuming also points the BMCs and the sync at the emulators' new ports.
	args := []string{"--servers", "8", "--power-delay", "300ms", "--metrics-bind-address", "0", "--table=false"}
	ctx := context.Background()

	run := startDev(t, bin, dataDir, args)
	run.wait(t, "8/8 Available", 3*time.Minute, func() (bool, string) {
		st := run.states(t)
		n := 0
		for _, v := range st {
			if v == "Available/Off" {
				n++
			}
		}
		return n == 8, fmt.Sprint(st)
	})
	run.wait(t, "sample sync Succeeded", time.Minute, func() (bool, string) {
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := run.c.Get(ctx, client.ObjectKey{Name: "sample"}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.SyncState == infrahubv1alpha1.StateSucceeded, string(s.Status.SyncState) + " " + s.Status.LastError
	})
	// Infrahub announces a changed artifact to the receiver: delivered well before the sync's
	// one-minute poll.
	changed := changeSampleArtifact(t, run.infrahub)
	run.wait(t, "changed artifact delivered by its webhook", 20*time.Second, func() (bool, string) {
		vr := &infrahubv1alpha1.VidraResource{}
		if err := run.c.Get(ctx, client.ObjectKey{Name: changed.ID}, vr); err != nil {
			return false, err.Error()
		}
		got := vr.Annotations["infrahub.operators.com/checksum"]
		return got == changed.Checksum, "checksum " + got
	})
	// The admission webhooks are live: a claim with a selector no server could match is refused.
	bad := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bad-selector"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpIn}}}}}
	run.wait(t, "webhooks refuse a bad selector", 30*time.Second, func() (bool, string) {
		err := run.c.Create(ctx, bad.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "spec.serverSelector.matchExpressions[0].values"), fmt.Sprint(err)
	})
	kubectl := exec.Command(filepath.Join(assets, "kubectl"), "apply", "-f", "../../config/samples/dev/serverclaim.yaml")
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dataDir, "kubeconfig"))
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	run.wait(t, "sample claim bound and its server On", time.Minute, func() (bool, string) {
		claim := &metalv1alpha1.ServerClaim{}
		if err := run.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "dev-claim"}, claim); err != nil {
			return false, err.Error()
		}
		if claim.Status.Phase != metalv1alpha1.PhaseBound || claim.Spec.ServerRef == nil {
			return false, "phase " + string(claim.Status.Phase)
		}
		st := run.states(t)[claim.Spec.ServerRef.Name]
		return st == "Reserved/On", st
	})
	before := run.states(t)
	if n := len(run.records(t)); n != 8*3+2 {
		t.Errorf("first run: %d BMC actions, want 8 discoveries (PXE, on, off) and the claim's network boot and power-on", n)
	}
	run.stop(t)

	run = startDev(t, bin, dataDir, args)
	time.Sleep(10 * time.Second) // long enough for every server to be looked at again
	if got := run.states(t); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("second run changed the servers:\nbefore %v\nafter  %v", before, got)
	}
	if recs := run.records(t); len(recs) != 0 {
		t.Errorf("second run: %d BMC actions, want none (no rediscovery, no power action): %v", len(recs), recs)
	}
	run.stop(t)
}

// changeSampleArtifact appends a comment to the first sample artifact through the Infrahub
// emulator's control API and returns it as changed.
func changeSampleArtifact(t *testing.T, addr string) emuinfrahub.Artifact {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/emulator/artifacts")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Artifacts []emuinfrahub.Artifact `json:"artifacts"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("the emulator's artifacts: %v", err)
	}
	i := slices.IndexFunc(list.Artifacts, func(a emuinfrahub.Artifact) bool { return a.Name == "Webserver_Manifest" })
	if i < 0 {
		t.Fatalf("no sample artifact among %d", len(list.Artifacts))
	}
	a := list.Artifacts[i]
	body, err := json.Marshal(emuinfrahub.Change{ID: a.ID, Content: append(a.Content, []byte("\n# changed\n")...)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post("http://"+addr+"/emulator/artifacts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out emuinfrahub.Artifact
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Checksum == a.Checksum {
		t.Fatalf("changing the artifact: %v (checksum %s)", err, out.Checksum)
	}
	return out
}
