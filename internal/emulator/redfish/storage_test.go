package redfish_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
)

// storageBox is a system with a Storage controller, at least two drives and its OS volume.
type storageBox struct {
	e       *redfish.Emulator
	b       *redfish.BMC
	s       *redfish.System
	storage string // the controller's URI
	drives  []string
	volume  string // the OS volume's URI
}

// startStorage starts a small fleet and picks a BMC whose system has a Storage controller with
// the volume a machine comes with (RAID1 over its first two drives).
func startStorage(t *testing.T) storageBox {
	t.Helper()
	e := start(t, redfish.Options{BMCs: 8, Seed: 11, PowerDelay: -1})
	for _, b := range e.BMCs() {
		s := b.Systems()[0]
		if b.Vendor() == "hpe" || len(s.Volumes()) != 1 {
			continue
		}
		_, coll := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + s.ID() + "/Storage", basic: true})
		box := storageBox{e: e, b: b, s: s, storage: members(t, coll)[0]["@odata.id"].(string)}
		_, st := do(t, b, call{method: "GET", path: box.storage, basic: true})
		for _, d := range st["Drives"].([]any) {
			box.drives = append(box.drives, d.(map[string]any)["@odata.id"].(string))
		}
		box.volume = box.storage + "/Volumes/" + s.Volumes()[0].ID
		return box
	}
	t.Fatal("no BMC of the fleet has a Storage controller with a volume")
	return storageBox{}
}

// get reads path (200 expected).
func (x storageBox) get(t *testing.T, path string) map[string]any {
	t.Helper()
	resp, body := do(t, x.b, call{method: "GET", path: path, basic: true})
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, body)
	}
	return body
}

// actionTarget is the target of the resource's action name ("" when it offers none).
func actionTarget(body map[string]any, name string) string {
	acts, _ := body["Actions"].(map[string]any)
	a, _ := acts[name].(map[string]any)
	target, _ := a["target"].(string)
	return target
}

