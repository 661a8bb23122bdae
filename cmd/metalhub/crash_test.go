package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/manager"
	"github.com/metalhub/metalhub/internal/testenv"
)

// managerProcess runs the metalhub binary with the metal family, restartable after a SIGKILL.
// Its endpoints listen on ports the system picks (port 0); start returns once the process has
// written where (--address-file).
type managerProcess struct {
	bin, logPath string
	args         []string
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	addrs        manager.Addresses // of the running process; zero while none runs
}

func (m *managerProcess) start(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	addrFile := m.logPath + ".addresses"
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	cmd := exec.Command(m.bin, append(slices.Clone(m.args), "--address-file", addrFile)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	addrs, err := readAddressFile(addrFile, exited, time.Minute)
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	m.mu.Lock()
	m.addrs = addrs
	m.mu.Unlock()
}

// readAddressFile waits for the address file a manager writes once its endpoints are bound.
func readAddressFile(path string, exited <-chan struct{}, timeout time.Duration) (manager.Addresses, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var a manager.Addresses
			if err := json.Unmarshal(b, &a); err != nil {
				return a, fmt.Errorf("address file %s: %w", path, err)
			}
			return a, nil
		}
		if !os.IsNotExist(err) {
			return manager.Addresses{}, fmt.Errorf("reading the address file: %w", err)
		}
		if time.Now().After(deadline) {
			return manager.Addresses{}, fmt.Errorf("no address file after %s", timeout)
		}
		select {
		case <-exited:
			return manager.Addresses{}, errors.New("exited before it listened")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addresses are where the running process listens (zero while none runs).
func (m *managerProcess) addresses() manager.Addresses {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs
}

// registryFront stands where a Service stands in a cluster: one address for the discovery
// registry of whichever of the managers runs (each process binds a port of its own), so a boot
// begun under one process reports to the next. It returns the front's URL.
func registryFront(t testing.TB, managers ...*managerProcess) string {
	t.Helper()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			for _, m := range managers {
				if a := m.addresses().Registry; a != "" {
					r.SetURL(&url.URL{Scheme: "http", Host: a})
					return
				}
			}
		},
		// No manager up, or one just killed: the probe gets 502 and retries, as it would
		// through a Service without endpoints.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (m *managerProcess) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Pid
}

func (m *managerProcess) kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.addrs = manager.Addresses{}
	m.mu.Unlock()
	_ = cmd.Process.Signal(os.Kill)
	<-exited
}

