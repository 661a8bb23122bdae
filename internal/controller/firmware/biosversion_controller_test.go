package firmware

import (
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// A BIOSVersion on an unclaimed server: maintenance, one SimpleUpdate, its task followed, one
// restart, the version read back, Completed, and the server handed back.
func TestBIOSVersionUnclaimed(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-one", 1)
	const image = "http://fw.example/bios-one-2.0.0.bin"
	v := biosVersion("biosv-one", names[0], "2.0.0", image)
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	v = waitVersionState(t, "biosv-one", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	if got := bmcs[0].Systems()[0].BIOSVersion(); got != "2.0.0" {
		t.Errorf("BIOS %s, want 2.0.0", got)
	}
	if n := simpleUpdates(bmcs[0]); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	if v.Status.UpgradeTask == nil || v.Status.UpgradeTask.URI == "" || v.Status.CurrentVersion != "2.0.0" {
		t.Errorf("status %+v", v.Status)
	}
	if v.Spec.ServerMaintenanceRef == nil {
		t.Fatal("no maintenance named")
	}
	waitState(t, names[0], metalv1alpha1.ServerStateAvailable, 30*time.Second)
}
