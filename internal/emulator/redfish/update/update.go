package update

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

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

const v1 = rfhttp.V1

// ActionSimpleUpdate is an accepted update, by SimpleUpdate or pushed to MultipartHttpPushUri
// (Record.Image is the ImageURI, or the pushed file's name; Record.Device the component: "BMC"
// or the BIOS of Record.SystemID).
const ActionSimpleUpdate = "SimpleUpdate"

// Defaults of the emulated updates (Faults.UpdateDuration, Faults.BMCRebootDuration).
const (
	defaultUpdateDuration    = 2 * time.Second
	defaultBMCRebootDuration = 5 * time.Second
)

// Host is what the update service needs of its BMC.
type Host interface {
	// FirmwareVersion is the version the BMC runs.
	FirmwareVersion() string
	// SystemsBIOS are the BMC's systems by Id, in order, with the BIOS version each runs.
	SystemsBIOS() []SystemBIOS
	// ImageVersion is the version the image at uri installs.
	ImageVersion(uri string) string
	// Record records an update accepted from the request r.
	Record(r *http.Request, systemID, image, device string)
	// Closing is closed when the emulator shuts down.
	Closing() <-chan struct{}
	// Rebooting: the BMC goes down for an update's reboot (its sessions end).
	Rebooting()
	// Rebooted: the BMC came back from an update's reboot (its last reset is now).
	Rebooted()
	// StageBIOS stages version for the system's next reset.
	StageBIOS(systemID, version string)
}

// SystemBIOS is one system's BIOS as the update service lists it.
type SystemBIOS struct{ ID, Version string }

// task is one update, or one Job, in flight or done.
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
	// job is what a task that is no update runs (StartJob); nil for updates.
	job *Job
	// ended is when a job ended (zero while it runs, and for updates).
	ended time.Time
}

// Service is one BMC's UpdateService and TaskService.
type Service struct {
	host  Host
	mu    sync.Mutex
	next  int
	tasks map[string]*task
	// bmcFW is the manager's firmware version once set or updated ("": as built).
	bmcFW string
	// downUntil: the BMC is rebooting after an update and answers nothing until then.
	downUntil time.Time
	// stagedFW is a BMC image waiting for a manager reset (Faults.UpdateNeedsReset).
	stagedFW string
}

// Init readies the service of a BMC.
func (svc *Service) Init(host Host) { svc.host = host }

// Firmware is the BMC's firmware version as updates and tests left it; "" while it runs what
// it was built with.
func (svc *Service) Firmware() string {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	return svc.bmcFW
}

// SetFirmware sets the BMC's firmware version (as installed before the test).
func (svc *Service) SetFirmware(v string) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	svc.bmcFW = v
}

// ActivateStaged installs a BMC image that waited for the manager's reset.
func (svc *Service) ActivateStaged() {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.stagedFW != "" {
		svc.bmcFW, svc.stagedFW = svc.stagedFW, ""
	}
}

// Down reports whether the BMC is down for an update's reboot.
func (svc *Service) Down() bool {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	return time.Now().Before(svc.downUntil)
}

// VersionOf reads the version an image installs from its file name: the part after the last
// "-" of the base name without extension (bios-2.3.4.bin installs 2.3.4). An image without
// one installs its base name.
func VersionOf(uri string) string {
	base := path.Base(strings.SplitN(uri, "?", 2)[0])
	for _, ext := range []string{".bin", ".exe", ".img", ".fwpkg", ".hpb", ".signed", ".d9"} {
		base = strings.TrimSuffix(base, ext)
	}
	if i := strings.LastIndex(base, "-"); i >= 0 && i < len(base)-1 {
		return base[i+1:]
	}
	return base
}

