package metal

import (
	"fmt"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// The regression tests of issue 14's holes: each is a path a careful user can take.

// claimedOn registers a BMC, waits for its server to be Available, claims it powered on and
// waits until it is Reserved and On.
func claimedOn(t *testing.T, prefix string) (string, *redfish.BMC, *metalv1alpha1.ServerClaim) {
	t.Helper()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, prefix)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	c := claimServer(t, name, prefix+"-claim", metalv1alpha1.PowerOn)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 15*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
	return name, b, c
}

func annotate(t *testing.T, name, key, value string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "annotate "+name, func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) { lifecycle.SetAnnotation(o, key, value) })
		return err == nil, fmt.Sprint(err)
	})
}

func countResets(recs []redfish.Record, resetType string) int {
	n := 0
	for _, r := range recs {
		if r.Action == redfish.ActionReset && r.ResetType == resetType {
			n++
		}
	}
	return n
}

// `kubectl delete -f` of a manifest with a BMC and its BMCSecret: the claimed server loses its
// BMC access while being deleted, and must stay held, powered and unguarded by nobody.
func TestBMCDeletedWithItsSecretKeepsClaimedServer(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "delbmc")
	start := time.Now()
	for _, o := range []client.Object{
		&metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "delbmc"}},
		&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "delbmc"}},
	} {
		if err := env.Client.Delete(ctx(), o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 15*time.Second, "deletion of the claimed server blocked", func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "server gone"
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionDeletionBlocked)
		return !s.DeletionTimestamp.IsZero() && c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", s.Status.Conditions)
	})
	time.Sleep(2 * time.Second) // room for a wrong release to show
	s := suite.Server(env, name)
	if s == nil || !hasFinalizer(s, server.Finalizer) {
		t.Fatalf("claimed server let go after its BMC and BMCSecret were deleted: %+v", s)
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions on the claimed server: %v", suite.ResetTypes(recs))
	}
	// The claim goes: nothing holds the server any more, and without a BMC it is let go.
	if err := env.Client.Delete(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "server released once unclaimed", func() (bool, string) {
		return suite.Server(env, name) == nil, "still there"
	})
}

func hasFinalizer(o client.Object, f string) bool {
	for _, x := range o.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

// A hard restart asked for while other writers keep the Server's resourceVersion moving (a
// conflict on every write that follows the action): the box is restarted exactly once.
func TestOperationUnderWriteConflictsRunsOnce(t *testing.T) {
	t.Parallel()
	name, b, _ := claimedOn(t, "opconflict")
	time.Sleep(500 * time.Millisecond) // the power-on settles
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(300 * time.Millisecond)})
	defer b.ClearFaults()
	start := time.Now()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another writer: a label every 20 ms, without a lock
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			s := suite.Server(env, name)
			if s == nil {
				continue
			}
			base := s.DeepCopy()
			s.Labels = map[string]string{"writer": fmt.Sprint(i)}
			_ = env.Client.Patch(ctx(), s, client.MergeFrom(base))
		}
	}()
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationHardRestartServer)
	time.Sleep(3 * time.Second) // the other writer's window
	close(stop)
	wg.Wait()
	testenv.Eventually(t, 20*time.Second, "operation carried out and reported", func() (bool, string) {
		s := suite.Server(env, name)
		_, asked := s.Annotations[metalv1alpha1.OperationAnnotation]
		_, owed := s.Annotations[intent.Annotation]
		return !asked && !owed && countResets(suite.Since(fleet.BoxActions(b), start), "ForceRestart") > 0, fmt.Sprint(s.Annotations)
	})
	b.ClearFaults()
	waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
	time.Sleep(time.Second) // room for a repeat to show
	recs := suite.Since(fleet.BoxActions(b), start)
	if n := countResets(recs, "ForceRestart"); n != 1 {
		t.Errorf("hard restart issued %d times, want once: %v", n, suite.ResetTypes(recs))
	}
	for _, r := range recs {
		if r.Action == redfish.ActionReset && r.ResetType != "ForceRestart" {
			t.Errorf("unexpected action on the claimed server: %v", suite.ResetTypes(recs))
			break
		}
	}
}

