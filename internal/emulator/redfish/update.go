package redfish

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// ActionSimpleUpdate is an accepted update, by SimpleUpdate or pushed to MultipartHttpPushUri
// (Record.Image is the ImageURI, or the pushed file's name; Record.Device the component: "BMC"
// or the BIOS of Record.SystemID).
const ActionSimpleUpdate = "SimpleUpdate"

// Defaults of the emulated updates (Faults.UpdateDuration, Faults.BMCRebootDuration).
const (
	defaultUpdateDuration    = 2 * time.Second
	defaultBMCRebootDuration = 5 * time.Second
)

// task is one update in flight or done.
type task struct {
	id       string
	started  time.Time
	duration time.Duration
	fail     bool
	target   string
	image    string
	version  string // what it installs
	// needsReset: a BMC image that waits for a manager reset (Faults.UpdateNeedsReset).
	needsReset bool
	// inert: completes and installs nothing (Faults.UpdateChangesNothing).
	inert bool
	// noPayload: served without Payload (Faults.TasksWithoutPayload).
	noPayload bool
	state     string // Running, Completed, Exception
}

type updates struct {
	mu    sync.Mutex
	next  int
	tasks map[string]*task
	// bmcFW is the manager's firmware version (it changes after a BMC update's reboot).
	bmcFW string
	// downUntil: the BMC is rebooting after an update and answers nothing until then.
	downUntil time.Time
	// stagedFW is a BMC image waiting for a manager reset (Faults.UpdateNeedsReset).
	stagedFW string
}

// activateStagedFirmware installs a BMC image that waited for the manager's reset.
func (b *BMC) activateStagedFirmware() {
	b.upd.mu.Lock()
	defer b.upd.mu.Unlock()
	if b.upd.stagedFW != "" {
		b.upd.bmcFW, b.upd.stagedFW = b.upd.stagedFW, ""
	}
}

// FirmwareVersion is the BMC's firmware version.
func (b *BMC) FirmwareVersion() string {
	b.upd.mu.Lock()
	defer b.upd.mu.Unlock()
	if b.upd.bmcFW == "" {
		return b.mgrFW // as built
	}
	return b.upd.bmcFW
}

// BIOSVersion is the system's BIOS version as it reports it.
func (s *System) BIOSVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hw.BIOS
}

// SetBIOSVersion sets the BIOS version the system runs (as installed before the test).
func (s *System) SetBIOSVersion(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw.BIOS = v
}

// PendingBIOS is the BIOS version a completed update installs at the system's next reset.
func (s *System) PendingBIOS() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingBIOS
}

// rebooting reports whether the BMC is down for an update's reboot.
func (b *BMC) rebooting() bool {
	b.upd.mu.Lock()
	defer b.upd.mu.Unlock()
	return time.Now().Before(b.upd.downUntil)
}

// SetImageVersion says which version the image at uri installs, as a vendor's image carries it
// (the emulator fetches nothing). Images not named here install what versionOf reads from
// their file name.
func (e *Emulator) SetImageVersion(uri, version string) { e.images.Store(uri, version) }

func (e *Emulator) imageVersion(uri string) string {
	if v, ok := e.images.Load(uri); ok {
		return v.(string)
	}
	return versionOf(uri)
}

// versionOf reads the version an image installs from its file name: the part after the last
// "-" of the base name without extension (bios-2.3.4.bin installs 2.3.4). An image without
// one installs its base name.
func versionOf(uri string) string {
	base := path.Base(strings.SplitN(uri, "?", 2)[0])
	for _, ext := range []string{".bin", ".exe", ".img", ".fwpkg", ".hpb", ".signed", ".d9"} {
		base = strings.TrimSuffix(base, ext)
	}
	if i := strings.LastIndex(base, "-"); i >= 0 && i < len(base)-1 {
		return base[i+1:]
	}
	return base
}

