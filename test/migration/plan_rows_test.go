package migration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/migrate"
	"github.com/metalhub/metalhub/internal/testenv"
)

// rowsBase is the first BMC of the plan's rows; findingBMCs follow them.
const (
	rowsBase    = 61
	findingBMCs = 4
)

// planRow is one state the reference can leave a server in, and where metalhub's first passes
// take it: the state and power it settles in.
type planRow struct {
	name  string
	role  role
	state metalv1alpha1.ServerState
	on    bool
}

var planRows = []planRow{
	{"initial off", initialOff, metalv1alpha1.ServerStateDiscovery, true},
	{"initial on", initialOn, metalv1alpha1.ServerStateDiscovery, true},
	{"discovery on (the reference's round)", discoveringOn, metalv1alpha1.ServerStateDiscovery, true},
	{"discovery off", discoveringOff, metalv1alpha1.ServerStateDiscovery, true},
	{"available off", available, metalv1alpha1.ServerStateAvailable, false},
	{"available on", availableOn, metalv1alpha1.ServerStateAvailable, false},
	{"reserved, claim on, box on", claimed, metalv1alpha1.ServerStateReserved, true},
	{"reserved, claim on, box off", claimedBoxOff, metalv1alpha1.ServerStateReserved, true},
	{"reserved, claim off, box on", claimedOffBoxOn, metalv1alpha1.ServerStateReserved, false},
	{"reserved, claim off, box off", claimedOffBoxOff, metalv1alpha1.ServerStateReserved, false},
	{"reserved, claim gone, box on", claimGoneOn, metalv1alpha1.ServerStateAvailable, false},
	{"released off", releasedOff, metalv1alpha1.ServerStateReleased, false},
	{"released on", releasedOn, metalv1alpha1.ServerStateReleased, false},
	{"parked off", parked, metalv1alpha1.ServerStateParked, false},
	{"parked on", parkedOn, metalv1alpha1.ServerStateParked, true},
	{"maintenance off, box off", maintained, metalv1alpha1.ServerStateMaintenance, false},
	{"maintenance off, box on", maintainedOn, metalv1alpha1.ServerStateMaintenance, false},
	{"maintenance of the newer group", maintainedElsewhere, metalv1alpha1.ServerStateMaintenance, false},
	{"maintenance boot template, box on", maintenanceBootOn, metalv1alpha1.ServerStateMaintenance, true},
	{"maintenance boot template, box off", maintenanceBootOff, metalv1alpha1.ServerStateMaintenance, true},
	{"error, discovered, off", errorDiscoveredOff, metalv1alpha1.ServerStateAvailable, false},
	{"error, discovered, on", errorDiscoveredOn, metalv1alpha1.ServerStateError, true},
	{"error, undiscovered, on", errorUndiscoveredOn, metalv1alpha1.ServerStateError, true},
	{"error, undiscovered, off", errorUndiscoveredOff, metalv1alpha1.ServerStateError, false},
}

// requestsOf is what BMC l's recorder saw, as the plan names it.
func requestsOf(l laidOut) []migrate.Request {
	var out []migrate.Request
	for _, r := range fleet.Records() {
		if r.BMC != l.bmc.Index() {
			continue
		}
		switch {
		case r.Action == redfish.ActionReset && (r.ResetType == "On" || r.ResetType == "ForceOn"):
			out = append(out, migrate.PowerOn)
		case r.Action == redfish.ActionReset && r.ResetType == "ForceOff":
			out = append(out, migrate.PowerOff)
		case r.Action == redfish.ActionReset && r.ResetType == "GracefulShutdown":
			out = append(out, migrate.GracefulOff)
		case r.Action == redfish.ActionReset && (r.ResetType == "ForceRestart" || r.ResetType == "PowerCycle"):
			out = append(out, migrate.Restart)
		case r.Action == redfish.ActionBootOverride && r.Boot != nil && r.Boot.Target == "Pxe" && r.Boot.Enabled == "Once":
			out = append(out, migrate.PXEOnce)
		default:
			out = append(out, migrate.Request(fmt.Sprintf("%s %s%s", r.Action, r.ResetType, bootOf(r))))
		}
	}
	return out
}

