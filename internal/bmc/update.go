package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

func (c *conn) updateService(ctx context.Context) (*updateService, error) {
	api, err := c.client(ctx)
	if err != nil {
		return nil, err
	}
	if c.root.UpdateService.ID == "" {
		return nil, wire.New(ReasonUnsupported, "read update service", "service root has no UpdateService")
	}
	var svc updateService
	if err := wire.GetJSON(api, c.root.UpdateService.ID, &svc); err != nil {
		return nil, err
	}
	return &svc, nil
}

// FirmwareInventory implements BMC.
func (c *conn) FirmwareInventory(ctx context.Context) ([]Firmware, error) {
	const op = "read firmware inventory"
	svc, err := c.updateService(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if svc.FirmwareInventory.ID == "" {
		return nil, wire.New(ReasonNotFound, op, "UpdateService has no FirmwareInventory")
	}
	api, err := c.client(ctx)
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

// SimpleUpdate implements BMC.
func (c *conn) SimpleUpdate(ctx context.Context, req UpdateRequest) (string, error) {
	op := "simple update " + req.ImageURI
	if req.ImageURI == "" {
		return "", wire.New(ReasonInvalidConfig, op, "no image URI")
	}
	targets := append([]string(nil), req.Targets...)
	if req.SystemID != "" {
		sys, err := c.getSystem(ctx, req.SystemID)
		if err != nil {
			return "", wire.Wrap(op, err)
		}
		targets = append(targets, sys.ODataID)
	}
	svc, err := c.updateService(ctx)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	if svc.Actions.SimpleUpdate.Target == "" {
		return "", wire.New(ReasonUnsupported, op, "UpdateService does not offer SimpleUpdate")
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
	api, err := c.client(ctx)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	resp, err := api.Post(svc.Actions.SimpleUpdate.Target, body)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	task := resp.Header.Get("Location")
	if task == "" {
		var t struct {
			ODataID string `json:"@odata.id"`
		}
		if json.NewDecoder(resp.Body).Decode(&t) == nil && strings.Contains(t.ODataID, "/Task") {
			task = t.ODataID
		}
	}
	c.log.V(1).Info("update accepted", "image", req.ImageURI, "task", task, "status", resp.StatusCode)
	return task, nil
}

// Task implements BMC.
func (c *conn) Task(ctx context.Context, uri string) (*TaskStatus, error) {
	op := "read task " + uri
	api, err := c.client(ctx)
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
		return nil, wire.New(ReasonUnknown, op, "no TaskState in the answer")
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

// Tasks implements BMC.
func (c *conn) Tasks(ctx context.Context) ([]TaskStatus, error) {
	const op = "list tasks"
	api, err := c.client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if c.root.Tasks.ID == "" {
		return nil, wire.New(ReasonUnsupported, op, "service root has no TaskService")
	}
	var svc struct{ Tasks wire.Link }
	if err := wire.GetJSON(api, c.root.Tasks.ID, &svc); err != nil {
		return nil, wire.Wrap(op, err)
	}
	if svc.Tasks.ID == "" {
		return nil, wire.New(ReasonUnsupported, op, "TaskService has no Tasks collection")
	}
	// Every page: a BMC lists its tasks in its own order, and an update whose answer was lost
	// may be anywhere in it.
	var members []wire.Link
	next := svc.Tasks.ID
	for page := 0; next != ""; page++ {
		if page == maxTaskPages || len(members) > maxTasks {
			return nil, wire.New(ReasonUnknown, op, "more than %d tasks listed: too many to tell which is whose", maxTasks)
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
			if ReasonOf(wire.Wrap(op, err)) == ReasonNotFound {
				continue // ended and dropped while the list was read
			}
			return nil, wire.Wrap(op, err)
		}
		out = append(out, *t.status(m.ID))
	}
	return out, nil
}

// UpdateMethods implements BMC.
func (c *conn) UpdateMethods(ctx context.Context) (simple, push bool, err error) {
	svc, err := c.updateService(ctx)
	if err != nil {
		return false, false, wire.Wrap("read update service", err)
	}
	return svc.Actions.SimpleUpdate.Target != "", svc.MultipartHTTPPushURI != "", nil
}

// PushUpdate implements BMC.
func (c *conn) PushUpdate(ctx context.Context, req UpdateRequest, image *os.File) (string, error) {
	op := "push update " + filepath.Base(image.Name())
	targets := append([]string(nil), req.Targets...)
	if req.SystemID != "" {
		sys, err := c.getSystem(ctx, req.SystemID)
		if err != nil {
			return "", wire.NotSent(op, err)
		}
		targets = append(targets, sys.ODataID)
	}
	svc, err := c.updateService(ctx)
	if err != nil {
		return "", wire.NotSent(op, err)
	}
	if svc.MultipartHTTPPushURI == "" {
		return "", wire.New(ReasonUnsupported, op, "UpdateService has no MultipartHttpPushUri")
	}
	params, _ := json.Marshal(map[string]any{"Targets": targets})
	api, err := c.client(ctx)
	if err != nil {
		return "", wire.NotSent(op, err)
	}
	// The upload is cut, not refused, when the right to act could pass (withStream).
	if api, err = c.client(wire.WithStream(ctx)); err != nil {
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
	task := resp.Header.Get("Location")
	if task == "" {
		var t struct {
			ODataID string `json:"@odata.id"`
		}
		if json.NewDecoder(resp.Body).Decode(&t) == nil && strings.Contains(t.ODataID, "/Task") {
			task = t.ODataID
		}
	}
	c.log.V(1).Info("update pushed", "image", filepath.Base(image.Name()), "task", task, "status", resp.StatusCode)
	return task, nil
}