// Route serves UpdateService and below (segs after "UpdateService").
func (svc *Service) Route(w http.ResponseWriter, r *http.Request, segs []string, f *faults.Faults) {
	base := v1 + "/UpdateService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			actions := rfhttp.Obj{}
			if !f.NoSimpleUpdate {
				actions["#UpdateService.SimpleUpdate"] = rfhttp.Obj{
					"target": base + "/Actions/UpdateService.SimpleUpdate",
					"TransferProtocol@Redfish.AllowableValues": []string{"HTTP", "HTTPS"},
				}
			}
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#UpdateService.v1_11_0.UpdateService", "@odata.id": base, "Id": "UpdateService",
				"Name": "Update Service", "ServiceEnabled": true, "FirmwareInventory": rfhttp.Link(base + "/FirmwareInventory"),
				"MultipartHttpPushUri": base + "/upload", "Actions": actions,
			})
		}
	case len(segs) == 1 && segs[0] == "upload":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			svc.pushUpdate(w, r, f)
		}
	case len(segs) == 1 && segs[0] == "FirmwareInventory":
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			var ids []string
			for _, c := range svc.components() {
				ids = append(ids, base+"/FirmwareInventory/"+c.id)
			}
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base+"/FirmwareInventory", "SoftwareInventoryCollection", "Firmware Inventory", ids))
		}
	case len(segs) == 2 && segs[0] == "FirmwareInventory":
		if !rfhttp.MethodIs(w, r, http.MethodGet) {
			return
		}
		for _, c := range svc.components() {
			if c.id == segs[1] {
				rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
					"@odata.type": "#SoftwareInventory.v1_4_0.SoftwareInventory", "@odata.id": base + "/FirmwareInventory/" + c.id,
					"Id": c.id, "Name": c.name, "Version": c.version, "Updateable": true, "Status": rfhttp.Status("Enabled"),
				})
				return
			}
		}
		rfhttp.NotFound(w, r)
	case len(segs) == 2 && segs[0] == "Actions" && segs[1] == "UpdateService.SimpleUpdate" && !f.NoSimpleUpdate:
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			svc.simpleUpdate(w, r, f)
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

type component struct{ id, name, version, system string }

// components are the BMC's firmware and each system's BIOS.
func (svc *Service) components() []component {
	out := []component{{id: "BMC", name: "BMC Firmware", version: svc.host.FirmwareVersion()}}
	systems := svc.host.SystemsBIOS()
	for _, s := range systems {
		id := "BIOS"
		if len(systems) > 1 {
			id = "BIOS." + s.ID
		}
		out = append(out, component{id: id, name: "BIOS", version: s.Version, system: s.ID})
	}
	return out
}

func (svc *Service) simpleUpdate(w http.ResponseWriter, r *http.Request, f *faults.Faults) {
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
	svc.startUpdate(w, r, f, req.ImageURI, svc.host.ImageVersion(req.ImageURI), req.Targets)
}

// pushUpdate takes an image pushed to MultipartHttpPushUri: UpdateParameters (JSON, Targets)
// and UpdateFile. The emulator installs what the file says when it is a short text (the
// version), else what VersionOf reads from its name.
func (svc *Service) pushUpdate(w http.ResponseWriter, r *http.Request, f *faults.Faults) {
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
		version = VersionOf(hdr.Filename)
	}
	svc.startUpdate(w, r, f, hdr.Filename, version, params.Targets)
}

// startUpdate starts the task of an update accepted by SimpleUpdate or a push.
func (svc *Service) startUpdate(w http.ResponseWriter, r *http.Request, f *faults.Faults, image, version string, targets []string) {
	comps := svc.components()
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
	svc.mu.Lock()
	if svc.tasks == nil {
		svc.tasks = map[string]*task{}
	}
	for _, t := range svc.tasks {
		if t.job == nil && t.state == "Running" && t.target == target.id {
			svc.mu.Unlock()
			rfhttp.WriteError(w, http.StatusConflict, "ResourceInUse", "An update of "+target.id+" is already running.")
			return
		}
	}
	svc.next++
	t := &task{id: strconv.Itoa(svc.next), started: time.Now(), duration: dur, fail: f.UpdateFails, target: target.id, image: image, version: version, needsReset: f.UpdateNeedsReset,
		inert: f.UpdateChangesNothing, noPayload: f.TasksWithoutPayload, state: "Running"}
	svc.tasks[t.id] = t
	svc.mu.Unlock()
	svc.host.Record(r, target.system, image, target.id)
	reboot := time.Duration(f.BMCRebootDuration)
	if reboot <= 0 {
		reboot = defaultBMCRebootDuration
	}
	timer := time.AfterFunc(dur, func() { svc.finishUpdate(t, target, reboot) })
	closing := svc.host.Closing()
	go func() { <-closing; timer.Stop() }()
	loc := v1 + "/TaskService/Tasks/" + t.id
	if f.ErrorAfterEffect != 0 {
		// Accepted and under way, but the answer is lost.
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed after it was accepted.")
		return
	}
	if f.UpdateAnswersWithoutTask {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{})
		return
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Retry-After", "1")
	svc.mu.Lock() // a short task may finish while it is answered
	body := svc.taskBody(t)
	svc.mu.Unlock()
	rfhttp.WriteJSON(w, http.StatusAccepted, body)
}