// Acceptance of "migrate plan": every state the reference can leave a server in, laid out as it
// leaves it, one BMC each; the plan's code predicts each server's BMC requests; metalhub starts
// and runs its first passes until every server has settled; the BMC recorder saw exactly what
// the plan predicted, row by row, and nothing more in a look past the settling longer than a
// server resync.
func TestPlanPredictsFirstPasses(t *testing.T) {
	c := env.Client
	ctx := context.Background()
	var bmcs []*redfish.BMC
	roles := map[int]role{}
	for i, r := range planRows {
		bmcs = append(bmcs, fleet.BMC(rowsBase+i))
		roles[i] = r.role
	}
	objs := layOut(t, c, "row", bmcs, roles)

	sel, err := labels.Parse("fleet=row")
	must(t, err)
	plan, err := migrate.Make(ctx, c, migrate.Options{Selector: sel})
	must(t, err)
	var table strings.Builder
	plan.Print(&table)
	t.Logf("migrate plan:\n%s", table.String())
	predicted := map[string][]migrate.Request{}
	for _, r := range plan.Rows {
		if r.Kind == "Server" {
			predicted[r.Name] = r.Requests
		}
	}

	startMetalhub(t)
	settled := func() (bool, string) {
		for i, l := range objs {
			row := planRows[i]
			s := &metalv1alpha1.Server{}
			if err := c.Get(ctx, client.ObjectKey{Name: l.server}, s); err != nil {
				return false, err.Error()
			}
			want := metalv1alpha1.PowerStateOff
			if row.on {
				want = metalv1alpha1.PowerStateOn
			}
			box := l.bmc.Systems()[0].PowerState()
			if s.Annotations[lifecycle.StateAnnotation] != string(row.state) || s.Status.State != row.state ||
				s.Status.PowerState != want || box != string(want) {
				return false, fmt.Sprintf("row %q: state %q, status %q, power %q, box %q; want %s, %s",
					row.name, s.Annotations[lifecycle.StateAnnotation], s.Status.State, s.Status.PowerState, box, row.state, want)
			}
		}
		return true, ""
	}
	testenv.Eventually(t, 2*time.Minute, "first passes settled", settled)
	// Settled is not done: past two server resyncs, nothing more has happened to any box.
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		if ok, why := settled(); !ok {
			t.Fatalf("moved on after settling: %s", why)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i, l := range objs {
		if got, want := requestsOf(l), predicted[l.server]; !slices.Equal(got, want) {
			t.Errorf("row %q: the BMC saw %q, the plan predicted %q", planRows[i].name, got, want)
		}
	}
}

// Finding A: a maintenance copied by "metalhub move" has a new UID; the box metalhub booted
// into its boot configuration on the source is not booted again (restarted) on the target.
func TestMovedMaintenanceBootIsNoReset(t *testing.T) {
	target, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Stop() })
	ctx := context.Background()
	objs := layOut(t, env.Client, "mvboot", []*redfish.BMC{fleet.BMC(rowsBase + len(planRows))}, map[int]role{0: maintenanceBootOff})
	l := objs[0]

	// metalhub boots it on the source: one-time PXE, power On, recorded.
	startMetalhub(t)
	testenv.Eventually(t, time.Minute, "booted into the maintenance on the source", func() (bool, string) {
		s := &metalv1alpha1.Server{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: l.server}, s); err != nil {
			return false, err.Error()
		}
		rec := s.Annotations[serverstate.MaintenanceBootAnnotation]
		return rec != "" && rec != "adopted" && l.bmc.Systems()[0].PowerState() == "On",
			fmt.Sprintf("record %q, box %s", rec, l.bmc.Systems()[0].PowerState())
	})
	booted := requestsOf(l)
	if !slices.Equal(booted, []migrate.Request{migrate.PXEOnce, migrate.PowerOn}) {
		t.Fatalf("booting on the source: %q", booted)
	}

	sel, err := labels.Parse("fleet=mvboot")
	must(t, err)
	must(t, migrate.Move(ctx, env.Client, target.Client, migrate.MoveOptions{Selector: sel}))
	startMetalhubOn(t, target)

	// The target's manager takes the record over as the copy's (its one write), and then
	// keeps the box as it is for two server resyncs.
	m := &metalv1alpha1.ServerMaintenance{}
	must(t, target.Client.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: l.server}, m))
	testenv.Eventually(t, time.Minute, "the record names the target's maintenance", func() (bool, string) {
		s := &metalv1alpha1.Server{}
		if err := target.Client.Get(ctx, client.ObjectKey{Name: l.server}, s); err != nil {
			return false, err.Error()
		}
		if got := requestsOf(l); len(got) > len(booted) {
			t.Fatalf("BMC requests on the target after the move: %q", got[len(booted):])
		}
		rec := s.Annotations[serverstate.MaintenanceBootAnnotation]
		return strings.HasSuffix(rec, "/"+string(m.UID)), fmt.Sprintf("record %q, maintenance UID %s", rec, m.UID)
	})
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		if got := requestsOf(l); len(got) > len(booted) {
			t.Fatalf("BMC requests on the target after the move: %q", got[len(booted):])
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The copy's boot configuration is still its maintenance's, which carries on.
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	must(t, target.Client.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: l.server}, sbc))
	must(t, target.Client.Get(ctx, client.ObjectKey{Namespace: claimNS, Name: l.server}, m))
	if !metav1.IsControlledBy(sbc, m) || m.Status.State != metalv1alpha1.ServerMaintenanceStateInMaintenance {
		t.Fatalf("on the target: boot configuration owners %v, maintenance %s state %q", sbc.OwnerReferences, m.UID, m.Status.State)
	}
}

