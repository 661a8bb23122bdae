package firmware

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// restartsSince counts the resets that start or restart b's system after t (a power-off to hand
// the box back is not one a tenant sees as a restart).
func restartsSince(b *redfish.BMC, t time.Time) []string {
	var out []string
	for _, r := range fleet.RecordsOf(b) {
		if r.Action != redfish.ActionReset || r.Time.Before(t) {
			continue
		}
		switch r.ResetType {
		case "ForceOff", "GracefulShutdown", "PushPowerButton", "Nmi":
			continue
		}
		out = append(out, r.ResetType)
	}
	return out
}

func firstSimpleUpdate(t *testing.T, b *redfish.BMC) time.Time {
	t.Helper()
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionSimpleUpdate {
			return r.Time
		}
	}
	t.Fatal("no SimpleUpdate recorded")
	return time.Time{}
}

// A BMC that accepts the image, completes its task, takes the restart and changes nothing (the
// version never shows): one SimpleUpdate, one restart, and the object Failed naming what it
// read; the restart the BMC accepted is not asked again.
func TestBIOSVersionThatNeverShowsFailsAfterOneRestart(t *testing.T) {
	t.Parallel() // waits out BMC timings on BMCs of its own (suite_test.go)
	names, bmcs := availableServers(t, "biosv-inert", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), UpdateChangesNothing: true})
	before := b.Systems()[0].BIOSVersion()
	if err := env.Client.Create(ctx(), biosVersion("biosv-inert", names[0], "7.0.0", "http://fw.example/bios-inert-7.0.0.bin")); err != nil {
		t.Fatal(err)
	}
	v := waitVersionState(t, "biosv-inert", systemv1alpha1.VersionStateFailed, 90*time.Second)
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	if got := restartsSince(b, firstSimpleUpdate(t, b)); len(got) > 1 {
		t.Errorf("restarts after the flash: %v, want at most one", got)
	}
	rec, _ := record.Parse(v.Annotations[record.Annotation])
	if !strings.Contains(rec.Message, before) || !strings.Contains(rec.Message, "7.0.0") {
		t.Errorf("the failure does not say what was read (%q) and wanted: %q", before, rec.Message)
	}
}

// A SimpleUpdate whose answer is lost (the BMC took it, then answered 500) on a BMC whose tasks
// carry no payload: nothing in the task list rules the running task out, so it is never sent
// again; the step follows the task and completes, or stays uncertain, with one flash.
func TestBIOSVersionLostAnswerWithoutPayloadFlashesOnce(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-lost", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Second), TasksWithoutPayload: true, ErrorAfterEffect: 500})
	if err := env.Client.Create(ctx(), biosVersion("biosv-lost", names[0], "7.1.0", "http://fw.example/bios-lost-7.1.0.bin")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the SimpleUpdate sent", func() (bool, string) {
		return simpleUpdates(b) > 0, ""
	})
	// The answer was lost; the restart that follows should be answered.
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Second), TasksWithoutPayload: true})
	testenv.Eventually(t, 90*time.Second, "the upgrade completed or uncertain", func() (bool, string) {
		v := getVersion("biosv-lost")
		if v.Status.State == systemv1alpha1.VersionStateCompleted {
			return true, ""
		}
		c := meta.FindStatusCondition(v.Status.Conditions, systemv1alpha1.ConditionUpgraded)
		return c != nil && c.Reason == systemv1alpha1.ReasonOutcomeUnknown, fmt.Sprintf("state %s, %v; events %s", v.Status.State, v.Status.Conditions, eventsOf("biosv-lost"))
	})
	if n := simpleUpdates(b); n != 1 {
		t.Fatalf("SimpleUpdates: %d, want 1; events %s", n, eventsOf("biosv-lost"))
	}
}

// A BMC that answers an accepted update 200 without a task: the restart waits until the flash is
// seen done (its task in the TaskService), never while the BMC may still be writing flash.
func TestBIOSVersionAnsweredWithoutATaskWaitsForTheFlash(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-notask", 1)
	b := bmcs[0]
	const flash = 4 * time.Second
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(flash), UpdateAnswersWithoutTask: true})
	if err := env.Client.Create(ctx(), biosVersion("biosv-notask", names[0], "7.2.0", "http://fw.example/bios-notask-7.2.0.bin")); err != nil {
		t.Fatal(err)
	}
	waitVersionState(t, "biosv-notask", systemv1alpha1.VersionStateCompleted, 90*time.Second)
	sent := firstSimpleUpdate(t, b)
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionReset && r.Time.After(sent) && r.Time.Before(sent.Add(flash)) {
			t.Fatalf("restart %s at +%s, while the flash ran", r.ResetType, r.Time.Sub(sent))
		}
	}
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
}

