package firmware

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// waitPhase waits until the BIOSVersion's record is in phase want.
func waitPhase(t *testing.T, name string, want record.Phase, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, name+" in phase "+string(want), func() (bool, string) {
		v := getVersion(name)
		if v == nil {
			return false, "gone"
		}
		rec, _ := record.Parse(v.Annotations[record.Annotation])
		return rec.Phase == want, string(rec.Phase)
	})
}

// Deleting a BIOSVersion while its image is being written: the object stays until the flash
// ended and the restart it owes was carried out, only then is the box handed back; one flash.
func TestDeletingABIOSVersionMidFlash(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-del", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Second)})
	v := biosVersion("biosv-del", names[0], "8.0.0", "http://fw.example/bios-del-8.0.0.bin")
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, "biosv-del", record.PhaseTask, 60*time.Second)
	if err := env.Client.Delete(ctx(), getVersion("biosv-del")); err != nil {
		t.Fatal(err)
	}
	var goneAt time.Time
	testenv.Eventually(t, 60*time.Second, "the BIOSVersion gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: "biosv-del"}, &systemv1alpha1.BIOSVersion{})
		goneAt = time.Now()
		if s := suite.Server(env, names[0]); s != nil && s.Spec.ServerMaintenanceRef == nil && !apierrors.IsNotFound(err) {
			if got := restartsSince(b, firstSimpleUpdate(t, b)); len(got) == 0 {
				return true, "the server left its maintenance before its owed restart"
			}
		}
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	restarts := restartsSince(b, firstSimpleUpdate(t, b))
	if len(restarts) != 1 {
		t.Fatalf("restarts after the flash before the object went: %v, want one (events %s)", restarts, eventsOf("biosv-del"))
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	if got := b.Systems()[0].BIOSVersion(); got != "8.0.0" {
		t.Errorf("BIOS %s after the deleted upgrade's restart, want the flashed 8.0.0", got)
	}
	t.Logf("gone %s after the flash began", goneAt.Sub(firstSimpleUpdate(t, b)))
}

// Deleting a BIOSVersionSet mid-wave: no wave starts after it, the child under way finishes
// its flash and restart before it goes, nothing is flashed twice, and the set goes last.
func TestDeletingABIOSVersionSetMidFlash(t *testing.T) {
	names, bmcs := availableServers(t, "bvs-del", 3)
	for _, b := range bmcs {
		b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Second)})
	}
	labelServers(t, names, "rollout", "bvs-del")
	set := versionSet("bvs-del", "bvs-del", "8.1.0", "http://fw.example/bvs-del/bios-", &systemv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))})
	if err := env.Client.Create(ctx(), set); err != nil {
		t.Fatal(err)
	}
	var first string
	testenv.Eventually(t, 60*time.Second, "the first wave flashing", func() (bool, string) {
		for _, v := range children(t, "bvs-del") {
			if rec, _ := record.Parse(v.Annotations[record.Annotation]); rec.Phase == record.PhaseTask {
				first = v.Name
				return true, ""
			}
		}
		return false, fmt.Sprint(len(children(t, "bvs-del")), " children")
	})
	s := &systemv1alpha1.BIOSVersionSet{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bvs-del"}, s); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the set and its objects gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: "bvs-del"}, &systemv1alpha1.BIOSVersionSet{})
		left := children(t, "bvs-del")
		return apierrors.IsNotFound(err) && len(left) == 0, fmt.Sprintf("set: %v; %d objects left", err, len(left))
	})
	flashes := 0
	for _, b := range bmcs {
		flashes += simpleUpdates(b)
	}
	if flashes != 1 {
		t.Errorf("%d flashes over the set's servers after it was deleted in its first wave (%s), want 1", flashes, first)
	}
	for _, name := range names {
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	}
}

// Deleting a BIOSVersion mid-flash while its BMC answers nothing but errors: whether the image
// is written is unknown, so the object stays, the box stays in maintenance and the object says
// why; once the BMC answers again the flash is seen through as if nothing happened (one flash,
// its one restart) and only then is the box handed back.
func TestDeletingABIOSVersionMidFlashWhileItsBMCIsDead(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-deaddel", 1)
	b := bmcs[0]
	flashing := redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Second)}
	b.SetFaults(flashing)
	v := biosVersion("biosv-deaddel", names[0], "8.1.0", "http://fw.example/bios-deaddel-8.1.0.bin")
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, "biosv-deaddel", record.PhaseTask, 60*time.Second)
	dead := flashing
	dead.Status = 503
	b.SetFaults(dead)
	if err := env.Client.Delete(ctx(), getVersion("biosv-deaddel")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the deleted BIOSVersion reporting its BMC unavailable", func() (bool, string) {
		v := getVersion("biosv-deaddel")
		if v == nil {
			return true, "gone"
		}
		c := meta.FindStatusCondition(v.Status.Conditions, systemv1alpha1.ConditionUpgraded)
		return c != nil && c.Reason == systemv1alpha1.ReasonBMCUnavailable && c.ObservedGeneration == v.Generation, fmt.Sprintf("%+v", c)
	})
	v = getVersion("biosv-deaddel")
	if v == nil || !controllerutil.ContainsFinalizer(v, work.Finalizer) {
		t.Fatalf("the BIOSVersion went while its flash's end could not be seen")
	}
	if s := suite.Server(env, names[0]); s == nil || s.Spec.ServerMaintenanceRef == nil {
		t.Fatalf("the server left its maintenance while its flash's end could not be seen")
	}
	b.SetFaults(flashing)
	testenv.Eventually(t, 60*time.Second, "the BIOSVersion gone once its BMC answers", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: "biosv-deaddel"}, &systemv1alpha1.BIOSVersion{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if restarts := restartsSince(b, firstSimpleUpdate(t, b)); len(restarts) != 1 {
		t.Fatalf("restarts after the flash: %v, want one (events %s)", restarts, eventsOf("biosv-deaddel"))
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	if got := b.Systems()[0].BIOSVersion(); got != "8.1.0" {
		t.Errorf("BIOS %s after the deleted upgrade's restart, want the flashed 8.1.0", got)
	}
}
