package metal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func ctx() context.Context { return context.Background() }

// claimServer creates a claim naming the server; the claim controller binds it.
func claimServer(t *testing.T, server, claimName string, power metalv1alpha1.Power) *metalv1alpha1.ServerClaim {
	t.Helper()
	c := &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claimName},
		Spec:       metalv1alpha1.ServerClaimSpec{Power: power, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: server}},
	}
	if err := env.Client.Create(ctx(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitPower(t *testing.T, name string, want metalv1alpha1.PowerState, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, name+" power "+string(want), func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "gone"
		}
		return s.Status.PowerState == want, string(s.Status.PowerState)
	})
}

// A BMC becomes a Server that goes Initial -> Discovery -> Available: one PXE override, one power
// on, one power off, inventory in status, discovery objects cleaned up.
func TestDiscoveryToAvailable(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "disc")
	s := suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)

	if s.Spec.BMCRef == nil || s.Spec.BMCRef.Name != "disc" || s.Labels["test"] != "disc" {
		t.Errorf("server not linked to its BMC or labels not copied: %+v %v", s.Spec.BMCRef, s.Labels)
	}
	if !strings.EqualFold(s.Spec.SystemUUID, systemOf(b).UUID()) {
		t.Errorf("systemUUID %s, want %s", s.Spec.SystemUUID, systemOf(b).UUID())
	}
	waitPower(t, name, metalv1alpha1.PowerStateOff, 10*time.Second)
	s = suite.Server(env, name)
	if s.Status.Manufacturer == "" || len(s.Status.Processors) == 0 || s.Status.TotalSystemMemory == nil || len(s.Status.NetworkInterfaces) == 0 {
		t.Errorf("inventory missing from status: %+v", s.Status)
	}
	if s.Spec.BootConfigurationRef != nil {
		t.Errorf("discovery boot configuration still referenced: %+v", s.Spec.BootConfigurationRef)
	}
	testenv.Eventually(t, 5*time.Second, "discovery objects removed", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Namespace: "default", Name: discovery.ObjectName(name)}, &metalv1alpha1.ServerBootConfiguration{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if got := fmt.Sprint(suite.ResetTypes(fleet.BoxActions(b))); got != "[Boot:Pxe/Once On ForceOff]" {
		t.Errorf("BMC actions %s, want one PXE override, one power on, one power off", got)
	}
	bmcObj := &metalv1alpha1.BMC{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "disc"}, bmcObj); err != nil {
		t.Fatal(err)
	}
	ready := apimeta.FindStatusCondition(bmcObj.Status.Conditions, metalv1alpha1.ConditionReady)
	if bmcObj.Status.State != metalv1alpha1.BMCStateEnabled || ready == nil || ready.Reason != metalv1alpha1.ReasonConnected || bmcObj.Status.FirmwareVersion == "" {
		t.Errorf("BMC status: %+v", bmcObj.Status)
	}
	waitEvent(t, name, "Transition")
}

// Discovery does not boot a server whose round's boot configuration is in Error (nor, with an
// external boot provider, one not Ready yet): the box would PXE-boot nothing and only time out.
func TestDiscoveryWaitsForBootConfiguration(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := bmccontroller.ServerName("discwait", b.SystemIDs()[0])
	// The round's boot configuration exists already, and its provider reports Error: its
	// ignition Secret is missing.
	sbc := &metalv1alpha1.ServerBootConfiguration{
		ObjectMeta: metav1.ObjectMeta{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name)},
		Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: name}, Image: "img",
			IgnitionSecretRef: &corev1.LocalObjectReference{Name: "discwait-ignition"}},
	}
	if err := env.Client.Create(ctx(), sbc); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "boot configuration in Error", func() (bool, string) {
		got := &metalv1alpha1.ServerBootConfiguration{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(sbc), got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == metalv1alpha1.ServerBootConfigurationStateError, string(got.Status.State)
	})
	start := time.Now()
	fleet.RegisterBMC(t, b, "discwait")
	// An event says why discovery waits.
	waitEvent(t, name, "DiscoveryBootNotReady")
	time.Sleep(time.Second) // what a wrong boot would need to show
	if s := suite.Server(env, name); durableState(s) != "" && durableState(s) != string(metalv1alpha1.ServerStateInitial) {
		t.Fatalf("server went %s before its discovery boot configuration was Ready", durableState(s))
	}
	for _, r := range suite.Since(fleet.BoxActions(b), start) {
		if r.Action == redfish.ActionReset && r.ResetType == "On" || r.Action == redfish.ActionBootOverride && r.Boot.Target == "Pxe" {
			t.Fatalf("BMC action before the boot configuration was Ready: %+v", r)
		}
	}
	if err := env.Client.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testOpts.DiscoveryNamespace, Name: "discwait-ignition"}}); err != nil {
		t.Fatal(err)
	}
	// Ready reaches the server through its watch: discovery goes on without waiting out a retry.
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if got := fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(b), start))); !strings.HasPrefix(got, "[Boot:Pxe/Once On") {
		t.Errorf("BMC actions %s, want the PXE override and power on after Ready", got)
	}
}