// Finding B: an Error left by the reference is no rediscovery. Discovered and Off, it is
// Available; On, or never discovered, it stays in Error, untouched; once the On one is powered
// off (by its user), it is Available. No BMC request at any point.
func TestAdoptedErrorIsNoRediscovery(t *testing.T) {
	c := env.Client
	ctx := context.Background()
	base := rowsBase + len(planRows) + 1
	objs := layOut(t, c, "err", []*redfish.BMC{fleet.BMC(base), fleet.BMC(base + 1), fleet.BMC(base + 2)},
		map[int]role{0: errorDiscoveredOn, 1: errorDiscoveredOff, 2: errorUndiscoveredOff})
	startMetalhub(t)
	want := []metalv1alpha1.ServerState{metalv1alpha1.ServerStateError, metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateError}
	states := func() (bool, string) {
		for i, l := range objs {
			if a := requestsOf(l); len(a) > 0 {
				t.Fatalf("%s: BMC requests %q", l.server, a)
			}
			s := &metalv1alpha1.Server{}
			if err := c.Get(ctx, client.ObjectKey{Name: l.server}, s); err != nil {
				return false, err.Error()
			}
			if got := s.Annotations[lifecycle.StateAnnotation]; got != string(want[i]) || s.Status.State != want[i] {
				return false, fmt.Sprintf("%s: state %q, status %q, want %s", l.server, got, s.Status.State, want[i])
			}
		}
		return true, ""
	}
	testenv.Eventually(t, time.Minute, "adopted", states)
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		if ok, why := states(); !ok {
			t.Fatalf("after adopting: %s", why)
		}
		time.Sleep(500 * time.Millisecond)
	}

	objs[0].bmc.Systems()[0].SetPowerState("Off")
	want[0] = metalv1alpha1.ServerStateAvailable
	testenv.Eventually(t, time.Minute, "Available once Off", states)
}
