package media

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// The VirtualMedia actions in the recorder (Record.Image is the image, Record.Device the
// device's Id).
const (
	ActionInsertMedia = "InsertMedia"
	ActionEjectMedia  = "EjectMedia"
)

// Device is the state of one virtual media device of a system.
type Device struct {
	hardware.MediaDevice
	Image    string
	Inserted bool
}

// Host is what the virtual media need of their system.
type Host interface {
	// Devices runs fn on the system's devices under the system's lock; fn says whether it
	// changed one (the system's ETag then moves).
	Devices(fn func(devs []Device) (changed bool))
	// Record records an action of the request r on the device id.
	Record(r *http.Request, action, image, id string)
}

// Serve serves a system's VirtualMedia collection at base and its InsertMedia and EjectMedia
// actions; rest are the segments after base.
func Serve(w http.ResponseWriter, r *http.Request, h Host, base string, rest []string, f *faults.Faults) {
	idx := -1
	if len(rest) > 0 {
		h.Devices(func(devs []Device) bool {
			idx = slices.IndexFunc(devs, func(m Device) bool { return m.ID == rest[0] })
			return false
		})
	}
	switch {
	case len(rest) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			var ids []string
			h.Devices(func(devs []Device) bool {
				ids = make([]string, len(devs))
				for i, m := range devs {
					ids[i] = base + "/" + m.ID
				}
				return false
			})
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base, "VirtualMediaCollection", "Virtual Media Services", ids))
		}
	case idx < 0:
		rfhttp.NotFound(w, r)
	case len(rest) == 1:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			var body rfhttp.Obj
			h.Devices(func(devs []Device) bool {
				body = deviceBody(devs[idx], base+"/"+rest[0])
				return false
			})
			rfhttp.WriteJSON(w, http.StatusOK, body)
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "VirtualMedia.InsertMedia":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			insert(w, r, h, idx, f)
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "VirtualMedia.EjectMedia":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			eject(w, r, h, idx)
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

func deviceBody(m Device, path string) rfhttp.Obj {
	var image any
	connected := "NotConnected"
	if m.Inserted {
		image, connected = m.Image, "URI"
	}
	return rfhttp.Obj{
		"@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "@odata.id": path, "Id": m.ID, "Name": "Virtual Media " + m.ID,
		"MediaTypes": m.Types, "Image": image, "Inserted": m.Inserted, "WriteProtected": true, "ConnectedVia": connected,
		"Actions": rfhttp.Obj{
			"#VirtualMedia.InsertMedia": rfhttp.Obj{"target": path + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  rfhttp.Obj{"target": path + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

func insert(w http.ResponseWriter, r *http.Request, h Host, idx int, f *faults.Faults) {
	var req struct {
		Image    string
		Inserted *bool
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The action InsertMedia requires the parameter Image to be present in the request body.")
		return
	}
	if f.MediaMountFails {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueFormatError", "Unable to locate the ISO or IMG image file or folder in the network share location because the file or folder path or the user credentials entered are incorrect.")
		return
	}
	var id string
	busy := false
	h.Devices(func(devs []Device) bool {
		m := &devs[idx]
		if m.Inserted {
			busy = true
			return false
		}
		m.Image, m.Inserted = req.Image, req.Inserted == nil || *req.Inserted
		id = m.ID
		return true
	})
	if busy {
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceInUse", "The virtual media is already connected; eject it first.")
		return
	}
	h.Record(r, ActionInsertMedia, req.Image, id)
	w.WriteHeader(http.StatusNoContent)
}

func eject(w http.ResponseWriter, r *http.Request, h Host, idx int) {
	var image, id string
	empty := false
	h.Devices(func(devs []Device) bool {
		m := &devs[idx]
		if !m.Inserted {
			empty = true
			return false
		}
		image, id = m.Image, m.ID
		m.Image, m.Inserted = "", false
		return true
	})
	if empty {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionNotSupported", "No virtual media is connected.")
		return
	}
	h.Record(r, ActionEjectMedia, image, id)
	w.WriteHeader(http.StatusNoContent)
}
