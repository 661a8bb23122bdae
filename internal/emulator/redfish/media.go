package redfish

import (
	"encoding/json"
	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"net/http"
	"slices"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// medium is the state of one virtual media device of a system.
type medium struct {
	hardware.MediaDevice
	image    string
	inserted bool
}

// Media is one virtual media device as a test sees it.
type Media struct {
	ID       string   `json:"id"`
	Types    []string `json:"types"`
	Image    string   `json:"image,omitempty"`
	Inserted bool     `json:"inserted"`
}

// Media lists the system's virtual media devices.
func (s *System) Media() []Media {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Media, len(s.media))
	for i, m := range s.media {
		out[i] = Media{ID: m.ID, Types: slices.Clone(m.Types), Image: m.image, Inserted: m.inserted}
	}
	return out
}

// mediaOnManager says the BMC serves the virtual media under its Manager: where the profile
// does and the BMC has one system (a manager's devices cannot belong to several).
func (b *BMC) mediaOnManager() bool { return b.profile.MediaOnManager && len(b.systems) == 1 }

func (b *BMC) httpBoot(f *Faults) bool { return b.profile.HTTPBoot && !f.NoHTTPBoot }

func (b *BMC) bootTargets(f *Faults) []string {
	if b.httpBoot(f) {
		return bootTargets
	}
	return slices.DeleteFunc(slices.Clone(bootTargets), func(t string) bool { return t == "UefiHttp" })
}

// serveMedia serves a system's VirtualMedia collection at base and its InsertMedia and
// EjectMedia actions.
func (b *BMC) serveMedia(w http.ResponseWriter, r *http.Request, s *System, base string, rest []string, f *Faults) {
	s.mu.Lock()
	idx := -1
	if len(rest) > 0 {
		idx = slices.IndexFunc(s.media, func(m medium) bool { return m.ID == rest[0] })
	}
	s.mu.Unlock()
	switch {
	case len(rest) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			s.mu.Lock()
			ids := make([]string, len(s.media))
			for i, m := range s.media {
				ids[i] = base + "/" + m.ID
			}
			s.mu.Unlock()
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base, "VirtualMediaCollection", "Virtual Media Services", ids))
		}
	case idx < 0:
		rfhttp.NotFound(w, r)
	case len(rest) == 1:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			s.mu.Lock()
			body := mediaBody(s.media[idx], base+"/"+rest[0])
			s.mu.Unlock()
			rfhttp.WriteJSON(w, http.StatusOK, body)
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "VirtualMedia.InsertMedia":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			b.insertMedia(w, r, s, idx, f)
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "VirtualMedia.EjectMedia":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			b.ejectMedia(w, r, s, idx)
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

func mediaBody(m medium, path string) obj {
	var image any
	connected := "NotConnected"
	if m.inserted {
		image, connected = m.image, "URI"
	}
	return obj{
		"@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "@odata.id": path, "Id": m.ID, "Name": "Virtual Media " + m.ID,
		"MediaTypes": m.Types, "Image": image, "Inserted": m.inserted, "WriteProtected": true, "ConnectedVia": connected,
		"Actions": obj{
			"#VirtualMedia.InsertMedia": obj{"target": path + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  obj{"target": path + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

func (b *BMC) insertMedia(w http.ResponseWriter, r *http.Request, s *System, idx int, f *Faults) {
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
	s.mu.Lock()
	m := &s.media[idx]
	if m.inserted {
		s.mu.Unlock()
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceInUse", "The virtual media is already connected; eject it first.")
		return
	}
	m.image, m.inserted = req.Image, req.Inserted == nil || *req.Inserted
	id := m.ID
	s.etag++
	s.mu.Unlock()
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionInsertMedia, Image: req.Image, Device: id})
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) ejectMedia(w http.ResponseWriter, r *http.Request, s *System, idx int) {
	s.mu.Lock()
	m := &s.media[idx]
	if !m.inserted {
		s.mu.Unlock()
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionNotSupported", "No virtual media is connected.")
		return
	}
	image, id := m.image, m.ID
	m.image, m.inserted = "", false
	s.etag++
	s.mu.Unlock()
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionEjectMedia, Image: image, Device: id})
	w.WriteHeader(http.StatusNoContent)
}