func (b *BMC) updateService(w http.ResponseWriter, r *http.Request, segs []string, f *Faults) {
	base := v1 + "/UpdateService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			actions := obj{}
			if !f.NoSimpleUpdate {
				actions["#UpdateService.SimpleUpdate"] = obj{
					"target": base + "/Actions/UpdateService.SimpleUpdate",
					"TransferProtocol@Redfish.AllowableValues": []string{"HTTP", "HTTPS"},
				}
			}
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#UpdateService.v1_11_0.UpdateService", "@odata.id": base, "Id": "UpdateService",
				"Name": "Update Service", "ServiceEnabled": true, "FirmwareInventory": rfhttp.Link(base + "/FirmwareInventory"),
				"MultipartHttpPushUri": base + "/upload", "Actions": actions,
			})
		}
	case len(segs) == 1 && segs[0] == "upload":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			b.pushUpdate(w, r, f)
		}
	case len(segs) == 1 && segs[0] == "FirmwareInventory":
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			var ids []string
			for _, c := range b.components() {
				ids = append(ids, base+"/FirmwareInventory/"+c.id)
			}
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base+"/FirmwareInventory", "SoftwareInventoryCollection", "Firmware Inventory", ids))
		}
	case len(segs) == 2 && segs[0] == "FirmwareInventory":
		if !rfhttp.MethodIs(w, r, http.MethodGet) {
			return
		}
		for _, c := range b.components() {
			if c.id == segs[1] {
				rfhttp.WriteJSON(w, http.StatusOK, obj{
					"@odata.type": "#SoftwareInventory.v1_4_0.SoftwareInventory", "@odata.id": base + "/FirmwareInventory/" + c.id,
					"Id": c.id, "Name": c.name, "Version": c.version, "Updateable": true, "Status": rfhttp.Status("Enabled"),
				})
				return
			}
		}
		rfhttp.NotFound(w, r)
	case len(segs) == 2 && segs[0] == "Actions" && segs[1] == "UpdateService.SimpleUpdate" && !f.NoSimpleUpdate:
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			b.simpleUpdate(w, r, f)
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

type component struct{ id, name, version, system string }

// components are the BMC's firmware and each system's BIOS.
func (b *BMC) components() []component {
	out := []component{{id: "BMC", name: "BMC Firmware", version: b.FirmwareVersion()}}
	for _, s := range b.systems {
		id := "BIOS"
		if len(b.systems) > 1 {
			id = "BIOS." + s.hw.ID
		}
		out = append(out, component{id: id, name: "BIOS", version: s.BIOSVersion(), system: s.hw.ID})
	}
	return out
}

func (b *BMC) simpleUpdate(w http.ResponseWriter, r *http.Request, f *Faults) {
	var req struct {
		ImageURI         string
		TransferProtocol string
		Targets          []string
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ImageURI == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The action SimpleUpdate requires the parameter ImageURI to be present in the request body.")
		return
	}
	if p := strings.ToUpper(req.TransferProtocol); p != "" && p != "HTTP" && p != "HTTPS" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterNotSupported", "The parameter TransferProtocol value "+req.TransferProtocol+" is not supported.")
		return
	}
	b.startUpdate(w, r, f, req.ImageURI, b.em.imageVersion(req.ImageURI), req.Targets)
}

// pushUpdate takes an image pushed to MultipartHttpPushUri: UpdateParameters (JSON, Targets)
// and UpdateFile. The emulator installs what the file says when it is a short text (the
// version), else what versionOf reads from its name.
func (b *BMC) pushUpdate(w http.ResponseWriter, r *http.Request, f *Faults) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request is not multipart/form-data: "+err.Error())
		return
	}
	var params struct{ Targets []string }
	if v := r.FormValue("UpdateParameters"); v != "" {
		if err := json.Unmarshal([]byte(v), &params); err != nil {
			rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "UpdateParameters is not JSON.")
			return
		}
	}
	file, hdr, err := r.FormFile("UpdateFile")
	if err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The request requires the part UpdateFile.")
		return
	}
	defer file.Close()
	content, _ := io.ReadAll(io.LimitReader(file, 1<<20))
	version := strings.TrimSpace(string(content))
	if len(version) == 0 || len(version) > 128 || strings.ContainsAny(version, "\x00\n") {
		version = versionOf(hdr.Filename)
	}
	b.startUpdate(w, r, f, hdr.Filename, version, params.Targets)
}

