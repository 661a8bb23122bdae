package netboot

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/registry"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const namespace = "metal-discovery"

// startRegistry runs the registry in a manager of its own and returns its URL.
func startRegistry(t *testing.T) string {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.New(), Logger: logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := registry.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Setup(ctx, mgr, registry.Options{BindAddress: "127.0.0.1:0", DiscoveryNamespace: namespace, Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-reg.Listening():
	case err := <-done:
		t.Fatalf("manager: %v", err)
	}
	return "http://" + reg.Addr().String()
}

// enterDiscovery does by hand what the Server controller does on entering Discovery: a round,
// its Secret with token and ignition, a ServerBootConfiguration pointing at it, the round
// annotation.
func enterDiscovery(t *testing.T, name, uuid, registryURL string, labelUUID bool) {
	t.Helper()
	ctx := context.Background()
	round, token, err := discovery.NewRound()
	if err != nil {
		t.Fatal(err)
	}
	srv := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.ServerSpec{SystemUUID: uuid}}
	if err := env.Client.Create(ctx, srv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), srv) })
	ign, err := discovery.RenderIgnition(discovery.Params{RegistryURL: registryURL, ServerUUID: uuid, Token: token,
		ProbeImage: "ghcr.io/metalhub/metalprobe:test"}, "")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{discovery.ServerLabel: name, discovery.RoundLabel: round}
	sbcLabels := map[string]string{discovery.ServerLabel: name}
	if labelUUID {
		labels[discovery.SystemUUIDLabel] = strings.ToLower(uuid)
		sbcLabels[discovery.SystemUUIDLabel] = strings.ToLower(uuid)
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: discovery.ObjectName(name), Namespace: namespace, Labels: labels},
		Data: map[string][]byte{discovery.TokenKey: []byte(token), discovery.IgnitionKey: ign,
			discovery.IgnitionFormatKey: []byte(discovery.IgnitionFormat)},
	}
	sbc := &metalv1alpha1.ServerBootConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: discovery.ObjectName(name), Namespace: namespace, Labels: sbcLabels},
		Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: name},
			Image: "ghcr.io/metalhub/discovery-os:test", IgnitionSecretRef: &corev1.LocalObjectReference{Name: sec.Name}},
	}
	for _, o := range []client.Object{sec, sbc} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	// A patch of the one annotation: the registry writes the Server too (status).
	patch := client.MergeFrom(srv.DeepCopy())
	srv.Annotations = map[string]string{discovery.RoundAnnotation: round}
	if err := env.Client.Patch(ctx, srv, patch); err != nil {
		t.Fatal(err)
	}
}

// results collects netboot results by UUID.
type results struct {
	mu sync.Mutex
	ch map[string]chan Result
}

func (r *results) chanFor(uuid string) chan Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = map[string]chan Result{}
	}
	key := strings.ToLower(uuid)
	if r.ch[key] == nil {
		r.ch[key] = make(chan Result, 4)
	}
	return r.ch[key]
}

func (r *results) wait(t *testing.T, uuid string) Result {
	t.Helper()
	select {
	case res := <-r.chanFor(uuid):
		return res
	case <-time.After(60 * time.Second):
		t.Fatalf("no netboot result for %s", uuid)
		return Result{}
	}
}

func setup(t *testing.T, bmcs int, lookup time.Duration, indexed bool) (*redfish.Emulator, *results, string) {
	t.Helper()
	url := startRegistry(t)
	res := &results{}
	var reader client.Reader = env.Client
	if indexed {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		c, err := IndexedClient(ctx, env.Config, env.Client.Scheme(), namespace)
		if err != nil {
			t.Fatal(err)
		}
		reader = c
	}
	nb, err := New(Options{Client: reader, Indexed: indexed, Namespace: namespace, LookupTimeout: lookup, ProbeInterval: 200 * time.Millisecond,
		Logger: testr.New(t), OnResult: func(r Result) { res.chanFor(r.UUID) <- r }})
	if err != nil {
		t.Fatal(err)
	}
	em, err := redfish.Start(redfish.Options{BMCs: bmcs, PowerDelay: 50 * time.Millisecond, Seed: 7, OnBoot: nb.OnBoot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close(); nb.Close() })
	return em, res, url
}

