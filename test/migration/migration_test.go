// Package migration tests switching a live fleet from the IronCore metal-operator to metalhub:
// metalhub started on the objects the reference leaves behind issues no power or boot action,
// keeps one Server per system, and keeps every state and claim.
package migration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cmd/migratecmd"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/migrate"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

var (
	env   *testenv.Env
	fleet *redfish.Emulator
)

// BMCs 0-60 serve the switch, discovery, duplicate and move tests; from rowsBase on, the plan's
// rows and the findings' tests (plan_rows_test.go).
var fleetSize = rowsBase + len(planRows) + findingBMCs

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, &env, func(m *testing.M) int {
		var err error
		if fleet, err = redfish.Start(redfish.Options{BMCs: fleetSize, PowerDelay: 200 * time.Millisecond}); err != nil {
			fmt.Fprintln(os.Stderr, "emulator:", err)
			return 1
		}
		defer fleet.Close()
		return m.Run()
	}))
}

// resync is the managers' steady-state interval: short, so that a window in which nothing may
// happen holds many passes (see watchPasses) without many seconds.
const resync = time.Second

// watchPasses calls check about once a second for passes resync periods and until each laid-out
// BMC has answered at least passes requests since the call: every steady-state pass of a server
// or its BMC object reads the BMC, so the window holds that many passes of each, counted rather
// than assumed from the clock.
func watchPasses(t *testing.T, objs []laidOut, passes int64, check func()) {
	t.Helper()
	from := map[int]int64{}
	for _, l := range objs {
		from[l.bmc.Index()] = l.bmc.Stats().Requests
	}
	start := time.Now()
	deadline := start.Add(time.Duration(passes) * 10 * resync)
	for {
		check()
		least := int64(-1)
		for _, l := range objs {
			if n := l.bmc.Stats().Requests - from[l.bmc.Index()]; least < 0 || n < least {
				least = n
			}
		}
		if least >= passes && time.Since(start) >= time.Duration(passes)*resync {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a BMC answered only %d requests in the window, want %d passes of each", least, passes)
		}
		time.Sleep(time.Second) // the window being watched, not a synchronisation
	}
}

// startMetalhub runs metalhub's metal family on env until the test ends.
func startMetalhub(t *testing.T) { startMetalhubOn(t, env) }

