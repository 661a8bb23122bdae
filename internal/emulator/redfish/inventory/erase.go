package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/update"
)

// refusal is an error answer decided under the system's lock and written after it.
type refusal struct {
	code       int
	msgID, msg string
}

func (e *refusal) write(w http.ResponseWriter) { rfhttp.WriteError(w, e.code, e.msgID, e.msg) }

// readAction decodes an action's JSON body into v; an absent or empty body is no parameters.
func readAction(r *http.Request, v any) *refusal {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return &refusal{http.StatusBadRequest, "MalformedJSON", "The request body could not be read: " + err.Error()}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &refusal{http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON."}
	}
	return nil
}

func eraseDuration(f *faults.Faults) time.Duration {
	if d := time.Duration(f.EraseDuration); d > 0 {
		return d
	}
	return defaultEraseDuration
}

// accepted answers an erase started as task (or the status of Faults.ErrorAfterEffect: begun,
// recorded, and the answer lost).
func accepted(w http.ResponseWriter, h Host, task string, f *faults.Faults) {
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed after it was accepted.")
		return
	}
	h.Tasks().WriteAccepted(w, task)
}

// secureErase starts the Drive.SecureErase of drive id.
func secureErase(w http.ResponseWriter, r *http.Request, h Host, sp, id string, f *faults.Faults) {
	if bad := readAction(r, &struct{}{}); bad != nil {
		bad.write(w)
		return
	}
	dp := sp + "/Drives/" + id
	var task string
	bad := &refusal{http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI " + r.URL.Path + " was not found."}
	h.Hardware(func(hw *hardware.System) bool {
		if !slices.ContainsFunc(hw.Disks, func(d hardware.Disk) bool { return d.ID == id }) {
			return false
		}
		if f.NoSecureErase {
			bad = &refusal{http.StatusBadRequest, "ActionNotSupported", "The action Drive.SecureErase is not supported by the resource " + dp + "."}
			return false
		}
		var err error
		task, err = h.Tasks().StartJob(update.Job{
			Name: "Secure erase of drive " + id, Key: "drive " + dp,
			Message: "Secure erase of drive " + id + ": every block of the drive is sanitized; nothing written to it before can be read back.",
			Target:  dp + "/Actions/Drive.SecureErase", Body: "{}", Duration: eraseDuration(f),
			Fail: f.EraseFails, FailMessage: "Secure erase of drive " + id + " failed: the drive did not complete the sanitize command; its data may remain.",
			NoPayload: f.TasksWithoutPayload,
			Done: func() {
				h.Hardware(func(hw *hardware.System) bool {
					if k := slices.IndexFunc(hw.Disks, func(d hardware.Disk) bool { return d.ID == id }); k >= 0 {
						hw.Disks[k].Erasures++
						hw.Disks[k].LastErased = time.Now()
					}
					return false
				})
			},
		})
		switch {
		case errors.Is(err, update.ErrInUse):
			bad = &refusal{http.StatusConflict, "ResourceInUse", "A secure erase of drive " + id + " is already running."}
		case err != nil:
			bad = &refusal{http.StatusInternalServerError, "InternalError", err.Error()}
		default:
			bad = nil
		}
		return false
	})
	if bad != nil {
		bad.write(w)
		return
	}
	h.Record(r, ActionSecureErase, id, "")
	accepted(w, h, task, f)
}

// initializeVolume starts the Volume.Initialize of volume id.
func initializeVolume(w http.ResponseWriter, r *http.Request, h Host, sp, id string, f *faults.Faults) {
	var req struct {
		InitializeType *string `json:"InitializeType"`
	}
	parseErr := readAction(r, &req)
	vp := sp + "/Volumes/" + id
	var task, typ string
	bad := &refusal{http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI " + r.URL.Path + " was not found."}
	h.Hardware(func(hw *hardware.System) bool {
		switch {
		case !slices.ContainsFunc(hw.Volumes, func(v hardware.Volume) bool { return v.ID == id }):
			return false
		case !initializes(f):
			bad = &refusal{http.StatusBadRequest, "ActionNotSupported", "The action Volume.Initialize is not supported by the resource " + vp + "."}
			return false
		case parseErr != nil:
			bad = parseErr
			return false
		case req.InitializeType == nil:
			bad = &refusal{http.StatusBadRequest, "ActionParameterMissing", "The action Volume.Initialize requires the parameter InitializeType to be present in the request body."}
			return false
		case !slices.Contains(initializeTypes, *req.InitializeType):
			bad = &refusal{http.StatusBadRequest, "ActionParameterNotSupported", "The parameter InitializeType value " + *req.InitializeType + " is not supported; allowed: Fast, Slow."}
			return false
		}
		typ = *req.InitializeType
		what := "its metadata and first blocks are cleared"
		if typ == "Slow" {
			what = "every block of it is overwritten with zeros"
		}
		body, _ := json.Marshal(map[string]string{"InitializeType": typ})
		var err error
		task, err = h.Tasks().StartJob(update.Job{
			Name: "Initialize volume " + id, Key: "volume " + vp,
			Message: typ + " initialization of volume " + id + ": " + what + ".",
			Target:  vp + "/Actions/Volume.Initialize", Body: string(body), Duration: eraseDuration(f),
			Fail: f.EraseFails, FailMessage: typ + " initialization of volume " + id + " failed; its data may remain.",
			NoPayload: f.TasksWithoutPayload,
			Done: func() {
				h.Hardware(func(hw *hardware.System) bool {
					if k := slices.IndexFunc(hw.Volumes, func(v hardware.Volume) bool { return v.ID == id }); k >= 0 {
						hw.Volumes[k].Initializations++
						hw.Volumes[k].LastInitialized = time.Now()
					}
					return false
				})
			},
		})
		switch {
		case errors.Is(err, update.ErrInUse):
			bad = &refusal{http.StatusConflict, "ResourceInUse", "An initialization of volume " + id + " is already running."}
		case err != nil:
			bad = &refusal{http.StatusInternalServerError, "InternalError", err.Error()}
		default:
			bad = nil
		}
		return false
	})
	if bad != nil {
		bad.write(w)
		return
	}
	h.Record(r, ActionInitializeVolume, id, typ)
	accepted(w, h, task, f)
}

// deleteVolume removes volume id, freeing its drives for another volume.
func deleteVolume(w http.ResponseWriter, r *http.Request, h Host, sp, id string, f *faults.Faults) {
	bad := &refusal{http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI " + r.URL.Path + " was not found."}
	h.Hardware(func(hw *hardware.System) bool {
		k := slices.IndexFunc(hw.Volumes, func(v hardware.Volume) bool { return v.ID == id })
		switch {
		case k < 0:
			return false
		case h.Tasks().Running("volume " + sp + "/Volumes/" + id):
			bad = &refusal{http.StatusConflict, "ResourceInUse", "The volume " + id + " is being initialized."}
			return false
		}
		hw.Volumes = slices.Delete(hw.Volumes, k, k+1)
		bad = nil
		return true
	})
	if bad != nil {
		bad.write(w)
		return
	}
	h.Record(r, ActionDeleteVolume, id, "")
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed after it was accepted.")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