// pxePowerOn does what the controller does through the BMC: one-time PXE, then power on.
func pxePowerOn(t *testing.T, pool *bmc.Pool, b *redfish.BMC) {
	t.Helper()
	user, pass := b.Credentials()
	c, err := pool.Get(bmc.Endpoint{Address: b.URL(), Username: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := b.SystemIDs()[0]
	if err := c.SetBootOnce(ctx, id, bmc.BootPxe); err != nil {
		t.Fatalf("set boot once: %v", err)
	}
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatalf("power on: %v", err)
	}
}

// Without the index the boot scans the Servers (the boot configurations carry no UUID label);
// with it, it finds its configuration by the label in its own cache.
func TestPXEBootDiscoversServers(t *testing.T) {
	t.Run("scan", func(t *testing.T) { testPXEBootDiscoversServers(t, false, "netboot-") })
	t.Run("indexed", func(t *testing.T) { testPXEBootDiscoversServers(t, true, "netboot-indexed-") })
}

func testPXEBootDiscoversServers(t *testing.T, indexed bool, prefix string) {
	em, res, url := setup(t, 3, 10*time.Second, indexed)
	pool := bmc.NewPool(bmc.Options{})
	defer pool.Close()
	for i, b := range em.BMCs() {
		sys := b.Systems()[0]
		name := prefix + string(rune('a'+i))
		// The Server has the UUID in lower case, the kernel's way; the BMC prints it in upper case.
		enterDiscovery(t, name, strings.ToLower(sys.UUID()), url, indexed)
	}
	for _, b := range em.BMCs() {
		pxePowerOn(t, pool, b)
	}
	for i, b := range em.BMCs() {
		sys := b.Systems()[0]
		name := prefix + string(rune('a'+i))
		if r := res.wait(t, sys.UUID()); r.Err != nil || r.Server != name {
			t.Fatalf("%s: %+v", name, r)
		}
		srv := &metalv1alpha1.Server{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, srv); err != nil {
			t.Fatal(err)
		}
		if !discovery.Fresh(srv) {
			t.Fatalf("%s: not fresh: %v", name, srv.Annotations)
		}
		hw := HardwareFor(sys.UUID(), sys.SerialNumber(), sys.MACs())
		threads := int32(0)
		for _, p := range srv.Status.Processors {
			threads += p.TotalThreads
		}
		if len(srv.Status.Processors) != hw.Sockets || int(threads) != hw.Threads() {
			t.Errorf("%s: processors %+v, want %d sockets, %d threads", name, srv.Status.Processors, hw.Sockets, hw.Threads())
		}
		if srv.Status.TotalSystemMemory == nil || srv.Status.TotalSystemMemory.Value() != hw.MemoryKiB*1024 {
			t.Errorf("%s: memory %v", name, srv.Status.TotalSystemMemory)
		}
		// The OS sees the NICs the BMC lists.
		var macs, bmcMACs []string
		for _, n := range srv.Status.NetworkInterfaces {
			macs = append(macs, n.MACAddress)
		}
		for _, m := range sys.MACs() {
			bmcMACs = append(bmcMACs, strings.ToLower(m))
		}
		slices.Sort(macs)
		slices.Sort(bmcMACs)
		if !slices.Equal(macs, bmcMACs) {
			t.Errorf("%s: NIC MACs %v, BMC says %v", name, macs, bmcMACs)
		}
		pxe := srv.Status.NetworkInterfaces[0]
		if pxe.CarrierStatus != "up" || pxe.IP == "" || len(pxe.Neighbors) != 1 || pxe.Neighbors[0].SystemName == "" {
			t.Errorf("%s: PXE NIC %+v", name, pxe)
		}
		if len(srv.Status.Storages) != 1 || len(srv.Status.Storages[0].Drives) != len(hw.Disks) {
			t.Errorf("%s: storages %+v", name, srv.Status.Storages)
		}
	}
}

// A system that PXE-boots without a Server and boot configuration finds nothing to boot.
func TestPXEBootWithoutConfiguration(t *testing.T) {
	em, res, _ := setup(t, 1, 500*time.Millisecond, false)
	pool := bmc.NewPool(bmc.Options{})
	defer pool.Close()
	start := time.Now()
	pxePowerOn(t, pool, em.BMC(0))
	r := res.wait(t, em.BMC(0).Systems()[0].UUID())
	if !errors.Is(r.Err, ErrNoBootConfiguration) {
		t.Fatalf("result %+v, want ErrNoBootConfiguration", r)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("gave up after %v, before the lookup timeout", d)
	}
}

// The hook must not hold up the emulator: it returns before any lookup happens.
func TestOnBootReturnsAtOnce(t *testing.T) {
	nb, err := New(Options{Client: env.Client, Namespace: namespace, LookupTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	start := time.Now()
	for i := range 20 {
		nb.OnBoot(redfish.BootEvent{UUID: "ffffffff-0000-0000-0000-0000000000" + string(rune('a'+i%6)) + string(rune('a'+i/6))})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("20 boot hooks took %v", d)
	}
}

// The index knows discovery boots only: asking for it together with a claim's OS boot is refused.
func TestIndexedRefusesMetadataURL(t *testing.T) {
	_, err := New(Options{Client: env.Client, Namespace: namespace, Indexed: true, MetadataURL: "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "discovery boots only") {
		t.Fatalf("New: %v, want a refusal", err)
	}
}

// A boot waiting for one of MaxConcurrent has not started: its BootTimeout counts from when its
// probe runs, not from the power-on (with a thousand machines booting at once, the last ones
// used to run out of time in the emulator's queue and never report).
func TestBootTimeoutStartsWhenTheProbeRuns(t *testing.T) {
	const lookup = 700 * time.Millisecond
	done := make(chan Result, 2)
	nb, err := New(Options{Client: env.Client, Namespace: namespace, MaxConcurrent: 1, LookupTimeout: lookup,
		BootTimeout: lookup + 300*time.Millisecond, Logger: logr.Discard(), OnResult: func(r Result) { done <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	start := time.Now()
	// No configuration exists for either: each boot looks for one for the whole lookup timeout,
	// the second only once the first has given up its slot.
	nb.OnBoot(redfish.BootEvent{UUID: "eeeeeeee-0000-0000-0000-000000000001"})
	nb.OnBoot(redfish.BootEvent{UUID: "eeeeeeee-0000-0000-0000-000000000002"})
	for range 2 {
		select {
		case r := <-done:
			if r.Err == nil {
				t.Fatalf("boot %s found a configuration; none exists", r.UUID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("boots did not end")
		}
	}
	// The second boot's own deadline would have cut its lookup short a third of the way in.
	if d := time.Since(start); d < 2*lookup {
		t.Fatalf("both boots ended after %s: the second did not get its full lookup of %s", d, lookup)
	}
}