// startMetalhubOn runs metalhub's metal family on e until the test ends.
func startMetalhubOn(t *testing.T, e *testenv.Env) {
	t.Helper()
	o := metal.DefaultOptions()
	o.BMCRequestTimeout = 2 * time.Second
	o.PowerPoll = 100 * time.Millisecond
	o.RetryAfter = 500 * time.Millisecond
	o.ServerResync = resync
	o.BMCResync = resync
	o.RegistryBindAddress = "0"
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme: scheme.New(), Logger: logr.Discard(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := metal.Setup(ctx, mgr, o); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// actions is what the emulator recorded for these BMCs: resets and boot overrides.
func actions(bmcs []laidOut) []string {
	idx := map[int]string{}
	for _, l := range bmcs {
		idx[l.bmc.Index()] = l.name
	}
	var out []string
	for _, r := range fleet.Records() {
		if name, ok := idx[r.BMC]; ok {
			out = append(out, fmt.Sprintf("%s %s %s%s", name, r.Action, r.ResetType, bootOf(r)))
		}
	}
	return out
}

func bootOf(r redfish.Record) string {
	if r.Boot == nil {
		return ""
	}
	return fmt.Sprintf(" %+v", *r.Boot)
}

// The acceptance of the switch: a fleet laid out exactly as metal-operator leaves it (one
// claimed server powered On, one Parked, one in Maintenance, the rest Available); metalhub
// starts on it; through 24 passes of each (two minutes at its resync) no power and no
// boot-override action reaches a BMC; there is one Server per system; states and the claim
// are kept; deleting the claimed server is held.
func TestSwitchFromMetalOperatorIssuesNoBMCAction(t *testing.T) {
	c := env.Client
	ctx := context.Background()
	var bmcs []*redfish.BMC
	for i := range 8 {
		bmcs = append(bmcs, fleet.BMC(i))
	}
	fleetObjs := layOut(t, c, "mo", bmcs, map[int]role{0: claimed, 1: parked, 2: maintained, 3: maintainedElsewhere})

	// Before the switch: the plan lists every BMC and Server, with no BMC action, and exits 0.
	out, code := plan(t, "fleet=mo")
	if code != 0 {
		t.Fatalf("migrate plan exited %d on a clean fleet:\n%s", code, out)
	}
	for _, l := range fleetObjs {
		line := lineOf(out, "Server", l.server)
		if line == "" || !strings.HasSuffix(strings.TrimSpace(line), "none") {
			t.Fatalf("plan line of %s is %q, want it listed with no action:\n%s", l.server, line, out)
		}
		if lineOf(out, "BMC", l.name) == "" {
			t.Fatalf("plan does not list BMC %s:\n%s", l.name, out)
		}
	}
	startMetalhub(t)

	want := map[string]metalv1alpha1.ServerState{}
	for _, l := range fleetObjs {
		want[l.server] = map[role]metalv1alpha1.ServerState{available: metalv1alpha1.ServerStateAvailable,
			claimed: metalv1alpha1.ServerStateReserved, parked: metalv1alpha1.ServerStateParked,
			maintained: metalv1alpha1.ServerStateMaintenance, maintainedElsewhere: metalv1alpha1.ServerStateMaintenance}[l.role]
	}
	// metalhub takes the states over as its own bookkeeping...
	testenv.Eventually(t, time.Minute, "states adopted", func() (bool, string) {
		list := &metalv1alpha1.ServerList{}
		if err := c.List(ctx, list); err != nil {
			return false, err.Error()
		}
		for _, s := range list.Items {
			if got := s.Annotations[lifecycle.StateAnnotation]; got != string(want[s.Name]) {
				return false, fmt.Sprintf("%s: state annotation %q, want %s", s.Name, got, want[s.Name])
			}
		}
		return true, ""
	})
	// ...and through 24 passes of each (what two minutes held at the reference's five-second
	// resync) no power or boot action reaches a BMC, nothing is duplicated, nothing changes
	// state, the claim stays Bound.
	watchPasses(t, fleetObjs, 24, func() {
		if a := actions(fleetObjs); len(a) > 0 {
			t.Fatalf("BMC actions after the switch: %s", strings.Join(a, "; "))
		}
		list := &metalv1alpha1.ServerList{}
		must(t, c.List(ctx, list))
		if len(list.Items) != len(fleetObjs) {
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			t.Fatalf("%d Servers for %d systems: %s", len(list.Items), len(fleetObjs), strings.Join(names, ", "))
		}
		for _, s := range list.Items {
			if s.Status.State != want[s.Name] && s.Status.State != "" {
				t.Fatalf("%s: status.state %s, want %s", s.Name, s.Status.State, want[s.Name])
			}
		}
		claim := &metalv1alpha1.ServerClaim{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: fleetObjs[0].server}, claim))
		if claim.Status.Phase != metalv1alpha1.PhaseBound || claim.Spec.ServerRef == nil || claim.Spec.ServerRef.Name != fleetObjs[0].server {
			t.Fatalf("claim %s: phase %q, serverRef %v", claim.Name, claim.Status.Phase, claim.Spec.ServerRef)
		}
	})

	// The newer group's maintenance is carried out by a metal.ironcore.dev one of its name.
	newer := &maintenancev1alpha1.ServerMaintenance{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: fleetObjs[3].server + "-mmo"}, newer))
	counterpart := &metalv1alpha1.ServerMaintenance{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: fleetObjs[3].server + "-mmo"}, counterpart))
	if newer.Status.State != metalv1alpha1.ServerMaintenanceStateInMaintenance || !metav1.IsControlledBy(counterpart, newer) {
		t.Fatalf("newer group's maintenance: state %q, counterpart owners %v", newer.Status.State, counterpart.OwnerReferences)
	}

	// Deleting the claimed server is held while its claim holds it; no action either.
	claimed := &metalv1alpha1.Server{}
	must(t, c.Get(ctx, client.ObjectKey{Name: fleetObjs[0].server}, claimed))
	must(t, c.Delete(ctx, claimed))
	testenv.Eventually(t, 10*time.Second, "deletion held", func() (bool, string) {
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: fleetObjs[0].server}, s); err != nil {
			return false, err.Error()
		}
		return s.DeletionTimestamp != nil, "not marked for deletion yet"
	})
	for range 5 {
		time.Sleep(time.Second)
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: fleetObjs[0].server}, s); apierrors.IsNotFound(err) {
			t.Fatal("the claimed server was let go")
		}
	}
	if a := actions(fleetObjs); len(a) > 0 {
		t.Fatalf("BMC actions after deleting the claimed server: %s", strings.Join(a, "; "))
	}
}