// Parking a claimed, running server and unparking it returns it to Reserved: no power-off, no
// boot override, no rediscovery.
func TestUnparkKeepsClaimedServerReserved(t *testing.T) {
	t.Parallel()
	name, b, _ := claimedOn(t, "unpark")
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationPark)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateParked, 10*time.Second)
	start := time.Now()
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationUnpark)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 10*time.Second)
	time.Sleep(2 * time.Second) // room for a wrong action to show
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions on unpark: %v", suite.ResetTypes(recs))
	}
	s := suite.Server(env, name)
	if durableState(s) != string(metalv1alpha1.ServerStateReserved) || s.Status.PowerState != metalv1alpha1.PowerStateOn {
		t.Errorf("after unpark: state %s, power %s", durableState(s), s.Status.PowerState)
	}
}

// A wiped status on a BMC whose inventory walk outlasts the pass (every answer slow, as on a big
// machine with many DIMMs and drives): state and power come back at once, inventory after.
func TestWipedStatusWithSlowInventoryReportsStateFirst(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "slowinv")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOff, 10*time.Second)
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(250 * time.Millisecond)})
	defer b.ClearFaults()
	suite.WipeStatus(t, env, name)
	testenv.Eventually(t, 10*time.Second, "state and power rebuilt", func() (bool, string) {
		s := suite.Server(env, name)
		return s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff,
			fmt.Sprintf("state %q power %q", s.Status.State, s.Status.PowerState)
	})
	testenv.Eventually(t, 40*time.Second, "inventory rebuilt in a later pass", func() (bool, string) {
		s := suite.Server(env, name)
		return len(s.Status.Processors) > 0 && s.Status.Manufacturer != "", fmt.Sprintf("%d processors", len(s.Status.Processors))
	})
}

// A Server being deleted that does not carry our finalizer (another controller's holds it, and
// its state annotation was lost): the pass records the state and does not try to add a
// finalizer the API server refuses, which would fail every retry.
func TestDeletingServerWithoutOurFinalizerDoesNotLoop(t *testing.T) {
	t.Parallel()
	name := "nofinalizer"
	s := &metalv1alpha1.Server{
		// Ignored until it is deleting, so that our finalizer never got on it.
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"test.metalhub.io/hold"},
			Annotations: map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationIgnore}},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: "00000000-0000-0000-0000-00000000f1a1",
			ServerClaimRef: &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "nofinalizer-claim"}},
	}
	if err := env.Client.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx(), s); err != nil {
		t.Fatal(err)
	}
	s = suite.Server(env, name)
	if err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) {
		lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "derived state recorded on the deleting server", func() (bool, string) {
		s := suite.Server(env, name)
		return s != nil && durableState(s) == string(metalv1alpha1.ServerStateReserved), fmt.Sprintf("%+v", s.ObjectMeta)
	})
	s = suite.Server(env, name)
	if hasFinalizer(s, server.Finalizer) {
		t.Errorf("finalizer added to a deleting object: %v", s.Finalizers)
	}
	// The manager acts on it again (the ignore annotation is gone): patch, not Update.
	patch := client.MergeFrom(s.DeepCopy())
	s.Finalizers = nil
	if err := env.Client.Patch(ctx(), s, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "server gone", func() (bool, string) { return suite.Server(env, name) == nil, "still there" })
}

// An approved maintenance with a boot configuration boots the server into it once it is Ready:
// a one-time PXE override and one restart of the running box, not repeated.
func TestMaintenanceBootsItsBootConfigurationOnce(t *testing.T) {
	t.Parallel()
	name, b, _ := claimedOn(t, "mboot")
	time.Sleep(500 * time.Millisecond) // the power-on settles
	start := time.Now()
	m := metaltest.NewMaintenance("default", "mboot", name, metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.PowerOn, 0)
	m.Spec.ServerBootConfigurationTemplate = &metalv1alpha1.ServerBootConfigurationTemplate{
		Name: "mboot-boot", Spec: metalv1alpha1.ServerBootConfigurationSpec{Image: "firmware-updater:1"}}
	if err := env.Client.Create(ctx(), m); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, "default", "mboot", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 15*time.Second)
	testenv.Eventually(t, 15*time.Second, "booted into the maintenance boot configuration", func() (bool, string) {
		recs := suite.Since(fleet.BoxActions(b), start)
		return countResets(recs, "ForceRestart") == 1, fmt.Sprint(suite.ResetTypes(recs))
	})
	waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
	time.Sleep(2 * time.Second) // room for a repeat to show
	got := suite.ResetTypes(suite.Since(fleet.BoxActions(b), start))
	if fmt.Sprint(got) != "[Boot:Pxe/Once ForceRestart]" {
		t.Errorf("maintenance boot: BMC actions %v, want one PXE override and one restart", got)
	}
	deleteMaintenance(t, "default", "mboot")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 15*time.Second)
}

