package redfish

import (
	"net/http"
	"slices"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/media"
)

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
		out[i] = Media{ID: m.ID, Types: slices.Clone(m.Types), Image: m.Image, Inserted: m.Inserted}
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

// mediaHost is a system as its virtual media see it.
type mediaHost struct{ s *System }

func (h mediaHost) Devices(fn func([]media.Device) bool) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if fn(h.s.media) {
		h.s.etag++
	}
}

func (h mediaHost) Record(r *http.Request, action, image, id string) {
	s, b := h.s, h.s.bmc
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: action, Image: image, Device: id})
}