// A record rolled back to before the flash (a restore from a backup made while the step awaited
// its maintenance) while the BMC runs that flash: the task that names the image is followed,
// never a second SimpleUpdate.
func TestBIOSVersionRestoredFromBeforeItsFlashIsNotFlashedAgain(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-restored", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(5 * time.Second)})
	if err := env.Client.Create(ctx(), biosVersion("biosv-restored", names[0], "7.3.0", "http://fw.example/bios-restored-7.3.0.bin")); err != nil {
		t.Fatal(err)
	}
	var rec record.Record
	testenv.Eventually(t, 60*time.Second, "the flash's task followed", func() (bool, string) {
		v := getVersion("biosv-restored")
		rec, _ = record.Parse(v.Annotations[record.Annotation])
		return rec.Phase == record.PhaseTask, v.Annotations[record.Annotation]
	})
	back := record.Record{Phase: record.PhaseMaintenance, For: rec.For, Version: rec.Version, Image: rec.Image, Attempt: rec.Attempt, At: rec.At - 2}
	v := getVersion("biosv-restored")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, record.Annotation, back.String())
	if err := env.Client.Patch(ctx(), v, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitVersionState(t, "biosv-restored", systemv1alpha1.VersionStateCompleted, 90*time.Second)
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1; events %s", n, eventsOf("biosv-restored"))
	}
}

// A BMC that runs another update of the BIOS (by hand, a vendor tool, or this step's own flash
// that the record no longer knows) answers the flash 409: the step waits for it, the box kept in
// maintenance and the attempt not failed, then sends its image once.
func TestBIOSVersionWaitsForABMCBusyWithAnotherUpdate(t *testing.T) {
	t.Parallel() // waits out BMC timings on BMCs of its own (suite_test.go)
	names, bmcs := availableServers(t, "biosv-busy", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(6 * time.Second)})
	const ours = "http://fw.example/bios-busy-7.4.0.bin"
	updateByHand(t, b, "http://fw.example/by-hand-6.9.0.bin")
	if err := env.Client.Create(ctx(), biosVersion("biosv-busy", names[0], "7.4.0", ours)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the step waiting for the other update", func() (bool, string) {
		v := getVersion("biosv-busy")
		c := meta.FindStatusCondition(v.Status.Conditions, systemv1alpha1.ConditionUpgraded)
		return c != nil && c.Reason == systemv1alpha1.ReasonBMCBusy, fmt.Sprintf("state %s, %v; events %s", v.Status.State, v.Status.Conditions, eventsOf("biosv-busy"))
	})
	if s := (&metalv1alpha1.Server{}); env.Client.Get(ctx(), client.ObjectKey{Name: names[0]}, s) != nil || s.Status.State != metalv1alpha1.ServerStateMaintenance {
		t.Fatalf("the box was handed back while the BMC flashed it: %s", s.Status.State)
	}
	waitVersionState(t, "biosv-busy", systemv1alpha1.VersionStateCompleted, 90*time.Second)
	sent := 0
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionSimpleUpdate && r.Image == ours {
			sent++
		}
	}
	if sent != 1 || b.Systems()[0].BIOSVersion() != "7.4.0" {
		t.Errorf("%d flashes of the step's image, BIOS %s; want one, 7.4.0; events %s", sent, b.Systems()[0].BIOSVersion(), eventsOf("biosv-busy"))
	}
}

// updateByHand starts a SimpleUpdate of image on b as someone else (a person, the vendor's tool).
func updateByHand(t *testing.T, b *redfish.BMC, image string) {
	t.Helper()
	body := strings.NewReader(fmt.Sprintf(`{"ImageURI":%q}`, image))
	req, err := http.NewRequest(http.MethodPost, b.URL()+"/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", body)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(b.Credentials())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the update by hand: %s", resp.Status)
	}
}

// The wait for another update is bounded: one that outlasts --firmware-verify-timeout fails the
// attempt (with the default one attempt, the BIOSVersion), saying so, and the step's image is
// never sent to a BMC that is still busy.
func TestBIOSVersionGivesUpOnAnotherUpdateThatOutlastsTheVerifyTimeout(t *testing.T) {
	t.Parallel() // waits out BMC timings on BMCs of its own (suite_test.go)
	names, bmcs := availableServers(t, "biosv-busylong", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(3 * time.Minute)})
	const ours = "http://fw.example/bios-busylong-7.5.0.bin"
	updateByHand(t, b, "http://fw.example/by-hand-long-6.9.0.bin")
	if err := env.Client.Create(ctx(), biosVersion("biosv-busylong", names[0], "7.5.0", ours)); err != nil {
		t.Fatal(err)
	}
	v := waitVersionState(t, "biosv-busylong", systemv1alpha1.VersionStateFailed, 90*time.Second)
	rec, _ := record.Parse(v.Annotations[record.Annotation])
	if !strings.Contains(rec.Message, "another update for longer than") {
		t.Errorf("the failure does not say the BMC stayed busy: %q", rec.Message)
	}
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionSimpleUpdate && r.Image == ours {
			t.Errorf("the step's image went to a busy BMC at %s", r.Time)
		}
	}
}
