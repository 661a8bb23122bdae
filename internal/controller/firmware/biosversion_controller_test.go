package firmware

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
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

// wipeStatus empties a BIOSVersion's status, as a restore or a careless script would.
func wipeStatus(t *testing.T, name string) {
	t.Helper()
	for range 20 {
		v := getVersion(name)
		if v == nil {
			return
		}
		v.Status = systemv1alpha1.BIOSVersionStatus{}
		if err := testenv.WriteStatus(ctx(), env.Client, v); err == nil {
			return
		}
	}
}

// Twenty upgrades while the manager is killed at random moments and statuses are wiped: each
// server is flashed exactly once and every upgrade completes.
func TestBIOSVersionSurvivesKillsAndWipes(t *testing.T) {
	const n = 20
	names, bmcs := availableServers(t, "biosv-kill", n)
	for _, b := range bmcs {
		b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(2500 * time.Millisecond)})
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	for i, name := range names {
		v := biosVersion(fmt.Sprintf("biosv-kill-%d", i), name, "3.0.0", fmt.Sprintf("http://fw.example/kill/bios-%d-3.0.0.bin", i))
		if err := env.Client.Create(ctx(), v); err != nil {
			t.Fatal(err)
		}
	}
	// Kill the manager at random moments of the upgrades, wiping statuses on the way.
	stop := make(chan struct{})
	chaos := make(chan int)
	go func() {
		kills := 0
		defer func() { chaos <- kills }()
		for kills < 8 {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rng.IntN(1200)) * time.Millisecond):
			}
			stopManager()
			for i := range n {
				if rng.IntN(3) == 0 {
					wipeStatus(t, fmt.Sprintf("biosv-kill-%d", i))
				}
			}
			if err := startManager(); err != nil {
				t.Errorf("restart: %v", err)
				return
			}
			kills++
			for i := range n {
				if rng.IntN(4) == 0 {
					wipeStatus(t, fmt.Sprintf("biosv-kill-%d", i))
				}
			}
		}
	}()
	for i := range n {
		waitVersionState(t, fmt.Sprintf("biosv-kill-%d", i), systemv1alpha1.VersionStateCompleted, 180*time.Second)
	}
	close(stop)
	t.Logf("manager killed %d times", <-chaos)
	for i, b := range bmcs {
		if got := simpleUpdates(b); got != 1 {
			t.Errorf("server %s: %d SimpleUpdates, want 1", names[i], got)
		}
		if got := b.Systems()[0].BIOSVersion(); got != "3.0.0" {
			t.Errorf("server %s runs BIOS %s", names[i], got)
		}
	}
}
