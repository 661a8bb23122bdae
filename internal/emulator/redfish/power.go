package redfish

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/inventory"
	"github.com/metalhub/metalhub/internal/emulator/redfish/media"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sel"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
)

// BootOverride is the Boot.BootSourceOverride* triple.
type BootOverride struct {
	Enabled string `json:"enabled"`
	Target  string `json:"target"`
	Mode    string `json:"mode,omitempty"`
	// HTTPBootURI is Boot.HttpBootUri (UefiHttp).
	HTTPBootURI string `json:"httpBootURI,omitempty"`
}

// BootEvent is what the boot hook receives when a system powers on with a
// PXE override set, a UefiHttp one, or a Cd one with a virtual CD inserted. A discovery agent
// can use the MACs to answer the boot.
type BootEvent struct {
	Time         time.Time `json:"time"`
	BMC          int       `json:"bmc"`
	Address      string    `json:"address"`
	SystemID     string    `json:"systemId"`
	UUID         string    `json:"uuid"`
	SerialNumber string    `json:"serialNumber"`
	// MACs are the host NIC MACs, the PXE-capable (first connected) NIC first.
	MACs []string `json:"macs"`
	// Enabled is Once (consumed by this boot) or Continuous.
	Enabled string `json:"enabled"`
	Target  string `json:"target"`
	Mode    string `json:"mode,omitempty"`
	// Image is what the system booted for UefiHttp (its HttpBootUri) and Cd (the inserted
	// virtual CD's image).
	Image string `json:"image,omitempty"`
}

// Record is one accepted power action or boot override change.
type Record struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	BMC     int       `json:"bmc"`
	Address string    `json:"address"`
	// Via is the address the request was sent to when another BMC's answered it (AnswerAs):
	// the action reached a machine the sender did not address.
	Via      string `json:"via,omitempty"`
	SystemID string `json:"systemId"`
	// UUID is the system's UUID when the action was carried out (a board can be replaced).
	UUID      string        `json:"uuid,omitempty"`
	Action    string        `json:"action"` // "Reset", "BootOverride", "IndicatorLED" or "ManagerReset"
	ResetType string        `json:"resetType,omitempty"`
	Boot      *BootOverride `json:"boot,omitempty"`
	// LED is the locator LED an IndicatorLED action set: Lit, Blinking or Off.
	LED string `json:"led,omitempty"`
	// Image is the image of an InsertMedia or EjectMedia action; Device the virtual media Id,
	// an update's component, or the drive's or volume's Id of a SecureErase, InitializeVolume
	// or DeleteVolume action.
	Image  string `json:"image,omitempty"`
	Device string `json:"device,omitempty"`
	// InitializeType is an InitializeVolume action's InitializeType: Fast or Slow.
	InitializeType string `json:"initializeType,omitempty"`
	// Settings are the BIOS attributes a BiosSettings action staged (values printed).
	Settings map[string]string `json:"settings,omitempty"`
	// BootOrder is the order a BootOrder action set.
	BootOrder []string `json:"bootOrder,omitempty"`
	// Account is the user of an account action.
	Account string `json:"account,omitempty"`
	// Subscription is the EventDestination URI of a Subscribe or Unsubscribe action, Destination
	// where its events go (without credentials).
	Subscription string `json:"subscription,omitempty"`
	Destination  string `json:"destination,omitempty"`
	// Certificate is the certificate collection of a GenerateCSR, the certificate replaced by a
	// ReplaceCertificate; CommonName the subject's common name (of the request, of the
	// certificate installed).
	Certificate string `json:"certificate,omitempty"`
	CommonName  string `json:"commonName,omitempty"`
}

// Record actions.
const (
	ActionReset        = "Reset"
	ActionBootOverride = "BootOverride"
	// ActionIndicatorLED is a write of the locator LED (IndicatorLED or LocationIndicatorActive).
	ActionIndicatorLED = "IndicatorLED"
	// ActionManagerReset is a reset of the BMC itself (Manager.Reset); SystemID is empty.
	ActionManagerReset = "ManagerReset"
	// ActionInsertMedia and ActionEjectMedia are VirtualMedia actions.
	ActionInsertMedia = media.ActionInsertMedia
	ActionEjectMedia  = media.ActionEjectMedia
	// ActionBootOrder is a write of Boot.BootOrder.
	ActionBootOrder = "BootOrder"
	// ActionSecureErase is an accepted Drive.SecureErase, recorded when its task starts (Device
	// the drive's Id); System.Erasures counts the completed ones.
	ActionSecureErase = inventory.ActionSecureErase
	// ActionInitializeVolume is an accepted Volume.Initialize, recorded when its task starts
	// (Device the volume's Id, InitializeType Fast or Slow); System.Initializations counts the
	// completed ones.
	ActionInitializeVolume = inventory.ActionInitializeVolume
	// ActionDeleteVolume is a volume deleted (Device its Id).
	ActionDeleteVolume = inventory.ActionDeleteVolume
)

// maxRecords bounds the recorder so a long soak cannot eat memory.
const maxRecords = 100000