// awaitTask polls the task at path until it ends, checking it answers 202 with Retry-After
// while it runs and 200 once it ended.
func awaitTask(t *testing.T, b *redfish.BMC, path string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, task := do(t, b, call{method: "GET", path: path, basic: true})
		state, _ := task["TaskState"].(string)
		switch {
		case state == "Running" && (resp.StatusCode != 202 || resp.Header.Get("Retry-After") == ""):
			t.Fatalf("running task %s answered %d Retry-After %q, want 202 with Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		case state == "Running":
		case resp.StatusCode != 200:
			t.Fatalf("ended task %s answered %d: %v", path, resp.StatusCode, task)
		default:
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still running after 10s: %v", path, task)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// taskURIs are the members of the TaskService's Tasks collection.
func taskURIs(t *testing.T, b *redfish.BMC) []string {
	t.Helper()
	_, coll := do(t, b, call{method: "GET", path: "/redfish/v1/TaskService/Tasks", basic: true})
	var out []string
	for _, m := range members(t, coll) {
		out = append(out, m["@odata.id"].(string))
	}
	return out
}

// actions are the recorded actions named action.
func actions(e *redfish.Emulator, action string) []redfish.Record {
	var out []redfish.Record
	for _, r := range e.Records() {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

func messages(task map[string]any) string {
	var out []string
	for _, m := range task["Messages"].([]any) {
		out = append(out, m.(map[string]any)["Message"].(string))
	}
	return strings.Join(out, " | ")
}

func errorMessageID(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	info, _ := e["@Message.ExtendedInfo"].([]any)
	if len(info) == 0 {
		return ""
	}
	id, _ := info[0].(map[string]any)["MessageId"].(string)
	return id
}

func TestDriveSecureErase(t *testing.T) {
	for _, tc := range []struct {
		name       string
		faults     redfish.Faults
		advertised bool
		status     int    // of the POST
		state      string // the task's at its end ("": no task)
		health     string
		erased     int
	}{
		{name: "completes", faults: redfish.Faults{EraseDuration: redfish.Duration(300 * time.Millisecond)},
			advertised: true, status: 202, state: "Completed", health: "OK", erased: 1},
		{name: "fails", faults: redfish.Faults{EraseDuration: redfish.Duration(time.Millisecond), EraseFails: true},
			advertised: true, status: 202, state: "Exception", health: "Critical"},
		{name: "answer lost", faults: redfish.Faults{EraseDuration: redfish.Duration(time.Millisecond), ErrorAfterEffect: 502},
			advertised: true, status: 502, state: "Completed", health: "OK", erased: 1},
		{name: "not offered", faults: redfish.Faults{NoSecureErase: true}, status: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := startStorage(t)
			x.b.SetFaults(tc.faults)
			drivePath := x.drives[0]
			drive := x.get(t, drivePath)
			id := drive["Id"].(string)
			want := drivePath + "/Actions/Drive.SecureErase"
			if got := actionTarget(drive, "#Drive.SecureErase"); (got == want) != tc.advertised || (!tc.advertised && drive["Actions"] != nil) {
				t.Fatalf("Drive.SecureErase target %q, Actions %v; advertised: %v", got, drive["Actions"], tc.advertised)
			}
			before := time.Now()
			resp, body := do(t, x.b, call{method: "POST", path: want, basic: true, body: map[string]any{}})
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %s: %d %v, want %d", want, resp.StatusCode, body, tc.status)
			}
			recs := actions(x.e, redfish.ActionSecureErase)
			if tc.state == "" {
				if id := errorMessageID(body); id != "Base.1.8.ActionNotSupported" {
					t.Errorf("refusal %q, want ActionNotSupported", id)
				}
				if len(recs) != 0 || len(taskURIs(t, x.b)) != 0 {
					t.Errorf("a refused erase recorded %v and left tasks %v", recs, taskURIs(t, x.b))
				}
				return
			}
			if len(recs) != 1 || recs[0].Device != id || recs[0].SystemID != x.s.ID() || recs[0].Time.Before(before) {
				t.Fatalf("records %+v, want one SecureErase of %s", recs, id)
			}
			loc := resp.Header.Get("Location")
			if tc.status == 202 {
				if !strings.HasPrefix(loc, "/redfish/v1/TaskService/Tasks/") || body["@odata.id"] != loc ||
					body["TaskState"] != "Running" || body["Name"] != "Secure erase of drive "+id {
					t.Fatalf("202 Location %q, task %v: want the running task", loc, body)
				}
			}
			if tasks := taskURIs(t, x.b); len(tasks) != 1 || (loc != "" && tasks[0] != loc) {
				t.Fatalf("Tasks %v, want the erase's task %q", tasks, loc)
			} else {
				loc = tasks[0]
			}
			task := awaitTask(t, x.b, loc)
			if task["TaskState"] != tc.state || task["TaskStatus"] != tc.health || task["EndTime"] == nil {
				t.Errorf("task ended %v/%v (EndTime %v), want %s/%s", task["TaskState"], task["TaskStatus"], task["EndTime"], tc.state, tc.health)
			}
			if msg := messages(task); !strings.Contains(msg, "Secure erase of drive "+id) || (tc.state == "Exception") != strings.Contains(msg, "failed") {
				t.Errorf("messages %q", msg)
			}
			if p, _ := task["Payload"].(map[string]any); p["TargetUri"] != want || p["HttpOperation"] != "POST" {
				t.Errorf("payload %v, want the action's target", p)
			}
			erasures := x.s.Erasures()
			if erasures[id] != tc.erased || len(erasures) != min(tc.erased, 1) {
				t.Errorf("erasures %v, want %d of %s", erasures, tc.erased, id)
			}
			disks := x.s.Disks()
			if k := slices.IndexFunc(disks, func(d hardware.Disk) bool { return d.ID == id }); disks[k].LastErased.IsZero() == (tc.erased > 0) {
				t.Errorf("drive %s last erased %v after %d erasures", id, disks[k].LastErased, tc.erased)
			}
		})
	}
}

// A drive being erased refuses a second erase until the first ends; its neighbours do not.
func TestSecureEraseWhileRunning(t *testing.T) {
	x := startStorage(t)
	x.b.SetFaults(redfish.Faults{EraseDuration: redfish.Duration(time.Hour)})
	target := x.drives[0] + "/Actions/Drive.SecureErase"
	resp, task := do(t, x.b, call{method: "POST", path: target, basic: true})
	if resp.StatusCode != 202 || task["TaskState"] != "Running" {
		t.Fatalf("first erase (no body): %d %v", resp.StatusCode, task)
	}
	resp, body := do(t, x.b, call{method: "POST", path: target, basic: true, body: map[string]any{}})
	if resp.StatusCode != 409 || errorMessageID(body) != "Base.1.8.ResourceInUse" {
		t.Fatalf("second erase while the first runs: %d %v, want 409 ResourceInUse", resp.StatusCode, body)
	}
	if resp, _ := do(t, x.b, call{method: "POST", path: x.drives[1] + "/Actions/Drive.SecureErase", basic: true}); resp.StatusCode != 202 {
		t.Fatalf("erase of another drive: %d, want 202", resp.StatusCode)
	}
	resp, running := do(t, x.b, call{method: "GET", path: task["@odata.id"].(string), basic: true})
	if resp.StatusCode != 202 || running["TaskState"] != "Running" {
		t.Fatalf("running task: %d %v", resp.StatusCode, running)
	}
	if n := len(actions(x.e, redfish.ActionSecureErase)); n != 2 || len(x.s.Erasures()) != 0 {
		t.Fatalf("%d erases recorded, erasures %v: want the two accepted, none completed", n, x.s.Erasures())
	}
	if resp, _ := do(t, x.b, call{method: "POST", path: x.storage + "/Drives/NoSuchDrive/Actions/Drive.SecureErase", basic: true}); resp.StatusCode != 404 {
		t.Fatalf("erase of a drive that does not exist: %d, want 404", resp.StatusCode)
	}
}

func TestVolumeInitialize(t *testing.T) {
	for _, tc := range []struct {
		name       string
		faults     redfish.Faults
		body       any
		advertised bool
		status     int
		msgID      string // of a refusal
	}{
		{name: "slow", body: map[string]string{"InitializeType": "Slow"}, advertised: true, status: 202},
		{name: "fast", body: map[string]string{"InitializeType": "Fast"}, advertised: true, status: 202},
		{name: "unknown type", body: map[string]string{"InitializeType": "Quick"}, advertised: true, status: 400, msgID: "ActionParameterNotSupported"},
		{name: "no type", body: map[string]string{}, advertised: true, status: 400, msgID: "ActionParameterMissing"},
		{name: "malformed", body: "Slow", advertised: true, status: 400, msgID: "MalformedJSON"},
		{name: "not offered", faults: redfish.Faults{NoVolumeInitialize: true}, body: map[string]string{"InitializeType": "Slow"}, status: 400, msgID: "ActionNotSupported"},
		{name: "no volume support", faults: redfish.Faults{NoVolumes: true}, body: map[string]string{"InitializeType": "Slow"}, status: 400, msgID: "ActionNotSupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := startStorage(t)
			tc.faults.EraseDuration = redfish.Duration(20 * time.Millisecond)
			x.b.SetFaults(tc.faults)
			vol := x.get(t, x.volume)
			id := vol["Id"].(string)
			target := x.volume + "/Actions/Volume.Initialize"
			acts, _ := vol["Actions"].(map[string]any)
			init, _ := acts["#Volume.Initialize"].(map[string]any)
			if (init["target"] == target) != tc.advertised || (tc.advertised && !slices.Equal(anyStrings(init["InitializeType@Redfish.AllowableValues"]), []string{"Fast", "Slow"})) {
				t.Fatalf("Volume.Initialize %v; advertised: %v", acts, tc.advertised)
			}
			resp, body := do(t, x.b, call{method: "POST", path: target, basic: true, body: tc.body})
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %s: %d %v, want %d", target, resp.StatusCode, body, tc.status)
			}
			recs := actions(x.e, redfish.ActionInitializeVolume)
			if tc.status != 202 {
				if got := errorMessageID(body); got != "Base.1.8."+tc.msgID {
					t.Errorf("refusal %q, want %s", got, tc.msgID)
				}
				if len(recs) != 0 || len(x.s.Initializations()) != 0 {
					t.Errorf("a refused initialize recorded %v, counted %v", recs, x.s.Initializations())
				}
				return
			}
			typ := tc.body.(map[string]string)["InitializeType"]
			if len(recs) != 1 || recs[0].Device != id || recs[0].InitializeType != typ {
				t.Fatalf("records %+v, want one %s InitializeVolume of %s", recs, typ, id)
			}
			if body["Name"] != "Initialize volume "+id {
				t.Errorf("task name %v", body["Name"])
			}
			task := awaitTask(t, x.b, resp.Header.Get("Location"))
			if task["TaskState"] != "Completed" || !strings.Contains(messages(task), typ+" initialization of volume "+id) {
				t.Errorf("task %v", task)
			}
			if p, _ := task["Payload"].(map[string]any); p["TargetUri"] != target || !strings.Contains(p["JsonBody"].(string), typ) {
				t.Errorf("payload %v", p)
			}
			if got := x.s.Initializations(); len(got) != 1 || got[id] != 1 {
				t.Errorf("initializations %v, want one of %s", got, id)
			}
			if v := x.s.Volumes()[0]; v.LastInitialized.IsZero() {
				t.Errorf("volume %s: no LastInitialized after its initialization", v.ID)
			}
		})
	}
}

func anyStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, s := range l {
		out = append(out, s.(string))
	}
	return out
}

