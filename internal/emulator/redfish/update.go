package redfish

import (
	"net/http"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/update"
)

// ActionSimpleUpdate is an accepted update, by SimpleUpdate or pushed to MultipartHttpPushUri
// (Record.Image is the ImageURI, or the pushed file's name; Record.Device the component: "BMC"
// or the BIOS of Record.SystemID).
const ActionSimpleUpdate = update.ActionSimpleUpdate

// FirmwareVersion is the BMC's firmware version.
func (b *BMC) FirmwareVersion() string {
	if v := b.upd.Firmware(); v != "" {
		return v
	}
	return b.mgrFW // as built
}

// SetFirmwareVersion sets the BMC's firmware version (as installed before the test).
func (b *BMC) SetFirmwareVersion(v string) { b.upd.SetFirmware(v) }

// activateStagedFirmware installs a BMC image that waited for the manager's reset.
func (b *BMC) activateStagedFirmware() { b.upd.ActivateStaged() }

// rebooting reports whether the BMC is down: for an update's reboot, or after a manager reset
// (LatencyModel.ResetSilence).
func (b *BMC) rebooting() bool { return b.silent() || b.upd.Down() }

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

// SetImageVersion says which version the image at uri installs, as a vendor's image carries it
// (the emulator fetches nothing). Images not named here install what update.VersionOf reads
// from their file name.
func (e *Emulator) SetImageVersion(uri, version string) { e.images.Store(uri, version) }

func (e *Emulator) imageVersion(uri string) string {
	if v, ok := e.images.Load(uri); ok {
		return v.(string)
	}
	return update.VersionOf(uri)
}

// updateHost is the BMC as its UpdateService sees it.
type updateHost struct{ b *BMC }

func (h updateHost) FirmwareVersion() string        { return h.b.FirmwareVersion() }
func (h updateHost) ImageVersion(uri string) string { return h.b.em.imageVersion(uri) }
func (h updateHost) Closing() <-chan struct{}       { return h.b.em.closing }
func (h updateHost) Rebooting()                     { h.b.ExpireSessions() }

func (h updateHost) SystemsBIOS() []update.SystemBIOS {
	out := make([]update.SystemBIOS, 0, len(h.b.systems))
	for _, s := range h.b.systems {
		out = append(out, update.SystemBIOS{ID: s.hw.ID, Version: s.BIOSVersion()})
	}
	return out
}

func (h updateHost) Record(r *http.Request, systemID, image, device string) {
	b := h.b
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: systemID, Action: ActionSimpleUpdate, Image: image, Device: device})
}

func (h updateHost) Rebooted() {
	h.b.lastReset.Store(time.Now().Truncate(time.Second).UnixNano())
	h.b.certs.Reset() // a certificate waiting for the BMC's restart is served from now on
}

func (h updateHost) StageBIOS(systemID, version string) {
	if s := h.b.byID[systemID]; s != nil {
		s.mu.Lock()
		s.pendingBIOS = version
		s.mu.Unlock()
	}
}
