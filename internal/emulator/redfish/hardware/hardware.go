// Package hardware generates the emulated fleet's machines: vendor profiles (how each vendor
// family shapes its Redfish tree: Ids, reset types, storage, virtual media) and, from a seed,
// deterministic systems with CPUs, DIMMs, NICs, disks and volumes.
//
// It is data only: no Redfish state, no HTTP. It must not import the emulator package.
package hardware

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Profile captures how one vendor family shapes its Redfish tree, so the
// client meets the variety real fleets have (IDs, reset types, storage).
type Profile struct {
	Name         string
	Manufacturer string
	Models       []string
	SystemID     string // single-system BMCs
	ManagerID    string
	ManagerModel string
	Firmware     []string
	BIOS         []string
	MACOUI       [3]byte
	NICID        func(k int) string
	StorageID    string
	DiskID       func(k int, storageID string) string
	SimpleOnly   bool     // only SimpleStorage, no Storage collection
	ResetTypes   []string // advertised
	ActionInfo   bool     // advertise via @Redfish.ActionInfo instead of inline
	UEFI         bool     // advertises BootSourceOverrideMode allowable values
	ResetStatus  int      // 200, 202 or 204
	LastReset    bool     // the Manager reports LastResetTime (older firmware does not)
	PatchStatus  int      // 200 or 204
	CPUs         []CPUModel
	// mediaOnManager: virtual media hangs off the Manager (older iDRAC, iLO, XCC, OpenBMC),
	// not the System (newer firmware); on a multi-system BMC it is always per system.
	MediaOnManager bool
	// media are the virtual media devices: Id and media types.
	Media []MediaDevice
	// httpBoot: UefiHttp is an advertised boot target and Boot has HttpBootUri.
	HTTPBoot bool
	// NoLegacyTelemetry: the chassis has no Power and Thermal resources (deprecated; newer
	// OpenBMC dropped them); TelemetrySubsystems: it has PowerSubsystem, ThermalSubsystem and
	// Sensors (newer firmware). Real fleets have all three mixes.
	NoLegacyTelemetry   bool
	TelemetrySubsystems bool
}

type MediaDevice struct {
	ID    string
	Types []string
}

var genericMedia = []MediaDevice{{"CD1", []string{"CD", "DVD"}}, {"USB1", []string{"USBStick"}}}

type CPUModel struct {
	Manufacturer, Model string
	Cores, MHz          int
}

var (
	intelCPUs = []CPUModel{
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", 32, 3200},
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", 16, 3400},
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", 40, 3400},
	}
	amdCPUs = []CPUModel{
		{"Advanced Micro Devices, Inc.", "AMD EPYC 7543 32-Core Processor", 32, 3700},
		{"Advanced Micro Devices, Inc.", "AMD EPYC 9354 32-Core Processor", 32, 3800},
	}
	allResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "PushPowerButton", "PowerCycle"}
)