// volumeDrives are the links to the drives of the volume body v, as a POST to Volumes takes them.
func volumeDrives(v map[string]any) []map[string]string {
	var out []map[string]string
	for _, d := range v["Links"].(map[string]any)["Drives"].([]any) {
		out = append(out, map[string]string{"@odata.id": d.(map[string]any)["@odata.id"].(string)})
	}
	return out
}

// A deleted volume leaves the collection and frees its drives for another; it is deleted once.
func TestDeleteVolume(t *testing.T) {
	x := startStorage(t)
	vol := x.get(t, x.volume)
	id := vol["Id"].(string)
	raid := map[string]any{"Name": "again", "RAIDType": "RAID1", "Links": map[string]any{"Drives": volumeDrives(vol)}}
	if resp, _ := do(t, x.b, call{method: "POST", path: x.storage + "/Volumes", basic: true, body: raid}); resp.StatusCode != 400 {
		t.Fatalf("a volume over drives in one already: %d, want 400", resp.StatusCode)
	}
	x.b.SetFaults(redfish.Faults{NoVolumes: true})
	if resp, _ := do(t, x.b, call{method: "DELETE", path: x.volume, basic: true}); resp.StatusCode != 405 {
		t.Fatalf("DELETE on a controller without volume support: %d, want 405", resp.StatusCode)
	}
	x.b.ClearFaults()

	if resp, _ := do(t, x.b, call{method: "DELETE", path: x.volume, basic: true}); resp.StatusCode != 204 {
		t.Fatalf("DELETE %s: %d, want 204", x.volume, resp.StatusCode)
	}
	if resp, _ := do(t, x.b, call{method: "GET", path: x.volume, basic: true}); resp.StatusCode != 404 {
		t.Errorf("GET of the deleted volume: %d, want 404", resp.StatusCode)
	}
	if m := members(t, x.get(t, x.storage+"/Volumes")); len(m) != 0 || len(x.s.Volumes()) != 0 {
		t.Errorf("volumes after the delete: %v / %v", m, x.s.Volumes())
	}
	if recs := actions(x.e, redfish.ActionDeleteVolume); len(recs) != 1 || recs[0].Device != id || recs[0].SystemID != x.s.ID() {
		t.Errorf("records %+v, want one DeleteVolume of %s", recs, id)
	}
	if resp, body := do(t, x.b, call{method: "DELETE", path: x.volume, basic: true}); resp.StatusCode != 404 {
		t.Errorf("second DELETE: %d %v, want 404", resp.StatusCode, body)
	}
	if n := len(actions(x.e, redfish.ActionDeleteVolume)); n != 1 {
		t.Errorf("%d deletes recorded, want the one that deleted", n)
	}
	resp, made := do(t, x.b, call{method: "POST", path: x.storage + "/Volumes", basic: true, body: raid})
	if resp.StatusCode != 201 || len(volumeDrives(made)) != 2 {
		t.Fatalf("a volume over the freed drives: %d %v, want 201", resp.StatusCode, made)
	}
	if target := actionTarget(made, "#Volume.Initialize"); target != made["@odata.id"].(string)+"/Actions/Volume.Initialize" {
		t.Errorf("the new volume's Initialize target %q", target)
	}
}

