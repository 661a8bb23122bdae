package metal

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// One control plane, one emulated fleet and one manager for the whole package: tests take their
// own BMCs from the fleet so they do not see each other's servers.
var (
	env   *testenv.Env
	fleet *metaltest.Fleet
	// writes counts the manager's writes: the tests of "one write per pass" read it.
	writes = &testenv.WriteCounter{}
	// mgrClient is the manager's (cached, indexed) client, for handlers the tests serve.
	mgrClient client.Client
	// reconcileErrors counts the passes that returned an error, per controller and object.
	reconcileErrors = &testenv.ReconcileErrors{}
	testOpts        Options

	// reportsOff holds system UUIDs whose PXE boots the stand-in registry ignores.
	reportsOff sync.Map
)

const (
	fleetSize  = 290
	powerDelay = 300 * time.Millisecond
	// testHealthPoll is how often servers' hardware logs are read (below the server resync, so it
	// adds passes; events bring reads sooner).
	testHealthPoll = 15 * time.Second
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, runSuite)) }

func runSuite(m *testing.M) int {
	var err error
	fleet, err = metaltest.StartFleet(redfish.Options{BMCs: fleetSize, PowerDelay: powerDelay, OnBoot: standInRegistry})
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		return 1
	}
	defer fleet.Close()

	testOpts = DefaultOptions()
	testOpts.BMCRequestTimeout = 2 * time.Second
	testOpts.BMCResetSettle = 3 * time.Second
	testOpts.PowerPoll = 100 * time.Millisecond
	testOpts.RetryAfter = 500 * time.Millisecond
	testOpts.ServerResync = 30 * time.Second
	testOpts.BMCResync = 30 * time.Second
	testOpts.DiscoveryTimeout = 2 * time.Minute
	testOpts.ErrorThreshold = 1000 // Error is tested on its own reconciler
	testOpts.Concurrency = 20
	testOpts.RegistryBindAddress = "0" // the stand-in below reports; the registry has its own tests
	testOpts.HardwareLogPoll = testHealthPoll
	testOpts.HardwareFaultPolicy = health.FaultPolicyMaintenance
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:    scheme.New(),
		Logger:    reconcileErrors.Logger(),
		Metrics:   metricsserver.Options{BindAddress: "0"},
		NewClient: writes.NewClient,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	mgrClient = mgr.GetClient()
	// The emulated BMCs deliver their events to the receiver, as real ones reach the registry's
	// listener; the health tests deliver some themselves.
	testOpts.HardwareEvents = health.NewEventReceiver(mgr.GetClient(), logr.Discard())
	receiver := httptest.NewServer(testOpts.HardwareEvents)
	defer receiver.Close()
	testOpts.HardwareEventsURL = receiver.URL + bmcevents.EventsPath
	ctx, cancel := context.WithCancel(context.Background())
	if err := Setup(ctx, mgr, testOpts); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		cancel()
		return 1
	}
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	code := m.Run()
	cancel()
	<-done
	return code
}

// standInRegistry plays the discovery registry: a PXE boot of a server in Discovery reports its
// round, as the probe agent would. (The real registry is tested with discovery.)
func standInRegistry(ev redfish.BootEvent) {
	if _, off := reportsOff.Load(strings.ToLower(ev.UUID)); off {
		return
	}
	ctx := context.Background()
	// Like the probe agent, retry until the report is in (conflicts with the controller's own
	// writes are expected).
	for range 50 {
		list := &metalv1alpha1.ServerList{}
		if err := env.Client.List(ctx, list); err != nil {
			return
		}
		for i := range list.Items {
			s := &list.Items[i]
			round := s.Annotations[discovery.RoundAnnotation]
			if !strings.EqualFold(s.Spec.SystemUUID, ev.UUID) || round == "" {
				continue
			}
			if err := lifecycle.PatchMetadata(ctx, env.Client, s, func(o client.Object) {
				lifecycle.SetAnnotation(o, discovery.ReportedAnnotation, round)
			}); err == nil {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- helpers ---------------------------------------------------------------------------------

// registerBMC creates a BMCSecret and a BMC for an emulated BMC and returns the name of the
// Server its (single) system becomes.
func registerBMC(t *testing.T, b *redfish.BMC, name string) string {
	t.Helper()
	user, pass := b.Credentials()
	ctx := context.Background()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"username": user, "password": pass}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	obj := metaltest.BMCObject(b, name)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	return bmccontroller.ServerName(name, b.SystemIDs()[0])
}

func getServer(t *testing.T, name string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		return nil
	}
	return s
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func durableState(s *metalv1alpha1.Server) string { return s.Annotations[lifecycle.StateAnnotation] }

// waitState waits until the server's durable state and its status mirror both say want.
func waitState(t *testing.T, name string, want metalv1alpha1.ServerState, timeout time.Duration) *metalv1alpha1.Server {
	t.Helper()
	var s *metalv1alpha1.Server
	eventually(t, timeout, name+" "+string(want), func() (bool, string) {
		s = getServer(t, name)
		if s == nil {
			return false, "no server"
		}
		return durableState(s) == string(want) && s.Status.State == want,
			fmt.Sprintf("annotation %s, status %s, power %s", durableState(s), s.Status.State, s.Status.PowerState)
	})
	return s
}

func systemOf(b *redfish.BMC) *redfish.System { return b.Systems()[0] }
