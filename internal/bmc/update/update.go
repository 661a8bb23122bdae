package update

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

type updateService struct {
	FirmwareInventory    wire.Link
	MultipartHTTPPushURI string `json:"MultipartHttpPushUri"`
	Actions              struct {
		SimpleUpdate struct {
			Target string `json:"target"`
		} `json:"#UpdateService.SimpleUpdate"`
	}
}

func readUpdateService(ctx context.Context, c wire.Conn) (*updateService, error) {
	api, err := c.Client(ctx)
	if err != nil {
		return nil, err
	}
	if c.Root().UpdateService.ID == "" {
		return nil, wire.New(wire.ReasonUnsupported, "read update service", "service root has no UpdateService")
	}
	var svc updateService
	if err := wire.GetJSON(api, c.Root().UpdateService.ID, &svc); err != nil {
		return nil, err
	}
	return &svc, nil
}

// FirmwareInventory does the work of bmc.BMC.FirmwareInventory.
func FirmwareInventory(ctx context.Context, c wire.Conn) ([]Firmware, error) {
	const op = "read firmware inventory"
	svc, err := readUpdateService(ctx, c)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if svc.FirmwareInventory.ID == "" {
		return nil, wire.New(wire.ReasonNotFound, op, "UpdateService has no FirmwareInventory")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	items, err := schemas.GetCollectionObjects[schemas.SoftwareInventory](api, svc.FirmwareInventory.ID)
	if err != nil && len(items) == 0 {
		return nil, wire.Wrap(op, err)
	}
	out := make([]Firmware, 0, len(items))
	for _, it := range items {
		out = append(out, Firmware{ID: it.ID, Name: it.Name, Version: it.Version, Updateable: it.Updateable})
	}
	return out, nil
}

// SimpleUpdate does the work of bmc.BMC.SimpleUpdate.
func SimpleUpdate(ctx context.Context, c wire.Conn, req UpdateRequest) (string, error) {
	op := "simple update " + req.ImageURI
	if req.ImageURI == "" {
		return "", wire.New(wire.ReasonInvalidConfig, op, "no image URI")
	}
	targets := append([]string(nil), req.Targets...)
	if req.SystemID != "" {
		sys, err := c.System(ctx, req.SystemID)
		if err != nil {
			return "", wire.Wrap(op, err)
		}
		targets = append(targets, sys.ODataID)
	}
	svc, err := readUpdateService(ctx, c)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	if svc.Actions.SimpleUpdate.Target == "" {
		return "", wire.New(wire.ReasonUnsupported, op, "UpdateService does not offer SimpleUpdate")
	}
	proto := strings.ToUpper(req.TransferProtocol)
	if proto == "" {
		proto = "HTTP"
		if strings.HasPrefix(strings.ToLower(req.ImageURI), "https://") {
			proto = "HTTPS"
		}
	}
	body := map[string]any{"ImageURI": req.ImageURI, "TransferProtocol": proto}
	if len(targets) > 0 {
		body["Targets"] = targets
	}
	if req.Username != "" {
		body["Username"], body["Password"] = req.Username, req.Password
	}
	api, err := c.Client(ctx)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	resp, err := api.Post(svc.Actions.SimpleUpdate.Target, body)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	task := taskOf(resp)
	c.Log().V(1).Info("update accepted", "image", req.ImageURI, "task", task, "status", resp.StatusCode)
	return task, nil
}

// taskOf is the task an update's answer names: its Location, else a Task as its body.
func taskOf(resp *http.Response) string {
	if task := resp.Header.Get("Location"); task != "" {
		return task
	}
	var t struct {
		ODataID string `json:"@odata.id"`
	}
	if json.NewDecoder(resp.Body).Decode(&t) == nil && strings.Contains(t.ODataID, "/Task") {
		return t.ODataID
	}
	return ""
}

// Task does the work of bmc.BMC.Task.
func Task(ctx context.Context, c wire.Conn, uri string) (*TaskStatus, error) {
	op := "read task " + uri
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	resp, err := api.Get(uri)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	var t taskBody
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return nil, wire.Wrap(op, fmt.Errorf("decode %s: %w", uri, err))
	}
	st := t.status(uri)
	// A monitor that answers 202 says when to look again.
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		st.RetryAfter = time.Duration(secs) * time.Second
	}
	if st.State == "" {
		return nil, wire.New(wire.ReasonUnknown, op, "no TaskState in the answer")
	}
	return st, nil
}

// taskBody is what a Task resource says that metalhub reads.
type taskBody struct {
	TaskState       string
	TaskStatus      string
	PercentComplete int
	StartTime       string
	Messages        []struct{ Message string }
	Payload         struct {
		JsonBody string //nolint:revive // Redfish's name
	}
}

func (t *taskBody) status(uri string) *TaskStatus {
	st := &TaskStatus{URI: uri, State: t.TaskState, Status: t.TaskStatus, PercentComplete: t.PercentComplete, StartTime: t.StartTime}
	for _, m := range t.Messages {
		st.Messages = append(st.Messages, m.Message)
	}
	var body struct{ ImageURI string }
	if t.Payload.JsonBody != "" && json.Unmarshal([]byte(t.Payload.JsonBody), &body) == nil {
		st.Image = body.ImageURI
	}
	return st
}

// maxTasks and maxTaskPages bound what Tasks reads: BMCs keep up to a few hundred finished
// tasks; a list longer than that is answered with an error rather than read in part.
const (
	maxTasks     = 1024
	maxTaskPages = 64
)

