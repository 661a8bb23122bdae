package bmc_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// waitTask follows a task the way a controller does: one read per look, never blocking.
func waitTask(t *testing.T, c bmc.BMC, uri string) *bmc.TaskStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Task(context.Background(), uri)
		if err == nil && st.Done() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not done: %+v %v", uri, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A BIOS image flashed through SimpleUpdate: a task that takes time, the version staged until
// the system's next reset, then reported.
func TestBIOSUpdate(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(300 * time.Millisecond)})
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	before := b.System(id).BIOSVersion()
	task, err := c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: "http://fw.example/bios-9.9.9.bin", SystemID: id})
	if err != nil || task == "" {
		t.Fatalf("simple update: %q %v", task, err)
	}
	if st, err := c.Task(ctx, task); err != nil || st.Done() || st.RetryAfter != time.Second {
		t.Fatalf("task at once (running, Retry-After 1s): %+v %v", st, err)
	}
	if st := waitTask(t, c, task); st.Failed() {
		t.Fatalf("task failed: %+v", st)
	}
	fw, err := c.FirmwareInventory(ctx)
	if err != nil || len(fw) != 2 {
		t.Fatalf("inventory %+v %v", fw, err)
	}
	if v := b.System(id).BIOSVersion(); v != before {
		t.Fatalf("BIOS %s before the reset", v)
	}
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, id, bmc.PowerStateOn)
	if v := b.System(id).BIOSVersion(); v != "9.9.9" {
		t.Fatalf("BIOS %s after the reset, want 9.9.9", v)
	}
	recs := e.Records()
	if len(recs) != 2 || recs[0].Action != redfish.ActionSimpleUpdate || recs[0].Device != "BIOS" {
		t.Fatalf("recorded %+v", recs)
	}
}

// A BMC image: the BMC answers nothing while it reboots, then reports the new version; a
// failing update ends in Exception and changes nothing.
func TestBMCUpdateAndFailure(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{RequestTimeout: time.Second})
	ctx := context.Background()
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(100 * time.Millisecond), UpdateFails: true})
	c := get(t, p, endpoint(b))
	before := b.FirmwareVersion()
	task, err := c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: "https://fw.example/bmc-7.1.0.bin"})
	if err != nil {
		t.Fatal(err)
	}
	if st := waitTask(t, c, task); !st.Failed() {
		t.Fatalf("failing update: %+v", st)
	}
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(100 * time.Millisecond), BMCRebootDuration: redfish.Duration(time.Second)})
	if task, err = c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: "https://fw.example/bmc-7.1.0.bin"}); err != nil {
		t.Fatal(err)
	}
	if b.FirmwareVersion() != before {
		t.Fatal("version changed before the update ran")
	}
	deadline := time.Now().Add(10 * time.Second)
	sawDown := false
	for b.FirmwareVersion() != "7.1.0" {
		if _, err := c.Task(ctx, task); err != nil {
			sawDown = true
		}
		if time.Now().After(deadline) {
			t.Fatal("BMC version never changed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !sawDown {
		t.Error("the BMC answered throughout its reboot")
	}
	var fw []bmc.Firmware
	for { // the client holds back a BMC that just failed, for a moment
		if fw, err = c.FirmwareInventory(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reboot: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fw[0].ID != "BMC" || fw[0].Version != "7.1.0" {
		t.Fatalf("inventory %+v", fw)
	}
}

// BIOS attributes are staged in the settings object and take effect at the next reset; an
// attribute the system does not have is refused before anything is sent.
func TestBiosAttributes(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	if err := c.SetBiosAttributes(ctx, id, map[string]any{"NoSuchKnob": "On"}); bmc.ReasonOf(err) != bmc.ReasonInvalidConfig {
		t.Fatalf("unknown attribute: %v", err)
	}
	if len(e.Records()) != 0 {
		t.Fatal("an unknown attribute was sent")
	}
	if err := c.SetBiosAttributes(ctx, id, map[string]any{"SriovGlobalEnable": "Enabled"}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Bios(ctx, id)
	if err != nil || st.Attributes["SriovGlobalEnable"] != "Disabled" || st.Pending["SriovGlobalEnable"] != "Enabled" {
		t.Fatalf("before the reset: %+v %v", st, err)
	}
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, id, bmc.PowerStateOn)
	st, err = c.Bios(ctx, id)
	if err != nil || st.Attributes["SriovGlobalEnable"] != "Enabled" || len(st.Pending) != 0 {
		t.Fatalf("after the reset: %+v %v", st, err)
	}
	recs := e.Records()
	if len(recs) != 2 || recs[0].Action != redfish.ActionBiosSettings || recs[0].Settings["SriovGlobalEnable"] != "Enabled" {
		t.Fatalf("recorded %+v", recs)
	}
}

// An update whose answer was lost is found among the BMC's tasks by its image, and the version
// an image installs is the vendor's (SetImageVersion), read from System's BiosVersion.
func TestUpdateFoundAmongTasks(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	const image = "http://fw.example/firmware/bios-P79-v1.46.bin"
	e.SetImageVersion(image, "P79 v1.46 (01/15/2018)")
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(100 * time.Millisecond), ErrorAfterEffect: 502})
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	if tasks, err := c.Tasks(ctx); err != nil || len(tasks) != 0 {
		t.Fatalf("tasks before: %+v %v", tasks, err)
	}
	if _, err := c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: image, SystemID: id}); err == nil {
		t.Fatal("the lost answer was not an error")
	}
	b.ClearFaults()
	tasks, err := c.Tasks(ctx)
	if err != nil || len(tasks) != 1 || tasks[0].Image != image || tasks[0].URI == "" || tasks[0].StartTime == "" {
		t.Fatalf("tasks after: %+v %v", tasks, err)
	}
	waitTask(t, c, tasks[0].URI)
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, id, bmc.PowerStateOn)
	st, err := c.System(ctx, id)
	if err != nil || st.BiosVersion != "P79 v1.46 (01/15/2018)" {
		t.Fatalf("system after the reset: %+v %v", st, err)
	}
}