type recorder struct {
	mu   sync.Mutex
	seq  int64
	recs []Record
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if len(r.recs) >= maxRecords {
		r.recs = slices.Delete(r.recs, 0, len(r.recs)/10)
	}
	r.recs = append(r.recs, rec)
}

func (r *recorder) list() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

func (r *recorder) clear() {
	r.mu.Lock()
	r.recs = nil
	r.mu.Unlock()
}

// System is one emulated computer system.
type System struct {
	bmc *BMC
	hw  hardware.System

	mu    sync.Mutex
	power string
	boot  BootOverride
	led   string
	media []media.Device
	// bootOrder is Boot.BootOrder (BootOptionReferences).
	bootOrder []string
	// pendingBIOS is a flashed BIOS version that the next reset installs.
	pendingBIOS string
	// bios are the BIOS attributes in effect (defaultBios until changed); biosPending what the
	// next reset applies.
	bios, biosPending map[string]any
	// biosWriteOnly are attributes that read back as null (a BIOS password): set, never shown.
	biosWriteOnly map[string]bool
	etag          uint64
	gen           uint64 // bumps on every power action; stale timers see it and stop
	timer         *time.Timer
	// failing makes the transitions of the current reset fail (Faults.FailPowerTransitions).
	failing bool
	// lastReset is when the system last came out of a reset (unix nanoseconds): a restart or a
	// power-on moves it, a power-off does not. Shown as LastResetTime where the BMC reports it.
	lastReset int64
	// sel is the system's event log and the health it drives (package sel); it has its own lock,
	// taken after mu where both are.
	sel sel.Log
	// sens are the system's sensors and failed parts (package sensors).
	sens sensors.Machine
}

// ID is the Redfish Id.
func (s *System) ID() string { return s.hw.ID }

// UUID is the system UUID.
func (s *System) UUID() string { s.mu.Lock(); defer s.mu.Unlock(); return s.hw.UUID }

// SerialNumber is the system serial number.
func (s *System) SerialNumber() string { s.mu.Lock(); defer s.mu.Unlock(); return s.hw.Serial }

// ReplaceBoard gives the system another UUID and serial number, as a replaced mainboard does
// behind the same BMC address and system path.
func (s *System) ReplaceBoard(uuid, serial string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw.UUID, s.hw.Serial = uuid, serial
	s.etag++
}

// MACs lists the host NIC MACs in NIC order.
func (s *System) MACs() []string {
	out := make([]string, len(s.hw.NICs))
	for i, n := range s.hw.NICs {
		out[i] = n.MAC
	}
	return out
}

// PowerState is the current power state.
func (s *System) PowerState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.power
}

// LastResetTime is when the system last came out of a reset (shown or not).
func (s *System) LastResetTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Unix(0, s.lastReset)
}

// Boot is the current boot override (as stored, not as read back).
func (s *System) Boot() BootOverride {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boot
}

// BootOrder is the system's boot order (BootOptionReferences).
func (s *System) BootOrder() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bootOrder)
}

// bootOptions are every system's boot options, in their initial order.
var bootOptions = []struct{ ref, name string }{
	{"Boot0000", "PXE Device 1: Integrated NIC 1 Port 1"},
	{"Boot0001", "Hard Disk: Internal RAID"},
	{"Boot0002", "Virtual CD"},
	{"Boot0003", "UEFI HTTPv4 Device: Integrated NIC 1 Port 1"},
}

func samePermutation(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y) && len(slices.Compact(x)) == len(a)
}

// SetPowerState forces a power state at once (test setup; not recorded).
func (s *System) SetPowerState(state string) {
	s.mu.Lock()
	s.gen++
	s.power = state
	s.etag++
	s.mu.Unlock()
}

func (s *System) stopTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *System) allowedResetTypes() []string { return s.bmc.profile.ResetTypes }

// reset applies a ResetType; the caller validated it. Transitions run on
// timers so the BMC answers at once and PowerState moves later.
func (s *System) reset(resetType string, ignoreGraceful, fail bool) {
	delay := time.Duration(s.bmc.powerDelay.Load())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = fail
	on := s.power == PowerOn || s.power == PowerPoweringOn
	switch resetType {
	case "On", "ForceOn":
		if !on {
			s.resetMovedLocked()
			s.transitionLocked(PowerPoweringOn, PowerOn, delay)
		}
	case "ForceOff":
		if on || s.power == PowerPoweringOff {
			s.transitionLocked(PowerPoweringOff, PowerOff, delay)
		}
	case "GracefulShutdown":
		if ignoreGraceful {
			return // some OSes never act on the ACPI request
		}
		if on {
			s.transitionLocked(PowerPoweringOff, PowerOff, delay)
		}
	case "PushPowerButton":
		if on {
			if !ignoreGraceful {
				s.transitionLocked(PowerPoweringOff, PowerOff, delay)
			}
		} else {
			s.resetMovedLocked()
			s.transitionLocked(PowerPoweringOn, PowerOn, delay)
		}
	case "GracefulRestart":
		if ignoreGraceful && on {
			return
		}
		s.resetMovedLocked()
		s.restartLocked(delay)
	case "ForceRestart", "PowerCycle":
		s.resetMovedLocked()
		s.restartLocked(delay)
	case "Nmi":
	}
}

