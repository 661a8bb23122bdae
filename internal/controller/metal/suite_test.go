package metal

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// One control plane, one emulated fleet and one manager for the whole package: tests take their
// own BMCs from the fleet so they do not see each other's servers.
//
// A test that only waits on its own BMCs and objects runs in parallel (t.Parallel). These stay
// serial, because a test beside them would break them or they it: those that read package-wide
// state (writes.Violations through checkNoDoubleWrites, the manager's metrics), those that time
// the manager against a bound or load it on purpose (many servers at once, dead BMCs, claim
// races, pass deadlines), those whose claims select servers by labels another test's servers
// could carry, and those that change testOpts, the manager or the fleet as a whole. Go runs the
// serial tests first, alone, then the parallel ones together.
var (
	env   *testenv.Env
	fleet *suite.Fleet
	// writes counts the manager's writes: the tests of "one write per pass" read it.
	writes = &testenv.WriteCounter{}
	// mgrClient is the manager's (cached, indexed) client, for handlers the tests serve.
	mgrClient client.Client
	// reconcileErrors counts the passes that returned an error, per controller and object.
	reconcileErrors = &testenv.ReconcileErrors{}
	testOpts        Options
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
	fleet, err = suite.StartFleet(env, suite.FleetOptions{BMCs: fleetSize, PowerDelay: powerDelay, ServerName: bmccontroller.ServerName})
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		return 1
	}
	defer fleet.Close()

	testOpts = DefaultOptions()
	testOpts.BMCRequestTimeout = 2 * time.Second
	testOpts.BMCPassTimeout = 3 * testOpts.BMCRequestTimeout
	testOpts.BMCResetSettle = 3 * time.Second
	testOpts.PowerPoll = 100 * time.Millisecond
	testOpts.RetryAfter = 500 * time.Millisecond
	testOpts.ServerResync = 30 * time.Second
	testOpts.BMCResync = 30 * time.Second
	testOpts.DiscoveryTimeout = 2 * time.Minute
	testOpts.ErrorThreshold = 1000 // Error is tested on its own reconciler
	testOpts.Concurrency = 20
	testOpts.RegistryBindAddress = "0" // the fleet's stand-in reports; the registry has its own tests
	testOpts.HardwareLogPoll = testHealthPoll
	testOpts.HardwareFaultPolicy = health.FaultPolicyMaintenance
	var receiver *httptest.Server
	mgr, err := suite.StartManager(env, ctrl.Options{Logger: reconcileErrors.Logger(), NewClient: writes.NewClient},
		func(ctx context.Context, mgr ctrl.Manager) error {
			mgrClient = mgr.GetClient()
			// The emulated BMCs deliver their events to the receiver, as real ones reach the
			// registry's listener; the health tests deliver some themselves.
			testOpts.HardwareEvents = health.NewEventReceiver(mgr.GetClient(), logr.Discard())
			receiver = httptest.NewServer(testOpts.HardwareEvents)
			testOpts.HardwareEventsURL = receiver.URL + bmcevents.EventsPath
			return Setup(ctx, mgr, testOpts)
		})
	if receiver != nil {
		defer receiver.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	code := m.Run()
	// The parallel tests cannot read writes.Violations (another test's pass may be the one that
	// wrote twice) and run after the serial tests that do: the package fails on any such pass.
	if v := writes.Violations(); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "passes that wrote their object twice:\n%s\n", strings.Join(v, "\n"))
		code = 1
	}
	mgr.Stop()
	return code
}

// ---- helpers ---------------------------------------------------------------------------------

func durableState(s *metalv1alpha1.Server) string { return s.Annotations[lifecycle.StateAnnotation] }

func systemOf(b *redfish.BMC) *redfish.System { return b.Systems()[0] }