var Profiles = []Profile{
	{
		Name: "dell", Manufacturer: "Dell Inc.", Models: []string{"PowerEdge R650", "PowerEdge R750", "PowerEdge R6525"},
		SystemID: "System.Embedded.1", ManagerID: "iDRAC.Embedded.1", ManagerModel: "15G Monolithic",
		Firmware: []string{"6.10.30.00", "7.00.00.171"}, BIOS: []string{"1.13.2", "2.1.5"},
		MACOUI:    [3]byte{0xb0, 0x26, 0x28},
		NICID:     func(k int) string { return fmt.Sprintf("NIC.Integrated.1-%d-1", k+1) },
		StorageID: "RAID.Integrated.1-1",
		DiskID: func(k int, s string) string {
			return fmt.Sprintf("Disk.Bay.%d:Enclosure.Internal.0-1:%s", k, s)
		},
		ResetTypes: []string{"On", "ForceOff", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PushPowerButton", "Nmi", "PowerCycle"},
		UEFI:       true, LastReset: true, ResetStatus: 204, PatchStatus: 200,
		CPUs:     append(append([]CPUModel{}, intelCPUs...), amdCPUs[0]),
		Media:    []MediaDevice{{"CD", []string{"CD", "DVD"}}, {"RemovableDisk", []string{"USBStick"}}},
		HTTPBoot: true, TelemetrySubsystems: true,
	},
	{
		Name: "hpe", Manufacturer: "HPE", Models: []string{"ProLiant DL360 Gen10 Plus", "ProLiant DL380 Gen10"},
		SystemID: "1", ManagerID: "1", ManagerModel: "iLO 5",
		Firmware: []string{"iLO 5 v2.72", "iLO 5 v2.81"}, BIOS: []string{"U46 v1.64 (11/12/2022)", "U30 v2.76 (02/09/2023)"},
		MACOUI: [3]byte{0x94, 0x40, 0xc9},
		NICID:  func(k int) string { return strconv.Itoa(k + 1) },
		// Older iLO only has SimpleStorage.
		SimpleOnly: true,
		ResetTypes: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PushPowerButton", "GracefulRestart"},
		UEFI:       true, ResetStatus: 200, PatchStatus: 200,
		CPUs:           intelCPUs,
		MediaOnManager: true, Media: []MediaDevice{{"1", []string{"Floppy", "USBStick"}}, {"2", []string{"CD", "DVD"}}},
		HTTPBoot: true,
	},
	{
		Name: "lenovo", Manufacturer: "Lenovo", Models: []string{"ThinkSystem SR650 V2", "ThinkSystem SR630"},
		SystemID: "1", ManagerID: "1", ManagerModel: "XClarity Controller",
		Firmware: []string{"CDI3A2K 6.40", "TEI3B8Q 4.90"}, BIOS: []string{"AFE128E-3.10", "IVE164G-2.40"},
		MACOUI:    [3]byte{0x08, 0x94, 0xef},
		NICID:     func(k int) string { return fmt.Sprintf("NIC%d", k+1) },
		StorageID: "RAID_Slot3",
		DiskID:    func(k int, _ string) string { return fmt.Sprintf("Disk_%d", k) },
		// No graceful restart: clients must not assume every type exists.
		ResetTypes: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "ForceOn", "PushPowerButton", "PowerCycle"},
		UEFI:       true, LastReset: true, ResetStatus: 202, PatchStatus: 204,
		CPUs:           intelCPUs,
		MediaOnManager: true, Media: []MediaDevice{{"EXT1", []string{"CD", "DVD"}}, {"EXT2", []string{"USBStick"}}},
		HTTPBoot: true, TelemetrySubsystems: true,
	},
	{
		Name: "supermicro", Manufacturer: "Supermicro", Models: []string{"SYS-1029U-TRT", "AS -1114S-WN10RT"},
		SystemID: "1", ManagerID: "1", ManagerModel: "ASPEED",
		Firmware: []string{"01.73.06", "01.01.20"}, BIOS: []string{"3.4", "2.0a"},
		MACOUI:     [3]byte{0xac, 0x1f, 0x6b},
		NICID:      func(k int) string { return strconv.Itoa(k + 1) },
		StorageID:  "HA-RAID",
		DiskID:     func(k int, _ string) string { return fmt.Sprintf("Disk.Bay.%d", k) },
		ResetTypes: []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"},
		ActionInfo: true, UEFI: false, ResetStatus: 200, PatchStatus: 200,
		CPUs: append(append([]CPUModel{}, intelCPUs[:2]...), amdCPUs...),
		// Older firmware: no UEFI HTTP boot.
		MediaOnManager: true, Media: genericMedia,
	},
	{
		Name: "openbmc", Manufacturer: "ASRockRack", Models: []string{"ROMED8HM3", "E3C246D4I-NL"},
		SystemID: "system", ManagerID: "bmc", ManagerModel: "OpenBmc",
		Firmware: []string{"2.14.0-dev-1234-g3a1b2c", "2.12.0"}, BIOS: []string{"L3.21", "P2.30"},
		MACOUI:     [3]byte{0x3c, 0xfd, 0xfe},
		NICID:      func(k int) string { return fmt.Sprintf("eth%d", k) },
		StorageID:  "1",
		DiskID:     func(k int, _ string) string { return fmt.Sprintf("drive%d", k) },
		ResetTypes: []string{"On", "ForceOff", "ForceOn", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PowerCycle", "Nmi"},
		ActionInfo: true, UEFI: true, LastReset: true, ResetStatus: 204, PatchStatus: 204,
		CPUs:           amdCPUs,
		MediaOnManager: true, Media: genericMedia, HTTPBoot: true,
		NoLegacyTelemetry: true, TelemetrySubsystems: true,
	},
}

type CPU struct {
	ID, Socket string
	CPUModel
}

type DIMM struct {
	ID, Manufacturer, PartNumber, Serial string
	CapacityMiB, SpeedMHz                int
}

type NIC struct {
	ID, MAC   string
	SpeedMbps int
	Connected bool
}

type Disk struct {
	ID, Model, Manufacturer, Serial, MediaType, Protocol string
	CapacityBytes                                        int64
	// Erasures counts the drive's completed secure erases (Drive.SecureErase) and LastErased
	// is when the last one completed: what a test asks to know a machine was wiped by its BMC.
	Erasures   int
	LastErased time.Time
}

type Volume struct {
	ID, Name, RAIDType string
	CapacityBytes      int64
	Drives             []int
	// Created is when a client made it (zero for the volumes a machine comes with).
	Created time.Time
	// Initializations counts the volume's completed initializations (Volume.Initialize, Fast
	// or Slow) and LastInitialized is when the last one completed.
	Initializations int
	LastInitialized time.Time
}

// System is the generated part of a system; the emulator changes only its storage (volumes
// made and deleted, drives erased, volumes initialized), under the system's lock.
type System struct {
	ID, UUID, Manufacturer, Model, Serial, SKU, PartNumber, BIOS string
	ChassisID                                                    string
	CPUs                                                         []CPU
	DIMMs                                                        []DIMM
	NICs                                                         []NIC
	Disks                                                        []Disk
	Volumes                                                      []Volume
}

const base36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

func randString(r *rand.Rand, alphabet string, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// encode36 writes v in base 36, zero padded to width: it embeds the global
// index in serials so they are unique, not just likely unique.
func encode36(v, width int) string {
	s := strings.ToUpper(strconv.FormatInt(int64(v), 36))
	for len(s) < width {
		s = "0" + s
	}
	return s
}

func UUID(r *rand.Rand, idx int) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	b[12], b[13], b[14], b[15] = byte(idx>>24), byte(idx>>16), byte(idx>>8), byte(idx)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func MAC(oui [3]byte, n int) string {
	return fmt.Sprintf("%02X:%02X:%02X:%02X:%02X:%02X", oui[0], oui[1], oui[2], byte(n>>16), byte(n>>8), byte(n))
}

func serialFor(p *Profile, r *rand.Rand, idx int) string {
	switch p.Name {
	case "dell": // 7-character service tag
		return randString(r, base36, 3) + encode36(idx, 4)
	case "hpe":
		return "CZ" + randString(r, "0123456789", 2) + randString(r, base36, 2) + encode36(idx, 4)
	case "lenovo":
		return "J30" + randString(r, base36, 1) + encode36(idx, 4)
	case "supermicro":
		return "S" + randString(r, "0123456789", 5) + encode36(idx, 4)
	default:
		return fmt.Sprintf("%03d", r.IntN(1000)) + randString(r, "ABCDEFGHJKLMNPRSTUVWXYZ", 2) + encode36(idx, 4) + "R" + strconv.Itoa(r.IntN(10))
	}
}

// IDStyle picks how systems on a multi-system BMC are named: numbers, serials
// or UUIDs, never something a client could guess.
type IDStyle int

const (
	idNumeric IDStyle = iota
	idSerial
	idUUID
)

// Generate builds the System of system k on a BMC. idx is the global
// system index (unique across the emulator).
func Generate(p *Profile, r *rand.Rand, idx, k, perBMC int, style IDStyle) System {
	h := System{
		Manufacturer: p.Manufacturer,
		Model:        p.Models[r.IntN(len(p.Models))],
		BIOS:         p.BIOS[r.IntN(len(p.BIOS))],
	}
	h.Serial = serialFor(p, r, idx)
	h.UUID = UUID(r, idx)
	h.SKU = h.Serial
	if p.Name != "dell" {
		h.SKU = strings.ToUpper(randString(r, base36, 10))
	}
	h.PartNumber = fmt.Sprintf("%s-%03d", strings.ToUpper(p.Name[:3]), r.IntN(1000))
	switch {
	case perBMC == 1:
		h.ID = p.SystemID
		h.ChassisID = p.SystemID
		if p.Name == "openbmc" {
			h.ChassisID = "chassis"
		}
	case style == idSerial:
		h.ID, h.ChassisID = h.Serial, h.Serial
	case style == idUUID:
		h.ID, h.ChassisID = h.UUID, "Enclosure-"+h.Serial
	default:
		h.ID, h.ChassisID = strconv.Itoa(k+1), "Node"+strconv.Itoa(k+1)
	}

	cm := p.CPUs[r.IntN(len(p.CPUs))]
	sockets := 1 + r.IntN(2)
	for s := range sockets {
		id := fmt.Sprintf("CPU%d", s)
		if p.Name == "dell" {
			id = fmt.Sprintf("CPU.Socket.%d", s+1)
		}
		h.CPUs = append(h.CPUs, CPU{ID: id, Socket: fmt.Sprintf("CPU %d", s+1), CPUModel: cm})
	}

	dimmCount := []int{4, 8, 12, 16}[r.IntN(4)]
	size := []int{16384, 32768, 65536}[r.IntN(3)]
	vendor := []string{"Samsung", "Micron Technology", "SK Hynix"}[r.IntN(3)]
	for d := range dimmCount {
		id := fmt.Sprintf("DIMM%d", d)
		if p.Name == "dell" {
			id = fmt.Sprintf("DIMM.Socket.%c%d", 'A'+d%2, d/2+1)
		}
		h.DIMMs = append(h.DIMMs, DIMM{
			ID: id, Manufacturer: vendor, PartNumber: fmt.Sprintf("M393A%dK40DB3-CWE", size/8192),
			Serial: strings.ToUpper(randString(r, "0123456789abcdef", 8)), CapacityMiB: size, SpeedMHz: 3200,
		})
	}

	nics := 2 + r.IntN(3)
	for n := range nics {
		speed, connected := 25000, n < 2
		if n >= 2 {
			speed = 1000
		}
		h.NICs = append(h.NICs, NIC{ID: p.NICID(n), MAC: MAC(p.MACOUI, idx*8+n), SpeedMbps: speed, Connected: connected})
	}

	disks := 1 + r.IntN(6)
	kind := r.IntN(3)
	for d := range disks {
		dk := Disk{Serial: strings.ToUpper(randString(r, base36, 12))}
		switch kind {
		case 0:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "MZ7LH480HBHQ0D3", "SAMSUNG", "SSD", "SATA", 480103981056
		case 1:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "Dell Ent NVMe P5600 MU U.2 1.6TB", "INTEL", "SSD", "NVMe", 1600321314816
		default:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "ST2400MM0129", "SEAGATE", "HDD", "SAS", 2399611242496
		}
		if p.DiskID != nil {
			dk.ID = p.DiskID(d, p.StorageID)
		} else {
			dk.ID = strconv.Itoa(d)
		}
		h.Disks = append(h.Disks, dk)
	}
	if !p.SimpleOnly && disks >= 2 {
		h.Volumes = append(h.Volumes, Volume{ID: "Volume0", Name: "OS", RAIDType: "RAID1", CapacityBytes: h.Disks[0].CapacityBytes, Drives: []int{0, 1}})
	}
	return h
}