// plan runs "metalhub migrate plan" against the test cluster.
func plan(t *testing.T, selector string) (string, int) {
	t.Helper()
	var out, errOut strings.Builder
	code := migratecmd.Main(context.Background(), []string{"plan", "--kubeconfig", env.Kubeconfig, "--selector", selector}, &out, &errOut)
	return out.String() + errOut.String(), code
}

// lineOf is the plan's table line of one object.
func lineOf(out, kind, name string) string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == kind && f[1] == name {
			return l
		}
	}
	return ""
}

// The plan refuses a fleet with a duplicate identity, naming both objects: one system UUID on two
// Servers (one as the reference wrote it, one upper-cased), one BMC address on two BMCs.
func TestPlanNamesDuplicateIdentities(t *testing.T) {
	c := env.Client
	ctx := context.Background()
	objs := layOut(t, c, "dupe", []*redfish.BMC{fleet.BMC(10)}, nil)
	orig := &metalv1alpha1.Server{}
	must(t, c.Get(ctx, client.ObjectKey{Name: objs[0].server}, orig))
	copyOf := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "dupe-copy", Labels: orig.Labels},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToUpper(orig.Spec.SystemUUID), BMCRef: orig.Spec.BMCRef}}
	must(t, c.Create(ctx, copyOf))
	b := &metalv1alpha1.BMC{}
	must(t, c.Get(ctx, client.ObjectKey{Name: objs[0].name}, b))
	twin := &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "dupe-twin", Labels: b.Labels}, Spec: b.Spec}
	must(t, c.Create(ctx, twin))

	out, code := plan(t, "fleet=dupe")
	t.Logf("migrate plan:\n%s", out)
	if code == 0 {
		t.Fatalf("migrate plan exited 0 on a fleet with duplicate identities:\n%s", out)
	}
	for _, want := range []string{
		"Servers " + objs[0].server + ", dupe-copy have system UUID",
		"BMCs " + objs[0].name + ", dupe-twin share address",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan does not say %q:\n%s", want, out)
		}
	}
}

// A server the reference was discovering when it was switched off is not powered, booted or
// timed out by metalhub: it is discovered again, from Initial, once it is Off and unclaimed.
func TestDiscoveryLeftByTheReferenceWaitsUntilOff(t *testing.T) {
	c := env.Client
	ctx := context.Background()
	objs := layOut(t, c, "disc", []*redfish.BMC{fleet.BMC(8), fleet.BMC(9)}, map[int]role{0: discoveringOn, 1: discoveringOff})
	on, off := objs[0], objs[1]
	startMetalhub(t)

	// The one that is Off is discovered again: Initial, then our own round (PXE once, On).
	testenv.Eventually(t, time.Minute, "rediscovery of the Off server", func() (bool, string) {
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: off.server}, s); err != nil {
			return false, err.Error()
		}
		return s.Annotations[discovery.RoundAnnotation] != "" && s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateDiscovery),
			fmt.Sprintf("state %q, round %q", s.Annotations[lifecycle.StateAnnotation], s.Annotations[discovery.RoundAnnotation])
	})
	// The one that is On is left alone, in Discovery...
	for range 10 {
		if a := actions([]laidOut{on}); len(a) > 0 {
			t.Fatalf("actions on a server in the reference's discovery: %s", strings.Join(a, "; "))
		}
		s := &metalv1alpha1.Server{}
		must(t, c.Get(ctx, client.ObjectKey{Name: on.server}, s))
		if got := s.Annotations[lifecycle.StateAnnotation]; got != string(metalv1alpha1.ServerStateDiscovery) {
			t.Fatalf("%s: state %q, want Discovery kept", s.Name, got)
		}
		time.Sleep(time.Second)
	}
	// ...until it is Off: then it is discovered again too.
	on.bmc.Systems()[0].SetPowerState("Off")
	testenv.Eventually(t, time.Minute, "rediscovery once Off", func() (bool, string) {
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: on.server}, s); err != nil {
			return false, err.Error()
		}
		return s.Annotations[discovery.RoundAnnotation] != "", fmt.Sprintf("state %q, no round", s.Annotations[lifecycle.StateAnnotation])
	})
}

