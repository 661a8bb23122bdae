package redfish

import (
	"net/http"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/update"
)

// Tasks is the system's BMC's TaskService, which runs the drives' erases and the volumes'
// initializations beside the updates.
func (h storageHost) Tasks() *update.Service { return &h.s.bmc.upd }

// Record records a storage action of the request r on the drive or volume device.
func (h storageHost) Record(r *http.Request, action, device, initializeType string) {
	s, b := h.s, h.s.bmc
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(),
		Action: action, Device: device, InitializeType: initializeType})
}

// Erasures counts the completed secure erases (Drive.SecureErase) of the system's drives, by
// drive Id; a drive never erased is not in it. A test reads it to know the BMC wiped a drive,
// not only that it was asked to (the recorder's ActionSecureErase); Disks has when each
// drive's last erase completed (LastErased).
func (s *System) Erasures() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, d := range s.hw.Disks {
		if d.Erasures > 0 {
			out[d.ID] = d.Erasures
		}
	}
	return out
}

// Initializations counts the completed initializations (Volume.Initialize) of the system's
// volumes, by volume Id; a volume never initialized is not in it, nor is a deleted one.
// Volumes has when each one's last initialization completed (LastInitialized).
func (s *System) Initializations() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, v := range s.hw.Volumes {
		if v.Initializations > 0 {
			out[v.ID] = v.Initializations
		}
	}
	return out
}
