// Package suite is the fixture the controller suites share beside their control plane
// (internal/testenv): an emulated BMC fleet with a stand-in discovery registry, BMCs registered
// the way a user does, a manager started like the binary's, and the Server and event helpers
// their tests read. It sits apart from testenv because it needs lifecycle, whose own tests use
// testenv. It must not import any controller package: what differs per suite (the controllers
// set up, how a BMC's system names its Server) is passed in.
package suite

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Fleet is a package's emulated BMC fleet: tests take their own BMCs (Take) so they do not see
// each other's servers. A PXE boot of a server in Discovery is reported as the probe agent
// would (the real registry is tested with discovery).
type Fleet struct {
	*redfish.Emulator
	env        *testenv.Env
	size       int
	next       atomic.Int32
	serverName func(bmcName, systemID string) string
	// ignored holds system UUIDs (lower case) whose PXE boots go unreported.
	ignored sync.Map
}

// FleetOptions configure StartFleet.
type FleetOptions struct {
	// BMCs is the fleet's size; PowerDelay how long an emulated power change takes.
	BMCs       int
	PowerDelay time.Duration
	// ServerName names the Server a BMC's system becomes (bmccontroller.ServerName): passed in,
	// so the fixture imports no controller.
	ServerName func(bmcName, systemID string) string
}

// StartFleet starts the emulated fleet beside env; Close stops it. Without env (single-pass
// tests on a fake client) no boot is reported and RegisterBMC cannot be used.
func StartFleet(env *testenv.Env, o FleetOptions) (*Fleet, error) {
	f := &Fleet{env: env, size: o.BMCs, serverName: o.ServerName}
	em, err := redfish.Start(redfish.Options{BMCs: o.BMCs, PowerDelay: o.PowerDelay, OnBoot: f.standInRegistry})
	if err != nil {
		return nil, fmt.Errorf("starting the emulated fleet: %w", err)
	}
	f.Emulator = em
	return f, nil
}

// IgnoreBoots leaves the PXE boots of the system uuid unreported from now on.
func (f *Fleet) IgnoreBoots(uuid string) { f.ignored.Store(strings.ToLower(uuid), true) }

// standInRegistry plays the discovery registry: a PXE boot of a server in Discovery reports its
// round. Like the probe agent, it retries until the report is in (conflicts with the
// controller's own writes are expected).
func (f *Fleet) standInRegistry(ev redfish.BootEvent) {
	if f.env == nil {
		return
	}
	if _, off := f.ignored.Load(strings.ToLower(ev.UUID)); off {
		return
	}
	ctx := context.Background()
	for range 50 {
		list := &metalv1alpha1.ServerList{}
		if err := f.env.Client.List(ctx, list); err != nil {
			return
		}
		for i := range list.Items {
			s := &list.Items[i]
			round := s.Annotations[discovery.RoundAnnotation]
			if !strings.EqualFold(s.Spec.SystemUUID, ev.UUID) || round == "" {
				continue
			}
			if err := lifecycle.PatchMetadata(ctx, f.env.Client, s, func(o client.Object) {
				lifecycle.SetAnnotation(o, discovery.ReportedAnnotation, round)
			}); err == nil {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Take reserves the next emulated BMC for a test.
func (f *Fleet) Take(tb testing.TB) *redfish.BMC {
	tb.Helper()
	i := int(f.next.Add(1)) - 1
	if i >= f.size {
		tb.Fatalf("fleet exhausted: raise the fleet's size")
	}
	return f.BMC(i)
}

// Port is the TCP port the emulated BMC listens on.
func Port(b *redfish.BMC) int32 {
	var p int32
	fmt.Sscanf(b.URL()[strings.LastIndex(b.URL(), ":")+1:], "%d", &p)
	return p
}

// BMCObject is the BMC object for an emulated BMC, named name (and labelled test=name), whose
// BMCSecret has the same name.
func BMCObject(b *redfish.BMC, name string) *metalv1alpha1.BMC {
	return &metalv1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}},
		Spec: metalv1alpha1.BMCSpec{
			Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
			BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: Port(b), Scheme: metalv1alpha1.HTTPScheme},
		},
	}
}