// waitEvent fails the test unless an event with reason about the object named regarding
// arrives within 5s (events are written asynchronously, after the pass that records them).
func waitEvent(t *testing.T, regarding, reason string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "event "+reason+" for "+regarding, func() (bool, string) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx(), list); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Name == regarding && e.Reason == reason {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items))
	})
}

// A wiped status in Discovery, Available, Reserved (powered on), Maintenance and Parked is rebuilt
// from the durable state: no power action, no boot override, and a deleted wiped Server in
// Maintenance stays blocked.
func TestStatusWipeChangesNothing(t *testing.T) {
	t.Parallel()
	type box struct {
		state metalv1alpha1.ServerState
		bmc   *redfish.BMC
		name  string
	}
	boxes := []*box{{state: metalv1alpha1.ServerStateDiscovery}, {state: metalv1alpha1.ServerStateAvailable},
		{state: metalv1alpha1.ServerStateReserved}, {state: metalv1alpha1.ServerStateMaintenance}, {state: metalv1alpha1.ServerStateParked}}
	for i, bx := range boxes {
		bx.bmc = fleet.Take(t)
		if bx.state == metalv1alpha1.ServerStateDiscovery {
			fleet.IgnoreBoots(systemOf(bx.bmc).UUID())
		}
		bx.name = fleet.RegisterBMC(t, bx.bmc, fmt.Sprintf("wipe-%d", i))
	}
	for _, bx := range boxes {
		want := metalv1alpha1.ServerStateAvailable
		if bx.state == metalv1alpha1.ServerStateDiscovery {
			want = metalv1alpha1.ServerStateDiscovery
		}
		suite.WaitServerState(t, env, bx.name, want, 30*time.Second)
	}
	maint := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "wipe-maint"},
		Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: boxes[3].name}, Policy: metalv1alpha1.ServerMaintenancePolicyEnforced, ServerPower: metalv1alpha1.PowerOn}}
	for _, bx := range boxes {
		switch bx.state {
		case metalv1alpha1.ServerStateReserved:
			claimServer(t, bx.name, "wipe-claim", metalv1alpha1.PowerOn)
		case metalv1alpha1.ServerStateMaintenance:
			// Enforced on an unclaimed server: the maintenance controller sets the ref.
			if err := env.Client.Create(ctx(), maint); err != nil {
				t.Fatal(err)
			}
		case metalv1alpha1.ServerStateParked:
			annotate(t, bx.name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationPark)
		}
	}
	for _, bx := range boxes {
		suite.WaitServerState(t, env, bx.name, bx.state, 30*time.Second)
		if bx.state == metalv1alpha1.ServerStateReserved || bx.state == metalv1alpha1.ServerStateMaintenance || bx.state == metalv1alpha1.ServerStateDiscovery {
			waitPower(t, bx.name, metalv1alpha1.PowerStateOn, 10*time.Second)
		}
	}
	time.Sleep(500 * time.Millisecond) // let every power transition settle before the wipe

	wiped := time.Now()
	for _, bx := range boxes {
		suite.WipeStatus(t, env, bx.name)
	}
	for _, bx := range boxes {
		s := suite.WaitServerState(t, env, bx.name, bx.state, 10*time.Second)
		if bx.state != metalv1alpha1.ServerStateParked && (s.Status.PowerState == "" || len(s.Status.Processors) == 0) {
			t.Errorf("%s: status not rebuilt: %+v", bx.state, s.Status)
		}
	}
	time.Sleep(2 * time.Second) // room for a wrong action to show
	for _, bx := range boxes {
		if recs := suite.Since(fleet.BoxActions(bx.bmc), wiped); len(recs) != 0 {
			t.Errorf("%s: BMC actions after the wipe: %v", bx.state, suite.ResetTypes(recs))
		}
		if s := suite.Server(env, bx.name); durableState(s) != string(bx.state) {
			t.Errorf("%s: durable state became %s", bx.state, durableState(s))
		}
	}

	// Deleting the wiped server in Maintenance stays blocked while the maintenance exists.
	m := boxes[3]
	suite.WipeStatus(t, env, m.name)
	s := suite.Server(env, m.name)
	if err := env.Client.Delete(ctx(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "deletion blocked", func() (bool, string) {
		s := suite.Server(env, m.name)
		if s == nil {
			return false, "deleted!"
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionDeletionBlocked)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", s.Status.Conditions)
	})
	time.Sleep(time.Second)
	if suite.Server(env, m.name) == nil {
		t.Fatal("a server in maintenance was let go")
	}
	// Once the maintenance is gone, the server is powered off and released. (Its BMC then
	// creates a new Server of the same name, which starts discovery: look at the old one's UID
	// and at the actions before that new discovery.)
	oldUID := s.UID
	if err := env.Client.Delete(ctx(), maint); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "server released after maintenance ended", func() (bool, string) {
		sv := suite.Server(env, m.name)
		return sv == nil || sv.UID != oldUID, "still there"
	})
	var got []string
	for _, a := range suite.ResetTypes(suite.Since(fleet.BoxActions(m.bmc), wiped)) {
		if strings.HasPrefix(a, "Boot:") {
			break // the new Server's discovery
		}
		got = append(got, a)
	}
	if len(got) != 1 || got[0] != "ForceOff" {
		t.Errorf("deletion: BMC actions %v, want one power off", got)
	}
}