// Tasks does the work of bmc.BMC.Tasks.
func Tasks(ctx context.Context, c wire.Conn) ([]TaskStatus, error) {
	const op = "list tasks"
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if c.Root().Tasks.ID == "" {
		return nil, wire.New(wire.ReasonUnsupported, op, "service root has no TaskService")
	}
	var svc struct{ Tasks wire.Link }
	if err := wire.GetJSON(api, c.Root().Tasks.ID, &svc); err != nil {
		return nil, wire.Wrap(op, err)
	}
	if svc.Tasks.ID == "" {
		return nil, wire.New(wire.ReasonUnsupported, op, "TaskService has no Tasks collection")
	}
	// Every page: a BMC lists its tasks in its own order, and an update whose answer was lost
	// may be anywhere in it.
	var members []wire.Link
	next := svc.Tasks.ID
	for page := 0; next != ""; page++ {
		if page == maxTaskPages || len(members) > maxTasks {
			return nil, wire.New(wire.ReasonUnknown, op, "more than %d tasks listed: too many to tell which is whose", maxTasks)
		}
		var coll struct {
			Members  []wire.Link
			NextLink string `json:"Members@odata.nextLink"`
		}
		if err := wire.GetJSON(api, next, &coll); err != nil {
			return nil, wire.Wrap(op, err)
		}
		members, next = append(members, coll.Members...), coll.NextLink
	}
	out := make([]TaskStatus, 0, len(members))
	for _, m := range members {
		var t taskBody
		if err := wire.GetJSON(api, m.ID, &t); err != nil {
			if wire.ReasonOf(wire.Wrap(op, err)) == wire.ReasonNotFound {
				continue // ended and dropped while the list was read
			}
			return nil, wire.Wrap(op, err)
		}
		out = append(out, *t.status(m.ID))
	}
	return out, nil
}

// UpdateMethods does the work of bmc.BMC.UpdateMethods.
func UpdateMethods(ctx context.Context, c wire.Conn) (simple, push bool, err error) {
	svc, err := readUpdateService(ctx, c)
	if err != nil {
		return false, false, wire.Wrap("read update service", err)
	}
	return svc.Actions.SimpleUpdate.Target != "", svc.MultipartHTTPPushURI != "", nil
}

// PushUpdate does the work of bmc.BMC.PushUpdate.
func PushUpdate(ctx context.Context, c wire.Conn, req UpdateRequest, image *os.File) (string, error) {
	op := "push update " + filepath.Base(image.Name())
	targets := append([]string(nil), req.Targets...)
	if req.SystemID != "" {
		sys, err := c.System(ctx, req.SystemID)
		if err != nil {
			return "", wire.NotSent(op, err)
		}
		targets = append(targets, sys.ODataID)
	}
	svc, err := readUpdateService(ctx, c)
	if err != nil {
		return "", wire.NotSent(op, err)
	}
	if svc.MultipartHTTPPushURI == "" {
		return "", wire.New(wire.ReasonUnsupported, op, "UpdateService has no MultipartHttpPushUri")
	}
	params, _ := json.Marshal(map[string]any{"Targets": targets})
	api, err := c.Client(ctx)
	if err != nil {
		return "", wire.NotSent(op, err)
	}
	// The upload is cut, not refused, when the right to act could pass (withStream).
	if api, err = c.Client(wire.WithStream(ctx)); err != nil {
		return "", wire.NotSent(op, err)
	}
	resp, err := api.PostMultipart(svc.MultipartHTTPPushURI, map[string]io.Reader{
		"UpdateParameters": strings.NewReader(string(params)),
		"UpdateFile":       image,
	})
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	task := taskOf(resp)
	c.Log().V(1).Info("update pushed", "image", filepath.Base(image.Name()), "task", task, "status", resp.StatusCode)
	return task, nil
}

// Firmware is one component of the FirmwareInventory.
type Firmware struct {
	ID         string `json:"id"`
	Name       string `json:"name,omitempty"`
	Version    string `json:"version,omitempty"`
	Updateable bool   `json:"updateable"`
}

// UpdateRequest is a SimpleUpdate.
type UpdateRequest struct {
	ImageURI string
	// TransferProtocol is HTTP or HTTPS (default: from the URI's scheme).
	TransferProtocol string
	// Targets are FirmwareInventory (or system) URIs the image is for; empty lets the BMC
	// decide from the image.
	Targets []string
	// SystemID, when set, is proven (bmc.Expect) and added to Targets.
	SystemID string
	// Username and Password open the image server, where it needs them.
	Username, Password string
}

// TaskStatus is a Redfish task as read.
type TaskStatus struct {
	URI string `json:"uri"`
	// State is the TaskState: New, Starting, Running, Completed, Exception, Killed, ...
	State           string   `json:"state"`
	Status          string   `json:"status,omitempty"`
	PercentComplete int      `json:"percentComplete,omitempty"`
	Messages        []string `json:"messages,omitempty"`
	// Image is the ImageURI of the update the task carries out, from its Payload ("" when the
	// BMC does not say).
	Image string `json:"image,omitempty"`
	// StartTime is the task's StartTime as the BMC wrote it.
	StartTime string `json:"startTime,omitempty"`
	// RetryAfter is when the monitor said to look again (its Retry-After), 0 when it did not.
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
}

// Done reports whether the task ended (whatever the outcome).
func (t *TaskStatus) Done() bool {
	switch t.State {
	case "Completed", "Exception", "Killed", "Cancelled", "Interrupted":
		return true
	}
	return false
}

// Failed reports whether it ended without doing its work.
func (t *TaskStatus) Failed() bool { return t.Done() && t.State != "Completed" }