// RegisterBMC creates a BMCSecret and a BMC (BMCObject) for an emulated BMC and returns the
// name of the Server its (first) system becomes.
func (f *Fleet) RegisterBMC(tb testing.TB, b *redfish.BMC, name string) string {
	tb.Helper()
	user, pass := b.Credentials()
	ctx := context.Background()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"username": user, "password": pass}}
	if err := f.env.Client.Create(ctx, sec); err != nil {
		tb.Fatal(err)
	}
	if err := f.env.Client.Create(ctx, BMCObject(b, name)); err != nil {
		tb.Fatal(err)
	}
	return f.serverName(name, b.SystemIDs()[0])
}

// RecordsOf are the actions the emulator recorded on b's boxes.
func (f *Fleet) RecordsOf(b *redfish.BMC) []redfish.Record {
	var out []redfish.Record
	for _, r := range f.Records() {
		if r.BMC == b.Index() {
			out = append(out, r)
		}
	}
	return out
}

// BoxActions are the actions on b's boxes: RecordsOf without the event subscriptions, which are
// the BMC's configuration (looked at through b.Subscriptions), not an action on a box.
func (f *Fleet) BoxActions(b *redfish.BMC) []redfish.Record {
	var out []redfish.Record
	for _, r := range f.RecordsOf(b) {
		if r.Action != redfish.ActionSubscribe && r.Action != redfish.ActionUnsubscribe {
			out = append(out, r)
		}
	}
	return out
}

// ResetTypes names the records' actions the way the tests compare them: a reset by its type, a
// boot override as Boot:<target>/<enabled>.
func ResetTypes(recs []redfish.Record) []string {
	var out []string
	for _, r := range recs {
		switch r.Action {
		case redfish.ActionReset:
			out = append(out, r.ResetType)
		case redfish.ActionBootOverride:
			out = append(out, "Boot:"+r.Boot.Target+"/"+r.Boot.Enabled)
		default:
			out = append(out, r.Action+":"+r.ResetType)
		}
	}
	return out
}

// Since are the records at or after t.
func Since(recs []redfish.Record, t time.Time) []redfish.Record {
	var out []redfish.Record
	for _, r := range recs {
		if !r.Time.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// Connect logs in to b as the controllers do, through a pool of its own that the test closes.
func Connect(tb testing.TB, b *redfish.BMC) (*bmc.Pool, bmc.BMC) {
	tb.Helper()
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 2 * time.Second})
	tb.Cleanup(pool.Close)
	user, pw := b.Credentials()
	conn, err := pool.Get(bmc.Endpoint{Address: b.URL(), Username: user, Password: pw})
	if err != nil {
		tb.Fatal(err)
	}
	return pool, conn
}

// Server reads the Server name (nil when there is none).
func Server(env *testenv.Env, name string) *metalv1alpha1.Server {
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		return nil
	}
	return s
}

// WipeStatus empties the status of Server name, as a restore or a migration would. The
// controllers may write it meanwhile: the wipe is read and written again on a conflict.
func WipeStatus(tb testing.TB, env *testenv.Env, name string) {
	tb.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &metalv1alpha1.Server{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
			return err
		}
		s.Status = metalv1alpha1.ServerStatus{}
		return testenv.WriteStatus(context.Background(), env.Client, s)
	}); err != nil {
		tb.Fatalf("wiping the status of server %s: %v", name, err)
	}
}

// WaitServerState waits until the server's durable state (its annotation) and its status mirror
// both say want, and returns it.
func WaitServerState(tb testing.TB, env *testenv.Env, name string, want metalv1alpha1.ServerState, timeout time.Duration) *metalv1alpha1.Server {
	tb.Helper()
	var s *metalv1alpha1.Server
	testenv.Eventually(tb, timeout, name+" "+string(want), func() (bool, string) {
		s = Server(env, name)
		if s == nil {
			return false, "no server"
		}
		state := s.Annotations[lifecycle.StateAnnotation]
		return state == string(want) && s.Status.State == want,
			fmt.Sprintf("annotation %s, status %s, power %s", state, s.Status.State, s.Status.PowerState)
	})
	return s
}

// EventsRegarding are the events regarding the object name, oldest first (for failure messages).
func EventsRegarding(env *testenv.Env, name string) ([]eventsv1.Event, error) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), list); err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].EventTime.Before(&list.Items[j].EventTime) })
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out, nil
}