// A Server restored from a backup (metadata and spec, a claim ref) comes up Reserved with its
// power untouched; one migrated from the reference (status.state only) is adopted as it is.
func TestRestoreAndMigration(t *testing.T) {
	t.Parallel()
	restored, migrated := fleet.Take(t), fleet.Take(t)
	systemOf(restored).SetPowerState("On") // running its workload
	// Restored with its binding, as a backup of a bound claim has it.
	claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "restore-claim"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img",
			ServerRef: &corev1.LocalObjectReference{Name: bmccontroller.ServerName("restore", systemOf(restored).ID())}}}
	if err := env.Client.Create(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	newServer := func(b *redfish.BMC, bmcName string) *metalv1alpha1.Server {
		sys := systemOf(b)
		return &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: bmccontroller.ServerName(bmcName, sys.ID())},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(sys.UUID()), SystemURI: "/redfish/v1/Systems/" + sys.ID(),
				BMCRef: &corev1.LocalObjectReference{Name: bmcName}},
		}
	}
	rs := newServer(restored, "restore")
	rs.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "restore-claim"}
	if err := env.Client.Create(ctx(), rs); err != nil {
		t.Fatal(err)
	}
	// The migrated server carries the reference's status; ignore keeps us off it until it does.
	ms := newServer(migrated, "migrate")
	ms.Annotations = map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationIgnore}
	if err := env.Client.Create(ctx(), ms); err != nil {
		t.Fatal(err)
	}
	ms.Status.State = metalv1alpha1.ServerStateAvailable
	if err := testenv.WriteStatus(ctx(), env.Client, ms); err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.PatchMetadata(ctx(), env.Client, ms, func(o client.Object) {
		lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
	}); err != nil {
		t.Fatal(err)
	}
	fleet.RegisterBMC(t, restored, "restore")
	fleet.RegisterBMC(t, migrated, "migrate")

	suite.WaitServerState(t, env, rs.Name, metalv1alpha1.ServerStateReserved, 20*time.Second)
	waitPower(t, rs.Name, metalv1alpha1.PowerStateOn, 10*time.Second)
	suite.WaitServerState(t, env, ms.Name, metalv1alpha1.ServerStateAvailable, 20*time.Second)
	waitPower(t, ms.Name, metalv1alpha1.PowerStateOff, 10*time.Second)
	time.Sleep(time.Second)
	for _, b := range []*redfish.BMC{restored, migrated} {
		if recs := fleet.BoxActions(b); len(recs) != 0 {
			t.Errorf("BMC %d: actions %v, want none (no rediscovery, power untouched)", b.Index(), suite.ResetTypes(recs))
		}
	}
	waitEvent(t, rs.Name, "StateRecovered")
}

// Twenty servers go Initial -> Available -> Reserved -> Available; no reconcile pass writes its
// object twice (the manager's client counts), and each BMC sees exactly one action per step.
func TestClaimCycleOneWritePerPass(t *testing.T) {
	const n = 20
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = fleet.Take(t)
		names[i] = fleet.RegisterBMC(t, bmcs[i], fmt.Sprintf("cycle-%d", i))
	}
	parallel(n, func(i int) {
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateAvailable, 60*time.Second)
	})
	parallel(n, func(i int) { waitPower(t, names[i], metalv1alpha1.PowerStateOff, 20*time.Second) })
	claims := make([]*metalv1alpha1.ServerClaim, n)
	for i := range n {
		claims[i] = claimServer(t, names[i], fmt.Sprintf("cycle-%d", i), metalv1alpha1.PowerOn)
	}
	parallel(n, func(i int) {
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateReserved, 30*time.Second)
		waitPower(t, names[i], metalv1alpha1.PowerStateOn, 30*time.Second)
	})
	for i := range n {
		if err := env.Client.Delete(ctx(), claims[i]); err != nil {
			t.Fatal(err)
		}
	}
	parallel(n, func(i int) {
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateAvailable, 30*time.Second)
		waitPower(t, names[i], metalv1alpha1.PowerStateOff, 20*time.Second)
	})
	for i := range n {
		s := suite.Server(env, names[i])
		if s.Spec.ServerClaimRef != nil {
			t.Errorf("%s: claim ref not removed on Recycle", names[i])
		}
		if got := fmt.Sprint(suite.ResetTypes(fleet.BoxActions(bmcs[i]))); got != "[Boot:Pxe/Once On ForceOff Boot:Pxe/Once On GracefulShutdown]" {
			t.Errorf("%s: BMC actions %s", names[i], got)
			dumpEvents(t, names[i])
		}
	}
	if v := writes.Violations(); len(v) > 0 {
		t.Fatalf("passes that wrote their object twice:\n%s", strings.Join(v, "\n"))
	}
}

func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}