// startUpdate starts the task of an update accepted by SimpleUpdate or a push.
func (b *BMC) startUpdate(w http.ResponseWriter, r *http.Request, f *Faults, image, version string, targets []string) {
	comps := b.components()
	target := comps[1] // the (first) system's BIOS
	if strings.HasPrefix(strings.ToLower(path.Base(image)), "bmc") {
		target = comps[0]
	}
	for _, t := range targets {
		for _, c := range comps {
			if strings.HasSuffix(t, "/FirmwareInventory/"+c.id) || (c.system != "" && strings.HasSuffix(t, "/Systems/"+c.system)) {
				target = c
			}
		}
	}
	dur := time.Duration(f.UpdateDuration)
	if dur <= 0 {
		dur = defaultUpdateDuration
	}
	b.upd.mu.Lock()
	if b.upd.tasks == nil {
		b.upd.tasks = map[string]*task{}
	}
	for _, t := range b.upd.tasks {
		if t.state == "Running" && t.target == target.id {
			b.upd.mu.Unlock()
			rfhttp.WriteError(w, http.StatusConflict, "ResourceInUse", "An update of "+target.id+" is already running.")
			return
		}
	}
	b.upd.next++
	t := &task{id: strconv.Itoa(b.upd.next), started: time.Now(), duration: dur, fail: f.UpdateFails, target: target.id, image: image, version: version, needsReset: f.UpdateNeedsReset,
		inert: f.UpdateChangesNothing, noPayload: f.TasksWithoutPayload, state: "Running"}
	b.upd.tasks[t.id] = t
	b.upd.mu.Unlock()
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: target.system, Action: ActionSimpleUpdate, Image: image, Device: target.id})
	reboot := time.Duration(f.BMCRebootDuration)
	if reboot <= 0 {
		reboot = defaultBMCRebootDuration
	}
	timer := time.AfterFunc(dur, func() { b.finishUpdate(t, target, reboot) })
	go func() { <-b.em.closing; timer.Stop() }()
	loc := v1 + "/TaskService/Tasks/" + t.id
	if f.ErrorAfterEffect != 0 {
		// Accepted and under way, but the answer is lost.
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed after it was accepted.")
		return
	}
	if f.UpdateAnswersWithoutTask {
		rfhttp.WriteJSON(w, http.StatusOK, obj{})
		return
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Retry-After", "1")
	rfhttp.WriteJSON(w, http.StatusAccepted, b.taskBody(t))
}

// serveTaskService serves the TaskService and its Tasks collection (the updates, oldest first).
func (b *BMC) serveTaskService(w http.ResponseWriter, r *http.Request, segs []string) {
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	base := v1 + "/TaskService"
	switch {
	case len(segs) == 0:
		rfhttp.WriteJSON(w, http.StatusOK, obj{"@odata.type": "#TaskService.v1_2_0.TaskService", "@odata.id": base, "Id": "TaskService",
			"Name": "Task Service", "ServiceEnabled": true, "Tasks": rfhttp.Link(base + "/Tasks")})
	case len(segs) == 1 && segs[0] == "Tasks":
		b.upd.mu.Lock()
		ids := make([]string, 0, len(b.upd.tasks))
		for n := 1; n <= b.upd.next; n++ {
			if _, ok := b.upd.tasks[strconv.Itoa(n)]; ok {
				ids = append(ids, base+"/Tasks/"+strconv.Itoa(n))
			}
		}
		b.upd.mu.Unlock()
		f := b.Faults()
		if f.TasksNewestFirst {
			slices.Reverse(ids)
		}
		if f.TaskPageSize <= 0 {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base+"/Tasks", "TaskCollection", "Tasks", ids))
			return
		}
		skip, _ := strconv.Atoi(r.URL.Query().Get("$skip"))
		skip = min(max(skip, 0), len(ids))
		end := min(skip+f.TaskPageSize, len(ids))
		body := rfhttp.Collection(base+"/Tasks", "TaskCollection", "Tasks", ids[skip:end])
		body["Members@odata.count"] = len(ids)
		if end < len(ids) {
			body["Members@odata.nextLink"] = base + "/Tasks?$skip=" + strconv.Itoa(end)
		}
		rfhttp.WriteJSON(w, http.StatusOK, body)
	default:
		rfhttp.NotFound(w, r)
	}
}