// A BMC that cannot fetch images takes them pushed: multipart to MultipartHttpPushUri, a task
// like SimpleUpdate's, the image targeting the system.
func TestPushUpdate(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(100 * time.Millisecond), NoSimpleUpdate: true})
	c := get(t, p, endpoint(b))
	simple, push, err := c.UpdateMethods(ctx)
	if err != nil || simple || !push {
		t.Fatalf("methods simple=%t push=%t %v", simple, push, err)
	}
	if _, err := c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: "http://fw.example/bios-1.bin"}); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("SimpleUpdate without the action: %v", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "bios-*.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("8.1.0\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	id := b.SystemIDs()[0]
	task, err := c.PushUpdate(bmc.WithRequestTimeout(ctx, time.Minute), bmc.UpdateRequest{SystemID: id}, f)
	if err != nil || task == "" {
		t.Fatalf("push: %q %v", task, err)
	}
	waitTask(t, c, task)
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	waitPower(t, c, id, bmc.PowerStateOn)
	if got := b.System(id).BIOSVersion(); got != "8.1.0" {
		t.Fatalf("BIOS %s after the pushed image, want 8.1.0", got)
	}
}

// Tasks reads every page of the TaskService, in whatever order the BMC lists them: a BMC that
// pages its tasks newest first still shows the oldest, and none is dropped.
func TestTasksReadsEveryPage(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(time.Millisecond), TaskPageSize: 7, TasksNewestFirst: true})
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	const n = 40
	for i := range n {
		task, err := c.SimpleUpdate(ctx, bmc.UpdateRequest{ImageURI: fmt.Sprintf("http://fw.example/bios-page-%d.bin", i), SystemID: id})
		if err != nil {
			t.Fatal(err)
		}
		waitTask(t, c, task)
	}
	tasks, err := c.Tasks(ctx)
	if err != nil || len(tasks) != n {
		t.Fatalf("%d tasks, %v; want %d", len(tasks), err, n)
	}
	seen := map[string]bool{}
	for _, task := range tasks {
		seen[task.Image] = true
	}
	for i := range n {
		if img := fmt.Sprintf("http://fw.example/bios-page-%d.bin", i); !seen[img] {
			t.Errorf("task for %s not read", img)
		}
	}
}