// unthrottledClient is a client on env without client-go's default rate limit, for what a
// timed run does beside the operator (registering the fleet, the emulated machines' lookups):
// throttled, it would be the slow part of the run.
func unthrottledClient(t testing.TB) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// registerFleet creates a BMCSecret and a BMC named <prefix>-<i> for every emulated BMC and
// returns the names of the Servers their systems become.
func registerFleet(t testing.TB, fleet *redfish.Emulator, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	// The registration is what a user's `kubectl apply` of the fleet does; it must not be the
	// slow part of a timed run, so it is parallel and not throttled on the client side.
	c := unthrottledClient(t)
	bmcs := fleet.BMCs()
	names := make([]string, len(bmcs))
	err := testenv.Parallel(len(bmcs), 8, func(i int) error {
		b := bmcs[i]
		user, pass := b.Credentials()
		name := fmt.Sprintf("%s-%d", prefix, i)
		port, _ := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
		if err := c.Create(ctx, &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"username": user, "password": pass}}); err != nil {
			return err
		}
		if err := c.Create(ctx, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.BMCSpec{
			Access: &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"}, BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: metalv1alpha1.HTTPScheme},
		}}); err != nil {
			return err
		}
		names[i] = bmccontroller.ServerName(name, b.SystemIDs()[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// bootableFleet starts bmcs emulated BMCs whose systems boot into an emulated discovery (the
// netboot emulator answers for the probe), both stopped when the test ends.
func bootableFleet(t testing.TB, bmcs int, powerDelay time.Duration) *redfish.Emulator {
	t.Helper()
	nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", ProbeInterval: 200 * time.Millisecond, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nb.Close)
	fleet, err := redfish.Start(redfish.Options{BMCs: bmcs, PowerDelay: powerDelay, OnBoot: nb.OnBoot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	return fleet
}

// purgeMetal removes every metal object a previous test of this package left, finalizers and
// all: the tests share one control plane, and a left-over BMC pointing at a port the next test's
// fleet reuses would register a second Server for the same system.
func purgeMetal(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	lists := []client.ObjectList{&metalv1alpha1.ServerClaimList{}, &metalv1alpha1.ServerMaintenanceList{},
		&metalv1alpha1.ServerBootConfigurationList{}, &metalv1alpha1.ServerList{}, &metalv1alpha1.BMCList{}, &metalv1alpha1.BMCSecretList{}}
	for _, list := range lists {
		if err := env.Client.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			obj := item.(client.Object)
			if len(obj.GetFinalizers()) > 0 {
				obj.SetFinalizers(nil)
				if err := env.Client.Update(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}

// The manager, as its own process, is killed with SIGKILL at random moments, 20 times, and
// servers' statuses are wiped at random moments, while 20 servers go Initial -> Available ->
// Reserved -> Cleaning -> Available (discovery and cleaning through the real registry and
// agent, the tenants' OS writing to the disks the cleaning erases). Every server ends right,
// cleaned exactly once with proof, and the emulator's recorder shows each BMC action exactly
// once: what is in flight is bookkeeping and survives the kills and the wipes.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("long: kills and restarts the manager 20 times")
	}
	const n, kills = 20, 20
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mgr := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--registry-bind-address", "127.0.0.1:0",
		"--power-poll", "100ms", "--bmc-request-timeout", "2s", "--discovery-namespace", "default",
		"--graceful-shutdown-timeout", "1s", "--cleaning-policy", "AllDisks",
	}}
	// Each restart listens on another port; the ignition carries the front's.
	front := registryFront(t, mgr)
	mgr.args = append(mgr.args, "--registry-url", front)
	// The claimed machines' OS writes its tenant's data to their disks (it reads its metadata
	// through the front too), which their release must erase.
	nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", ProbeInterval: 200 * time.Millisecond, Logger: logr.Discard(),
		MetadataURL: front, TenantData: true,
		OnResult: func(r netboot.Result) {
			if r.Err != nil {
				t.Logf("emulated boot of %s ended without its documents: %v", r.Server, r.Err)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	fleet, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: 500 * time.Millisecond, OnBoot: nb.OnBoot})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	mgr.start(t)
	stopKilling := make(chan struct{})
	killerDone := make(chan struct{})
	defer func() {
		select {
		case <-stopKilling:
		default:
			close(stopKilling)
		}
		<-killerDone
		mgr.kill()
		if t.Failed() {
			if b, err := os.ReadFile(mgr.logPath); err == nil {
				lines := strings.Split(string(b), "\n")
				t.Logf("last manager log lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	}()

	// The killer: SIGKILL at random moments, restart at once, 20 times.
	var killed atomic.Int32
	go func() {
		defer close(killerDone)
		for range kills {
			select {
			case <-stopKilling:
				return
			case <-time.After(time.Duration(300+rand.IntN(1700)) * time.Millisecond):
			}
			mgr.kill()
			killed.Add(1)
			mgr.start(t)
		}
	}()

	names := registerFleet(t, fleet, "crash")

	// The wiper: a random server's status emptied at random moments, as a restore without
	// status or a careless tool would, until the killer is done.
	var wiped atomic.Int32
	wiperDone := make(chan struct{})
	go func() {
		defer close(wiperDone)
		for {
			select {
			case <-killerDone:
				return
			case <-time.After(time.Duration(200+rand.IntN(800)) * time.Millisecond):
			}
			name := names[rand.IntN(len(names))]
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				s := &metalv1alpha1.Server{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
					return err
				}
				s.Status = metalv1alpha1.ServerStatus{}
				return env.Client.Status().Update(ctx, s)
			})
			if err == nil {
				wiped.Add(1)
			}
		}
	}()

	waitAll := func(what string, timeout time.Duration, ok func(*metalv1alpha1.Server) bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			done, last := 0, ""
			for _, name := range names {
				s := &metalv1alpha1.Server{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err == nil && ok(s) {
					done++
				} else if err == nil {
					last = fmt.Sprintf("%s: %s/%s power %s annotations %v conditions %v", name, s.Annotations[lifecycle.StateAnnotation], s.Status.State, s.Status.PowerState, s.Annotations, s.Status.Conditions)
				}
			}
			if done == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d/%d after %s (e.g. %s)", what, done, n, timeout, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	is := func(state metalv1alpha1.ServerState, power metalv1alpha1.PowerState) func(*metalv1alpha1.Server) bool {
		return func(s *metalv1alpha1.Server) bool {
			return s.Annotations[lifecycle.StateAnnotation] == string(state) && s.Status.State == state && s.Status.PowerState == power
		}
	}

	waitAll("Available", 4*time.Minute, is(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff))
	// The hardware in status came from the probe's report: only the probe sees LLDP neighbours.
	// The wiper may still be at work (it stops with the killer), so a status just emptied must
	// be filled again from the report, not be found full at one read.
	waitAll("status filled from the probe's report", time.Minute, func(s *metalv1alpha1.Server) bool {
		neighbours := 0
		for _, nic := range s.Status.NetworkInterfaces {
			neighbours += len(nic.Neighbors)
		}
		return neighbours > 0 && len(s.Status.Processors) > 0 && s.Status.TotalSystemMemory != nil
	})
	for i, name := range names {
		claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("crash-%d", i)},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: name}}}
		if err := env.Client.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		// Bind as the claim controller does (the same value if it already did).
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
				return err
			}
			return lifecycle.PatchMetadata(ctx, env.Client, s, func(o client.Object) {
				// Both references in one write, as the claim controller binds: the server
				// boots the claim's configuration.
				o.(*metalv1alpha1.Server).Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: claim.Name}
				o.(*metalv1alpha1.Server).Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: "default", Name: claim.Name}
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitAll("Reserved and On", 3*time.Minute, is(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn))
	for i := range n {
		if err := env.Client.Delete(ctx, &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("crash-%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitAll("cleaned, back to Available and Off", 4*time.Minute, is(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff))
	// Finish the 20 kills if the lifecycle was quicker, then let the last manager settle.
	<-killerDone
	<-wiperDone
	time.Sleep(2 * time.Second)
	waitAll("still Available and Off after the last restart", time.Minute, is(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff))
	t.Logf("manager killed %d times, %d statuses wiped", killed.Load(), wiped.Load())
	if killed.Load() != kills {
		t.Errorf("killed %d times, want %d", killed.Load(), kills)
	}

	// Every release was cleaned exactly once, with proof, and the tenants' data is gone.
	for _, name := range names {
		s := &metalv1alpha1.Server{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: cleaning.ObjectName(name)}, cm); err != nil {
			t.Errorf("%s: no cleaning record: %v", name, err)
			continue
		}
		rec, err := cleaning.Decode(cm)
		if err != nil || len(rec.Cleanings) != 1 {
			t.Errorf("%s: want exactly one cleaning, record %+v (%v)", name, rec, err)
			continue
		}
		if ok, why := cleaning.Verdict(rec.Cleanings[0], metalv1alpha1.CleaningPolicyAllDisks, nil); !ok {
			t.Errorf("%s: %s", name, why)
		}
		if held, err := nb.TenantData(s.Spec.SystemUUID); err != nil || len(held) > 0 {
			t.Errorf("%s: disks %v still hold the tenant's data (%v)", name, held, err)
		}
	}

	perBMC := actionsPerBMC(fleet)
	for i := range n {
		// Discovery, the claim's boot, the release's power-off, the cleaning round's boot and
		// the power-off that ends it.
		if got := fmt.Sprint(perBMC[i]); got != "[Boot:Pxe/Once On ForceOff Boot:Pxe/Once On GracefulShutdown Boot:Pxe/Once On ForceOff]" {
			t.Errorf("%s: BMC actions %s, want each exactly once", names[i], got)
		}
	}
}

// actionsPerBMC lists, per BMC of the fleet, its power actions and boot overrides in order.
func actionsPerBMC(fleet *redfish.Emulator) map[int][]string {
	perBMC := map[int][]string{}
	for _, r := range fleet.Records() {
		a := r.ResetType
		switch r.Action {
		case redfish.ActionBootOverride:
			a = "Boot:" + r.Boot.Target + "/" + r.Boot.Enabled
		case redfish.ActionInsertMedia, redfish.ActionEjectMedia:
			a = r.Action + ":" + r.Image
		}
		perBMC[r.BMC] = append(perBMC[r.BMC], a)
	}
	return perBMC
}
