package firmware

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/version"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// One control plane and one emulated fleet for the package; the manager (metal family and
// firmware controllers, as in the binary) can be stopped and started again, as a process is
// killed and restarted. Tests take their own BMCs.
var (
	env     *testenv.Env
	fleet   *redfish.Emulator
	nextBMC atomic.Int32

	mgrMu   sync.Mutex
	mgrStop func()

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

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, runSuite)) }

func runSuite(m *testing.M) int {
	ctrl.SetLogger(logs.logger())
	var err error
	fleet, err = redfish.Start(redfish.Options{BMCs: fleetSize, PowerDelay: powerDelay, OnBoot: standInRegistry})
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
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     scheme.New(),
		Logger:     logs.logger(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	events, err := eventsink.New(mgr, eventsink.Options{})
	if err != nil {
		cancel()
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
		cancel()
		return err
	}
	if err := metal.Setup(ctx, mgr, mo); err != nil {
		cancel()
		return err
	}
	fo := DefaultOptions()
	fo.Pool, fo.Events = mo.Pool, events
	fo.Poll, fo.RetryAfter, fo.RequestTimeout = 200*time.Millisecond, 500*time.Millisecond, 2*time.Second
	fo.VerifyTimeout = 20 * time.Second
	fo.Concurrency = 20
	if err := Setup(ctx, mgr, fo); err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	mgrMu.Lock()
	mgrStop = func() { cancel(); <-done }
	mgrMu.Unlock()
	return nil
}

func stopManager() {
	mgrMu.Lock()
	stop := mgrStop
	mgrStop = nil
	mgrMu.Unlock()
	if stop != nil {
		stop()
	}
}

// standInRegistry plays the discovery registry: a PXE boot of a server in Discovery reports its
// round, as the probe agent would.
func standInRegistry(ev redfish.BootEvent) {
	ctx := context.Background()
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

func ctx() context.Context { return context.Background() }

func takeBMC(t *testing.T) *redfish.BMC {
	t.Helper()
	i := int(nextBMC.Add(1)) - 1
	if i >= fleetSize {
		t.Fatalf("fleet exhausted: raise fleetSize")
	}
	return fleet.BMC(i)
}

func port(b *redfish.BMC) int32 {
	var p int32
	fmt.Sscanf(b.URL()[strings.LastIndex(b.URL(), ":")+1:], "%d", &p)
	return p
}

// registerBMC creates a BMCSecret and a BMC for an emulated BMC and returns the name of the
// Server its system becomes.
func registerBMC(t *testing.T, b *redfish.BMC, name string) string {
	t.Helper()
	user, pass := b.Credentials()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"username": user, "password": pass}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	obj := &metalv1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: metalv1alpha1.BMCSpec{
			Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
			BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: port(b), Scheme: metalv1alpha1.HTTPScheme},
		},
	}
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatal(err)
	}
	return bmccontroller.ServerName(name, b.SystemIDs()[0])
}

func getServer(name string) *metalv1alpha1.Server {
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, s); err != nil {
		return nil
	}
	return s
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func waitState(t *testing.T, name string, want metalv1alpha1.ServerState, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, name+" "+string(want), func() (bool, string) {
		s := getServer(name)
		if s == nil {
			return false, "no server"
		}
		return s.Annotations[lifecycle.StateAnnotation] == string(want) && s.Status.State == want,
			fmt.Sprintf("annotation %s, status %s", s.Annotations[lifecycle.StateAnnotation], s.Status.State)
	})
}

// availableServers registers n BMCs named prefix-<i> and waits for their servers to be
// Available; it returns the servers' names and BMCs.
func availableServers(t *testing.T, prefix string, n int) ([]string, []*redfish.BMC) {
	t.Helper()
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = takeBMC(t)
		names[i] = registerBMC(t, bmcs[i], fmt.Sprintf("%s-%d", prefix, i))
	}
	for _, name := range names {
		waitState(t, name, metalv1alpha1.ServerStateAvailable, 90*time.Second)
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
	eventually(t, timeout, "BIOSVersion "+name+" "+string(want), func() (bool, string) {
		v = getVersion(name)
		if v == nil {
			return false, "gone"
		}
		rec, ok := record.Parse(v.Annotations[record.Annotation])
		var server string
		if s := getServer(v.Spec.ServerRef.Name); s != nil {
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
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), list); err != nil {
		return err.Error()
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].EventTime.Before(&list.Items[j].EventTime) })
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.EventTime.Format("15:04:05.000")+" "+e.Reason+": "+e.Note)
		}
	}
	return strings.Join(out, "; ")
}