// A BMC's graceful-restart-bmc resets the BMC itself once; rotate-credentials sets a new
// password on the BMC (AccountService) and in its BMCSecret, and the BMC and its server stay
// reachable; an operation a BMC has no use for is refused with a Warning and removed.
func TestBMCOperationsCarriedOutOrRefused(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "bmcop")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	start := time.Now()
	setBMCAnnotation := func(value string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, "annotate BMC", func() (bool, string) {
			obj := &metalv1alpha1.BMC{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcop"}, obj); err != nil {
				return false, err.Error()
			}
			err := lifecycle.PatchMetadata(ctx(), env.Client, obj, func(o client.Object) {
				lifecycle.SetAnnotation(o, metalv1alpha1.OperationAnnotation, value)
			})
			return err == nil, fmt.Sprint(err)
		})
	}
	settled := func() {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, "BMC operation done", func() (bool, string) {
			obj := &metalv1alpha1.BMC{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcop"}, obj); err != nil {
				return false, err.Error()
			}
			_, asked := obj.Annotations[metalv1alpha1.OperationAnnotation]
			_, owed := obj.Annotations[intent.Annotation]
			return !asked && !owed, fmt.Sprint(obj.Annotations)
		})
	}
	setBMCAnnotation(metalv1alpha1.OperationGracefulRestartBMC)
	settled()
	waitEvent(t, "bmcop", metalv1alpha1.ReasonOperation)
	_, oldPass := b.Credentials()
	setBMCAnnotation(metalv1alpha1.OperationRotateCredentials)
	settled()
	waitEvent(t, "bmcop", metalv1alpha1.ReasonRotated)
	sec := &metalv1alpha1.BMCSecret{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcop"}, sec); err != nil {
		t.Fatal(err)
	}
	newPass, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
	if _, onBMC := b.Credentials(); newPass == oldPass || newPass != onBMC {
		t.Fatalf("after the rotation the BMC's password is %q, the BMCSecret's %q (was %q)", onBMC, newPass, oldPass)
	}
	if _, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey); pending {
		t.Error("the pending password outlived the rotation")
	}
	setBMCAnnotation(metalv1alpha1.OperationPowerCycleServer) // a server's, not a BMC's
	settled()
	waitEvent(t, "bmcop", metalv1alpha1.ReasonUnsupportedOperation)
	// Still reachable with the new password: the server is managed as before.
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 10*time.Second)
	editServer(t, name, func(s *metalv1alpha1.Server) { s.Spec.IndicatorLED = metalv1alpha1.IndicatorLEDLit })
	testenv.Eventually(t, 15*time.Second, "the LED lit through the new password", func() (bool, string) {
		got := bootActions(suite.Since(fleet.BoxActions(b), start))
		return fmt.Sprint(got) == "[ManagerReset:GracefulRestart AccountPassword: IndicatorLED:]", fmt.Sprint(got)
	})
}

// A claim deleted while its server is parked, or held by a maintenance, lets go: neither powers
// the box off for it. The box is powered off once it is handed back, unclaimed.
func TestClaimDeletedWhileServerParkedLetsGo(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "parkdel")
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationPark)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateParked, 10*time.Second)
	start := time.Now()
	if err := env.Client.Delete(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, "default", claim.Name, 15*time.Second)
	if s := suite.Server(env, name); s.Spec.ServerClaimRef != nil || durableState(s) != string(metalv1alpha1.ServerStateParked) {
		t.Fatalf("after the claim went: claim ref %v, state %s", s.Spec.ServerClaimRef, durableState(s))
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions on a parked server: %v", suite.ResetTypes(recs))
	}
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationUnpark)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 20*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOff, 15*time.Second)
}

// Campaign seed 60: park (and retry) are lifecycle transitions and need no BMC; a server whose
// BMC hangs is parked at once instead of when the BMC answers again.
func TestParkNeedsNoBMC(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "parkdead")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	b.SetFaults(redfish.Faults{Hang: true})
	defer b.ClearFaults()
	poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
	testenv.Eventually(t, 15*time.Second, "server reports its BMC not ready", func() (bool, string) {
		c := apimeta.FindStatusCondition(suite.Server(env, name).Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprint(c)
	})
	start := time.Now()
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationPark)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateParked, 5*time.Second)
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions for a park: %v", suite.ResetTypes(recs))
	}
}
