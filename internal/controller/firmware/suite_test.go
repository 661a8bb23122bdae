package firmware

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/version"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// One control plane and one emulated fleet for the package (the shared fixture, internal/testenv
// and internal/testenv/suite); the manager (metal family and firmware controllers, as in the
// binary) can be stopped and started again, as a process is killed and restarted. Tests take
// their own BMCs.
var (
	env   *testenv.Env
	fleet *suite.Fleet

	mgrMu   sync.Mutex
	manager *suite.Manager

	// logs holds everything the manager and the controllers logged (V(1) included), for the
	// tests that make sure a Secret's value is never among it.
	logs logCapture
)

// logCapture is a logr sink that keeps what it is given.
type logCapture struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (c *logCapture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

const (
	fleetSize      = 110
	powerDelay     = 200 * time.Millisecond
	updateDuration = 400 * time.Millisecond
)

// The tests marked parallel spend most of their time waiting out BMC timings (a minute of
// silence, verify timeouts, another update running): they run together once the serial tests are
// done, each on servers and BMCs of its own. TestBMCVersionThroughAMinuteOfSilence holds every
// bmcversion pass of the package to a bound; the others make no bmcversion pass, so they cannot
// move its figure. A test that kills the manager, changes the suite's options, or samples
// package-wide counters stays serial.

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, runSuite)) }

func runSuite(m *testing.M) int {
	ctrl.SetLogger(logs.logger())
	var err error
	fleet, err = suite.StartFleet(env, suite.FleetOptions{BMCs: fleetSize, PowerDelay: powerDelay, ServerName: bmccontroller.ServerName})
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		return 1
	}
	defer fleet.Close()
	for _, b := range fleet.BMCs() {
		b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration)})
	}
	if err := startManager(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	code := m.Run()
	stopManager()
	return code
}

// startManager starts a manager like the binary's: a fresh process's memory (pool, outcomes).
func startManager() error {
	m, err := suite.StartManager(env, ctrl.Options{
		Logger:     logs.logger(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}, func(ctx context.Context, mgr ctrl.Manager) error {
		events, err := eventsink.New(mgr, eventsink.Options{})
		if err != nil {
			return err
		}
		mo := metal.DefaultOptions()
		mo.BMCRequestTimeout = 2 * time.Second
		mo.BMCResetSettle = 3 * time.Second
		mo.PowerPoll = 100 * time.Millisecond
		mo.PowerTimeout = 5 * time.Second
		mo.RetryAfter = 500 * time.Millisecond
		mo.ServerResync = 30 * time.Second
		mo.BMCResync = 30 * time.Second
		mo.ErrorThreshold = 1000
		mo.Concurrency = 20
		mo.RegistryBindAddress = "0"
		mo.Events = events
		if mo.Pool, err = bmcaccess.NewPool(mgr, mo.PoolOptions()); err != nil {
			return err
		}
		if err := metal.Setup(ctx, mgr, mo); err != nil {
			return err
		}
		fo := DefaultOptions()
		fo.Pool, fo.Events = mo.Pool, events
		fo.Poll, fo.RetryAfter, fo.RequestTimeout = 200*time.Millisecond, 500*time.Millisecond, 2*time.Second
		fo.VerifyTimeout = 20 * time.Second
		fo.Concurrency = 20
		return Setup(ctx, mgr, fo)
	})
	if err != nil {
		return err
	}
	mgrMu.Lock()
	manager = m
	mgrMu.Unlock()
	return nil
}

func stopManager() {
	mgrMu.Lock()
	m := manager
	manager = nil
	mgrMu.Unlock()
	if m != nil {
		m.Stop()
	}
}

// ---- helpers ---------------------------------------------------------------------------------

func ctx() context.Context { return context.Background() }

// availableServers registers n BMCs named prefix-<i> and waits for their servers to be
// Available; it returns the servers' names and BMCs.
func availableServers(t *testing.T, prefix string, n int) ([]string, []*redfish.BMC) {
	t.Helper()
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = fleet.Take(t)
		names[i] = fleet.RegisterBMC(t, bmcs[i], fmt.Sprintf("%s-%d", prefix, i))
	}
	for _, name := range names {
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 90*time.Second)
	}
	return names, bmcs
}

// simpleUpdates counts the SimpleUpdates b's BMC recorded.
func simpleUpdates(b *redfish.BMC) int {
	n := 0
	for _, r := range fleet.Records() {
		if r.BMC == b.Index() && r.Action == redfish.ActionSimpleUpdate {
			n++
		}
	}
	return n
}

func getVersion(name string) *systemv1alpha1.BIOSVersion {
	v := &systemv1alpha1.BIOSVersion{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, v); err != nil {
		return nil
	}
	return v
}

// waitVersionState waits for a BIOSVersion's record and status to say want.
func waitVersionState(t *testing.T, name string, want systemv1alpha1.VersionState, timeout time.Duration) *systemv1alpha1.BIOSVersion {
	t.Helper()
	var v *systemv1alpha1.BIOSVersion
	testenv.Eventually(t, timeout, "BIOSVersion "+name+" "+string(want), func() (bool, string) {
		v = getVersion(name)
		if v == nil {
			return false, "gone"
		}
		rec, ok := record.Parse(v.Annotations[record.Annotation])
		var server string
		if s := suite.Server(env, v.Spec.ServerRef.Name); s != nil {
			server = fmt.Sprintf("%v %v", s.Annotations, s.Spec.ServerMaintenanceRef)
		}
		if v.Status.State == systemv1alpha1.VersionStateFailed && want != systemv1alpha1.VersionStateFailed {
			server += " events: " + eventsOf(v.Spec.ServerRef.Name) + " | " + eventsOf(v.Name)
		}
		return v.Status.State == want && version.StateOf(ok, rec) == want, fmt.Sprintf("status %s, record %s, conditions %v; server %s", v.Status.State, v.Annotations[record.Annotation], v.Status.Conditions, server)
	})
	return v
}

func biosVersion(name, server, version, image string) *systemv1alpha1.BIOSVersion {
	return &systemv1alpha1.BIOSVersion{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: systemv1alpha1.BIOSVersionSpec{
			BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: version, Image: systemv1alpha1.ImageSpec{URI: image}},
			ServerRef:           &corev1.LocalObjectReference{Name: server},
		},
	}
}

// eventsOf lists the events regarding the object name, oldest first, for failure messages.
func eventsOf(name string) string {
	events, err := suite.EventsRegarding(env, name)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range events {
		out = append(out, e.EventTime.Format("15:04:05.000")+" "+e.Reason+": "+e.Note)
	}
	return strings.Join(out, "; ")
}