// resetMovedLocked moves LastResetTime for a reset that restarts or powers on the system. It is
// moved when the reset is accepted, in seconds as BMCs report it; a reset within the same
// second as the last still moves it.
func (s *System) resetMovedLocked() {
	if s.pendingBIOS != "" {
		// A staged BIOS image is installed on the way through POST.
		s.hw.BIOS, s.pendingBIOS = s.pendingBIOS, ""
	}
	s.applyBiosLocked()
	next := time.Now().Truncate(time.Second)
	if last := time.Unix(0, s.lastReset); !next.After(last) {
		next = last.Add(time.Second)
	}
	s.lastReset = next.UnixNano()
}

// restartLocked goes through PoweringOff then PoweringOn; an Off system
// simply powers on, as most BMCs do.
func (s *System) restartLocked(delay time.Duration) {
	if s.power == PowerOff || s.power == PowerPoweringOff {
		s.transitionLocked(PowerPoweringOn, PowerOn, delay)
		return
	}
	s.gen++
	gen := s.gen
	s.power = PowerPoweringOff
	s.etag++
	s.schedule(delay/2, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen != gen {
			return
		}
		s.transitionLocked(PowerPoweringOn, PowerOn, delay-delay/2)
	})
}

// transitionLocked sets an intermediate state now and the final one after
// delay, firing the boot hook when the system reaches On.
func (s *System) transitionLocked(mid, final string, delay time.Duration) {
	s.gen++
	gen := s.gen
	if s.failing {
		// The transition starts and does not complete: back to where it was.
		final = s.power
		if final == PowerPoweringOn || final == PowerPoweringOff {
			final = PowerOff
		}
	}
	if delay <= 0 {
		s.settleLocked(final)
		return
	}
	s.power = mid
	s.etag++
	s.schedule(delay, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen != gen {
			return
		}
		s.settleLocked(final)
	})
}

func (s *System) schedule(d time.Duration, f func()) {
	if s.timer != nil {
		s.timer.Stop()
	}
	select {
	case <-s.bmc.em.closing:
		return
	default:
	}
	s.timer = time.AfterFunc(d, f)
}

func (s *System) settleLocked(final string) {
	s.power = final
	s.etag++
	if final != PowerOn || (s.boot.Enabled != "Once" && s.boot.Enabled != "Continuous") {
		return
	}
	var image string
	switch s.boot.Target {
	case "Pxe":
	case "UefiHttp":
		image = s.boot.HTTPBootURI
	case "Cd":
		for _, m := range s.media {
			if m.Inserted && slices.Contains(m.Types, "CD") {
				image = m.Image
				break
			}
		}
		if image == "" {
			// Nothing in the drive: the firmware falls through to its boot order.
			if s.boot.Enabled == "Once" {
				s.boot.Enabled = "Disabled"
			}
			return
		}
	default:
		return
	}
	ev := BootEvent{
		Time: time.Now(), BMC: s.bmc.index, Address: s.bmc.url, SystemID: s.hw.ID,
		UUID: s.hw.UUID, SerialNumber: s.hw.Serial, Enabled: s.boot.Enabled,
		Target: s.boot.Target, Mode: s.boot.Mode, MACs: s.pxeOrderedMACs(), Image: image,
	}
	if s.boot.Enabled == "Once" {
		// Real BMCs consume a one-time override on the boot that uses it.
		s.boot.Enabled = "Disabled"
	}
	if hook := s.bmc.em.hook.Load(); hook != nil {
		go (*hook)(ev)
	}
}

func (s *System) pxeOrderedMACs() []string {
	var first, rest []string
	for _, n := range s.hw.NICs {
		if n.Connected && first == nil {
			first = append(first, n.MAC)
			continue
		}
		rest = append(rest, n.MAC)
	}
	return append(first, rest...)
}

func (s *System) etagLocked() string { return `W/"` + itoa(int64(s.etag)) + `"` }

func validBootTarget(t string) bool {
	return slices.Contains(bootTargets, t)
}

var bootTargets = []string{"None", "Pxe", "Hdd", "Cd", "Usb", "BiosSetup", "UefiShell", "UefiHttp"}

func normalizeEnabled(v string) string {
	for _, e := range []string{"Disabled", "Once", "Continuous"} {
		if strings.EqualFold(e, v) {
			return e
		}
	}
	return ""
}

// HostReset resets the system the way its owner does outside this BMC's Redfish service (the
// OS rebooting, the power button, another manager's out-of-band path): carried out as a Redfish
// ComputerSystem.Reset of resetType is (staged BIOS settings and images installed, LastResetTime
// moved), but not recorded, since the records are what Redfish clients asked of the BMC.
func (s *System) HostReset(resetType string) {
	s.reset(resetType, false, false)
}
