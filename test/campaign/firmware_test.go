package campaign

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// BIOS upgrades while the leading manager process is SIGKILLed at random moments and statuses
// are wiped: every box is flashed exactly once, and every upgrade completes.
func TestFirmwareUpgradesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a fleet, two manager processes, twenty upgrades")
	}
	const n = 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	sch := &schedule{Seed: seed, BMCs: n, PowerDelay: 200 * time.Millisecond, Endpoint: make([]bool, n), SlowBMC: -1}
	w, err := newWorld(t, sch)
	if w != nil {
		defer w.close()
	}
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if !featuresOf(w.slots[0].bin).firmware {
		t.Skip("the manager binary has no firmware controllers")
	}
	if err := w.waitAvailable(120 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i, b := range w.fleet.BMCs() {
		f := w.faults[i]
		f.UpdateDuration = redfish.Duration(time.Duration(4000+rng.IntN(4000)) * time.Millisecond)
		b.SetFaults(f)
	}
	name := func(i int) string { return fmt.Sprintf("kill-bios-%d", i) }
	for i := range n {
		v := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: name(i)}, Spec: systemv1alpha1.BIOSVersionSpec{
			ServerRef: &corev1.LocalObjectReference{Name: w.serverName(i)},
			BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: "5.5.5",
				Image: systemv1alpha1.ImageSpec{URI: fmt.Sprintf("http://fw.example/campaign/%d/bios-5.5.5.bin", i)}}}}
		if err := w.c.Create(w.ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	completed := func() (int, string) {
		done, last := 0, ""
		for i := range n {
			v := &systemv1alpha1.BIOSVersion{}
			if err := w.c.Get(w.ctx, client.ObjectKey{Name: name(i)}, v); err != nil {
				return done, err.Error()
			}
			if record.State(v.Annotations) == "Completed" && v.Status.State == systemv1alpha1.VersionStateCompleted {
				done++
			} else {
				last = fmt.Sprintf("%s: %s %v", v.Name, v.Annotations[record.Annotation], v.Status.Conditions)
			}
		}
		return done, last
	}
	// At least three kills, the first ones while flashes run (each takes 4-8 s).
	kills := 0
	for kills < 6 {
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond) // a random moment, not a wait
		if done, _ := completed(); done == n && kills >= 3 {
			break
		}
		leader := w.leader()
		if leader == nil {
			continue
		}
		leader.stop(syscall.SIGKILL)
		for i := range n {
			if rng.IntN(3) == 0 {
				v := &systemv1alpha1.BIOSVersion{}
				if w.c.Get(w.ctx, client.ObjectKey{Name: name(i)}, v) == nil {
					v.Status = systemv1alpha1.BIOSVersionStatus{}
					_ = w.c.Status().Update(w.ctx, v)
				}
			}
		}
		leader.start()
		kills++
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done, last := completed()
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d upgrades completed after %d SIGKILLs; e.g. %s", done, n, kills, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d upgrades completed through %d SIGKILLs of the leader", n, kills)
	flashes := map[int]int{}
	for _, r := range w.fleet.Records() {
		if r.Action == redfish.ActionSimpleUpdate {
			flashes[r.BMC]++
		}
	}
	for i, b := range w.fleet.BMCs() {
		if flashes[i] != 1 || b.Systems()[0].BIOSVersion() != "5.5.5" {
			t.Errorf("%s: %d flashes, BIOS %s; want one flash to 5.5.5", w.serverName(i), flashes[i], b.Systems()[0].BIOSVersion())
		}
	}
	// The upgrades hand their servers back before the world is torn down.
	deadline = time.Now().Add(time.Minute)
	for {
		l := &maintenancev1alpha1.ServerMaintenanceList{}
		if err := w.c.List(w.ctx, l); err == nil && len(l.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("maintenances not released")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