// RouteTasks serves the TaskService and its Tasks collection (the updates and jobs, oldest
// first); segs are those after "TaskService".
func (svc *Service) RouteTasks(w http.ResponseWriter, r *http.Request, segs []string, f faults.Faults) {
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	base := v1 + "/TaskService"
	switch {
	case len(segs) == 0:
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{"@odata.type": "#TaskService.v1_2_0.TaskService", "@odata.id": base, "Id": "TaskService",
			"Name": "Task Service", "ServiceEnabled": true, "Tasks": rfhttp.Link(base + "/Tasks")})
	case len(segs) == 1 && segs[0] == "Tasks":
		svc.mu.Lock()
		ids := make([]string, 0, len(svc.tasks))
		for n := 1; n <= svc.next; n++ {
			if _, ok := svc.tasks[strconv.Itoa(n)]; ok {
				ids = append(ids, base+"/Tasks/"+strconv.Itoa(n))
			}
		}
		svc.mu.Unlock()
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
func (svc *Service) finishUpdate(t *task, target component, reboot time.Duration) {
	svc.mu.Lock()
	if t.fail {
		t.state = "Exception"
		svc.mu.Unlock()
		return
	}
	t.state = "Completed"
	version := t.version
	if t.inert {
		svc.mu.Unlock()
		return
	}
	if target.system == "" && t.needsReset {
		svc.stagedFW = version
		svc.mu.Unlock()
		return
	}
	if target.system == "" {
		svc.downUntil = time.Now().Add(reboot)
		svc.mu.Unlock()
		svc.host.Rebooting()
		time.AfterFunc(reboot, func() {
			svc.mu.Lock()
			svc.bmcFW = version
			svc.mu.Unlock()
			svc.host.Rebooted()
		})
		return
	}
	svc.mu.Unlock()
	svc.host.StageBIOS(target.system, version)
}

func (svc *Service) taskBody(t *task) rfhttp.Obj {
	if t.job != nil {
		return jobBody(t)
	}
	pct := 100
	if t.state == "Running" {
		pct = min(99, int(100*time.Since(t.started)/t.duration))
	}
	st := "OK"
	if t.state == "Exception" {
		st = "Critical"
	}
	body := rfhttp.Obj{
		"@odata.type": "#Task.v1_4_3.Task", "@odata.id": v1 + "/TaskService/Tasks/" + t.id, "Id": t.id, "Name": "Update " + t.target,
		"TaskState": t.state, "TaskStatus": st, "PercentComplete": pct, "StartTime": t.started.UTC().Format(time.RFC3339),
		"Messages": []rfhttp.Obj{{"MessageId": "Update.1.0.UpdateInProgress", "Message": "Update of " + t.target + " with " + t.image}},
		"Payload": rfhttp.Obj{"TargetUri": v1 + "/UpdateService/Actions/UpdateService.SimpleUpdate", "HttpOperation": "POST",
			"JsonBody": fmt.Sprintf("{\"ImageURI\": %q}", t.image)},
	}
	if t.noPayload {
		delete(body, "Payload")
		body["Messages"] = []rfhttp.Obj{{"MessageId": "Update.1.0.UpdateInProgress", "Message": "Update of " + t.target}}
	}
	return body
}

// ServeTask answers a task: 202 with Retry-After while it runs, 200 once it ended; false when
// there is no task id.
func (svc *Service) ServeTask(w http.ResponseWriter, id string) bool {
	svc.mu.Lock()
	t := svc.tasks[id]
	var body rfhttp.Obj
	running := false
	if t != nil {
		body, running = svc.taskBody(t), t.state == "Running"
	}
	svc.mu.Unlock()
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