// A volume being initialized is not deleted (nor initialized twice) until the task ends.
func TestDeleteVolumeBeingInitialized(t *testing.T) {
	x := startStorage(t)
	x.b.SetFaults(redfish.Faults{EraseDuration: redfish.Duration(time.Hour)})
	slow := map[string]string{"InitializeType": "Slow"}
	if resp, _ := do(t, x.b, call{method: "POST", path: x.volume + "/Actions/Volume.Initialize", basic: true, body: slow}); resp.StatusCode != 202 {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	if resp, body := do(t, x.b, call{method: "POST", path: x.volume + "/Actions/Volume.Initialize", basic: true, body: slow}); resp.StatusCode != 409 || errorMessageID(body) != "Base.1.8.ResourceInUse" {
		t.Fatalf("second initialize while the first runs: %d %v, want 409", resp.StatusCode, body)
	}
	if resp, body := do(t, x.b, call{method: "DELETE", path: x.volume, basic: true}); resp.StatusCode != 409 || errorMessageID(body) != "Base.1.8.ResourceInUse" {
		t.Fatalf("DELETE of a volume being initialized: %d %v, want 409", resp.StatusCode, body)
	}
	if len(x.s.Volumes()) != 1 || len(actions(x.e, redfish.ActionDeleteVolume)) != 0 {
		t.Fatalf("volumes %v, deletes %v: want the volume kept", x.s.Volumes(), actions(x.e, redfish.ActionDeleteVolume))
	}
}

// Update tasks read as before beside the erases, and the Tasks collection lists both.
func TestUpdateTasksBesideErases(t *testing.T) {
	x := startStorage(t)
	x.b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(time.Hour), EraseDuration: redfish.Duration(time.Hour)})
	image := "http://images.example/bios-9.9.9.bin"
	resp, upd := do(t, x.b, call{method: "POST", path: "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", basic: true, body: map[string]string{"ImageURI": image}})
	if resp.StatusCode != 202 || !strings.HasPrefix(upd["Name"].(string), "Update ") || upd["Payload"].(map[string]any)["JsonBody"] != `{"ImageURI": "`+image+`"}` {
		t.Fatalf("update: %d %v", resp.StatusCode, upd)
	}
	resp, erase := do(t, x.b, call{method: "POST", path: x.drives[0] + "/Actions/Drive.SecureErase", basic: true})
	if resp.StatusCode != 202 {
		t.Fatalf("erase beside an update: %d %v", resp.StatusCode, erase)
	}
	if got, want := taskURIs(t, x.b), []string{upd["@odata.id"].(string), erase["@odata.id"].(string)}; !slices.Equal(got, want) || want[0] == want[1] {
		t.Fatalf("Tasks %v, want %v", got, want)
	}
	if resp, _ := do(t, x.b, call{method: "POST", path: "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", basic: true, body: map[string]string{"ImageURI": image}}); resp.StatusCode != 409 {
		t.Fatalf("second update of the BIOS: %d, want 409", resp.StatusCode)
	}
}