// finishUpdate ends a task: a BIOS image is staged for the system's next reset; a BMC image
// reboots the BMC, which answers nothing for a while and then reports the new version.
func (b *BMC) finishUpdate(t *task, target component, reboot time.Duration) {
	b.upd.mu.Lock()
	if t.fail {
		t.state = "Exception"
		b.upd.mu.Unlock()
		return
	}
	t.state = "Completed"
	version := t.version
	if t.inert {
		b.upd.mu.Unlock()
		return
	}
	if target.system == "" && t.needsReset {
		b.upd.stagedFW = version
		b.upd.mu.Unlock()
		return
	}
	if target.system == "" {
		b.upd.downUntil = time.Now().Add(reboot)
		b.upd.mu.Unlock()
		b.ExpireSessions()
		time.AfterFunc(reboot, func() {
			b.upd.mu.Lock()
			b.upd.bmcFW = version
			b.upd.mu.Unlock()
			b.lastReset.Store(time.Now().Truncate(time.Second).UnixNano())
		})
		return
	}
	b.upd.mu.Unlock()
	if s := b.byID[target.system]; s != nil {
		s.mu.Lock()
		s.pendingBIOS = version
		s.mu.Unlock()
	}
}

func (b *BMC) taskBody(t *task) obj {
	pct := 100
	if t.state == "Running" {
		pct = min(99, int(100*time.Since(t.started)/t.duration))
	}
	st := "OK"
	if t.state == "Exception" {
		st = "Critical"
	}
	body := obj{
		"@odata.type": "#Task.v1_4_3.Task", "@odata.id": v1 + "/TaskService/Tasks/" + t.id, "Id": t.id, "Name": "Update " + t.target,
		"TaskState": t.state, "TaskStatus": st, "PercentComplete": pct, "StartTime": t.started.UTC().Format(time.RFC3339),
		"Messages": []obj{{"MessageId": "Update.1.0.UpdateInProgress", "Message": "Update of " + t.target + " with " + t.image}},
		"Payload": obj{"TargetUri": v1 + "/UpdateService/Actions/UpdateService.SimpleUpdate", "HttpOperation": "POST",
			"JsonBody": fmt.Sprintf("{\"ImageURI\": %q}", t.image)},
	}
	if t.noPayload {
		delete(body, "Payload")
		body["Messages"] = []obj{{"MessageId": "Update.1.0.UpdateInProgress", "Message": "Update of " + t.target}}
	}
	return body
}

// serveTask answers a task: 202 with Retry-After while it runs, 200 once it ended.
func (b *BMC) serveTask(w http.ResponseWriter, id string) bool {
	b.upd.mu.Lock()
	t := b.upd.tasks[id]
	var body obj
	running := false
	if t != nil {
		body, running = b.taskBody(t), t.state == "Running"
	}
	b.upd.mu.Unlock()
	if t == nil {
		return false
	}
	if running {
		w.Header().Set("Retry-After", "1")
		rfhttp.WriteJSON(w, http.StatusAccepted, body)
		return true
	}
	rfhttp.WriteJSON(w, http.StatusOK, body)
	return true
}