// "metalhub move" of a 50-server fleet with claims and maintenances, from a cluster where
// metalhub runs to a second control plane where it starts: the source pauses, the copies
// arrive paused with their bookkeeping, and the target's manager takes over with 0 BMC actions,
// every object in its state, the claims Bound.
func TestMoveFiftyServersToAnotherCluster(t *testing.T) {
	target, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Stop() })
	ctx := context.Background()
	var bmcs []*redfish.BMC
	for i := 11; i < 61; i++ {
		bmcs = append(bmcs, fleet.BMC(i))
	}
	roles := map[int]role{}
	for i := range 10 {
		roles[i] = claimed
	}
	for i := 10; i < 15; i++ {
		roles[i] = maintained
	}
	roles[15], roles[16] = parked, parked
	objs := layOut(t, env.Client, "mv", bmcs, roles)
	want := map[string]metalv1alpha1.ServerState{}
	for _, l := range objs {
		want[l.server] = map[role]metalv1alpha1.ServerState{available: metalv1alpha1.ServerStateAvailable,
			claimed: metalv1alpha1.ServerStateReserved, parked: metalv1alpha1.ServerStateParked,
			maintained: metalv1alpha1.ServerStateMaintenance}[l.role]
	}
	arrived := func(c client.Client, what string) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, what, func() (bool, string) {
			list := &metalv1alpha1.ServerList{}
			if err := c.List(ctx, list, client.MatchingLabels{"fleet": "mv"}); err != nil {
				return false, err.Error()
			}
			if len(list.Items) != len(objs) {
				return false, fmt.Sprintf("%d Servers, want %d", len(list.Items), len(objs))
			}
			for _, s := range list.Items {
				if s.Annotations[lifecycle.StateAnnotation] != string(want[s.Name]) || s.Status.State != want[s.Name] {
					return false, fmt.Sprintf("%s: state %q, status %q, want %s", s.Name, s.Annotations[lifecycle.StateAnnotation], s.Status.State, want[s.Name])
				}
			}
			return true, ""
		})
	}
	// metalhub runs on the source and has made the states its bookkeeping.
	startMetalhub(t)
	arrived(env.Client, "states kept on the source")

	sel, err := labels.Parse("fleet=mv")
	must(t, err)
	var out strings.Builder
	must(t, migrate.Move(ctx, env.Client, target.Client, migrate.MoveOptions{Selector: sel, Out: &out}))
	t.Logf("move:\n%s", out.String())
	startMetalhubOn(t, target)
	arrived(target.Client, "states on the target")

	// Both managers run: the source's is paused, the target's acts on nothing, through six
	// passes of each (what thirty seconds held at the reference's five-second resync).
	watchPasses(t, objs, 6, func() {
		if a := actions(objs); len(a) > 0 {
			t.Fatalf("BMC actions after the move: %s", strings.Join(a, "; "))
		}
	})
	for _, l := range objs {
		if l.role != claimed {
			continue
		}
		claim := &metalv1alpha1.ServerClaim{}
		must(t, target.Client.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: l.server}, claim))
		if claim.Status.Phase != metalv1alpha1.PhaseBound || claim.Spec.ServerRef == nil || claim.Spec.ServerRef.Name != l.server || lifecycle.Paused(claim) {
			t.Fatalf("claim %s on the target: phase %q, serverRef %v, paused %v", claim.Name, claim.Status.Phase, claim.Spec.ServerRef, lifecycle.Paused(claim))
		}
		sbc := &metalv1alpha1.ServerBootConfiguration{}
		must(t, target.Client.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: l.server}, sbc))
		if len(sbc.OwnerReferences) != 1 || sbc.OwnerReferences[0].UID != claim.UID {
			t.Fatalf("boot configuration %s: owner references %v, want the target's claim %s", sbc.Name, sbc.OwnerReferences, claim.UID)
		}
	}
	src := &metalv1alpha1.Server{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: objs[0].server}, src))
	if !lifecycle.Paused(src) {
		t.Fatal("the source is not left paused")
	}

	// A finished move is not run again: a maintenance deleted on the target since would come
	// back, and live copies would get the paused source's status.
	if err := migrate.Move(ctx, env.Client, target.Client, migrate.MoveOptions{Selector: sel}); err == nil || !strings.Contains(err.Error(), "moved already") {
		t.Fatalf("a finished move run again: %v, want a refusal", err)
	}
	// Cut short after the target was unpaused (the source never marked): run again, the live
	// copies are recognised and left as they are, no action; an object of the same name that is
	// no copy stops it.
	unmark := func() {
		kinds := []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("SecretList")}
		for _, k := range []string{"Endpoint", "BMCSecret", "BMC", "Server", "ServerClaim", "ServerBootConfiguration", "ServerMaintenance"} {
			kinds = append(kinds, metalv1alpha1.GroupVersion.WithKind(k+"List"))
		}
		for _, gvk := range kinds {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk)
			must(t, env.Client.List(ctx, list))
			for i := range list.Items {
				if _, ok := list.Items[i].GetAnnotations()[migrate.MovedAnnotation]; ok {
					must(t, env.Client.Patch(ctx, &list.Items[i], client.RawPatch(types.MergePatchType,
						[]byte(`{"metadata":{"annotations":{"`+migrate.MovedAnnotation+`":null}}}`))))
				}
			}
		}
	}
	unmark()
	// The paused source's status carries a mark: a move that wrote it over the live copy would
	// show it there.
	marked := &metalv1alpha1.Server{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: objs[0].server}, marked))
	marked.Status.SerialNumber = "SOURCE-STATUS"
	must(t, env.Client.Status().Update(ctx, marked))
	must(t, migrate.Move(ctx, env.Client, target.Client, migrate.MoveOptions{Selector: sel}))
	if a := actions(objs); len(a) > 0 {
		t.Fatalf("BMC actions after moving again: %s", strings.Join(a, "; "))
	}
	after := &metalv1alpha1.Server{}
	must(t, target.Client.Get(ctx, client.ObjectKey{Name: objs[0].server}, after))
	if lifecycle.Paused(after) || after.Status.SerialNumber == "SOURCE-STATUS" {
		t.Fatalf("the move run again touched a copy the target runs: paused %v, serial %q", lifecycle.Paused(after), after.Status.SerialNumber)
	}
	stranger := &metalv1alpha1.Server{}
	must(t, target.Client.Get(ctx, client.ObjectKey{Name: objs[1].server}, stranger))
	// The target's controllers write it too: patch the one annotation away.
	patch := client.MergeFrom(stranger.DeepCopy())
	delete(stranger.Annotations, migrate.MovedFromAnnotation)
	must(t, target.Client.Patch(ctx, stranger, patch))
	unmark()
	if err := migrate.Move(ctx, env.Client, target.Client, migrate.MoveOptions{Selector: sel}); err == nil || !strings.Contains(err.Error(), objs[1].server) {
		t.Fatalf("move over an object that is no copy: %v, want an error naming %s", err, objs[1].server)
	}
}
