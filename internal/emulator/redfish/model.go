package redfish

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// profile captures how one vendor family shapes its Redfish tree, so the
// client meets the variety real fleets have (IDs, reset types, storage).
type profile struct {
	name         string
	manufacturer string
	models       []string
	systemID     string // single-system BMCs
	managerID    string
	managerModel string
	firmware     []string
	bios         []string
	macOUI       [3]byte
	nicID        func(k int) string
	storageID    string
	diskID       func(k int, storageID string) string
	simpleOnly   bool     // only SimpleStorage, no Storage collection
	resetTypes   []string // advertised
	actionInfo   bool     // advertise via @Redfish.ActionInfo instead of inline
	uefi         bool     // advertises BootSourceOverrideMode allowable values
	resetStatus  int      // 200, 202 or 204
	lastReset    bool     // the Manager reports LastResetTime (older firmware does not)
	patchStatus  int      // 200 or 204
	cpus         []cpuModel
	// mediaOnManager: virtual media hangs off the Manager (older iDRAC, iLO, XCC, OpenBMC),
	// not the System (newer firmware); on a multi-system BMC it is always per system.
	mediaOnManager bool
	// media are the virtual media devices: Id and media types.
	media []mediaDevice
	// httpBoot: UefiHttp is an advertised boot target and Boot has HttpBootUri.
	httpBoot bool
}

type mediaDevice struct {
	id    string
	types []string
}

var genericMedia = []mediaDevice{{"CD1", []string{"CD", "DVD"}}, {"USB1", []string{"USBStick"}}}

type cpuModel struct {
	manufacturer, model string
	cores, mhz          int
}

var (
	intelCPUs = []cpuModel{
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", 32, 3200},
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", 16, 3400},
		{"Intel(R) Corporation", "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", 40, 3400},
	}
	amdCPUs = []cpuModel{
		{"Advanced Micro Devices, Inc.", "AMD EPYC 7543 32-Core Processor", 32, 3700},
		{"Advanced Micro Devices, Inc.", "AMD EPYC 9354 32-Core Processor", 32, 3800},
	}
	allResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "PushPowerButton", "PowerCycle"}
)

var profiles = []profile{
	{
		name: "dell", manufacturer: "Dell Inc.", models: []string{"PowerEdge R650", "PowerEdge R750", "PowerEdge R6525"},
		systemID: "System.Embedded.1", managerID: "iDRAC.Embedded.1", managerModel: "15G Monolithic",
		firmware: []string{"6.10.30.00", "7.00.00.171"}, bios: []string{"1.13.2", "2.1.5"},
		macOUI:    [3]byte{0xb0, 0x26, 0x28},
		nicID:     func(k int) string { return fmt.Sprintf("NIC.Integrated.1-%d-1", k+1) },
		storageID: "RAID.Integrated.1-1",
		diskID: func(k int, s string) string {
			return fmt.Sprintf("Disk.Bay.%d:Enclosure.Internal.0-1:%s", k, s)
		},
		resetTypes: []string{"On", "ForceOff", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PushPowerButton", "Nmi", "PowerCycle"},
		uefi:       true, lastReset: true, resetStatus: 204, patchStatus: 200,
		cpus:     append(append([]cpuModel{}, intelCPUs...), amdCPUs[0]),
		media:    []mediaDevice{{"CD", []string{"CD", "DVD"}}, {"RemovableDisk", []string{"USBStick"}}},
		httpBoot: true,
	},
	{
		name: "hpe", manufacturer: "HPE", models: []string{"ProLiant DL360 Gen10 Plus", "ProLiant DL380 Gen10"},
		systemID: "1", managerID: "1", managerModel: "iLO 5",
		firmware: []string{"iLO 5 v2.72", "iLO 5 v2.81"}, bios: []string{"U46 v1.64 (11/12/2022)", "U30 v2.76 (02/09/2023)"},
		macOUI: [3]byte{0x94, 0x40, 0xc9},
		nicID:  func(k int) string { return strconv.Itoa(k + 1) },
		// Older iLO only has SimpleStorage.
		simpleOnly: true,
		resetTypes: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PushPowerButton", "GracefulRestart"},
		uefi:       true, resetStatus: 200, patchStatus: 200,
		cpus:           intelCPUs,
		mediaOnManager: true, media: []mediaDevice{{"1", []string{"Floppy", "USBStick"}}, {"2", []string{"CD", "DVD"}}},
		httpBoot: true,
	},
	{
		name: "lenovo", manufacturer: "Lenovo", models: []string{"ThinkSystem SR650 V2", "ThinkSystem SR630"},
		systemID: "1", managerID: "1", managerModel: "XClarity Controller",
		firmware: []string{"CDI3A2K 6.40", "TEI3B8Q 4.90"}, bios: []string{"AFE128E-3.10", "IVE164G-2.40"},
		macOUI:    [3]byte{0x08, 0x94, 0xef},
		nicID:     func(k int) string { return fmt.Sprintf("NIC%d", k+1) },
		storageID: "RAID_Slot3",
		diskID:    func(k int, _ string) string { return fmt.Sprintf("Disk_%d", k) },
		// No graceful restart: clients must not assume every type exists.
		resetTypes: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "ForceOn", "PushPowerButton", "PowerCycle"},
		uefi:       true, lastReset: true, resetStatus: 202, patchStatus: 204,
		cpus:           intelCPUs,
		mediaOnManager: true, media: []mediaDevice{{"EXT1", []string{"CD", "DVD"}}, {"EXT2", []string{"USBStick"}}},
		httpBoot: true,
	},
	{
		name: "supermicro", manufacturer: "Supermicro", models: []string{"SYS-1029U-TRT", "AS -1114S-WN10RT"},
		systemID: "1", managerID: "1", managerModel: "ASPEED",
		firmware: []string{"01.73.06", "01.01.20"}, bios: []string{"3.4", "2.0a"},
		macOUI:     [3]byte{0xac, 0x1f, 0x6b},
		nicID:      func(k int) string { return strconv.Itoa(k + 1) },
		storageID:  "HA-RAID",
		diskID:     func(k int, _ string) string { return fmt.Sprintf("Disk.Bay.%d", k) },
		resetTypes: []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"},
		actionInfo: true, uefi: false, resetStatus: 200, patchStatus: 200,
		cpus: append(append([]cpuModel{}, intelCPUs[:2]...), amdCPUs...),
		// Older firmware: no UEFI HTTP boot.
		mediaOnManager: true, media: genericMedia,
	},
	{
		name: "openbmc", manufacturer: "ASRockRack", models: []string{"ROMED8HM3", "E3C246D4I-NL"},
		systemID: "system", managerID: "bmc", managerModel: "OpenBmc",
		firmware: []string{"2.14.0-dev-1234-g3a1b2c", "2.12.0"}, bios: []string{"L3.21", "P2.30"},
		macOUI:     [3]byte{0x3c, 0xfd, 0xfe},
		nicID:      func(k int) string { return fmt.Sprintf("eth%d", k) },
		storageID:  "1",
		diskID:     func(k int, _ string) string { return fmt.Sprintf("drive%d", k) },
		resetTypes: []string{"On", "ForceOff", "ForceOn", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PowerCycle", "Nmi"},
		actionInfo: true, uefi: true, lastReset: true, resetStatus: 204, patchStatus: 204,
		cpus:           amdCPUs,
		mediaOnManager: true, media: genericMedia, httpBoot: true,
	},
}

type cpu struct {
	ID, Socket string
	cpuModel
}

type dimm struct {
	ID, Manufacturer, PartNumber, Serial string
	CapacityMiB, SpeedMHz                int
}

type nic struct {
	ID, MAC   string
	SpeedMbps int
	Connected bool
}

type disk struct {
	ID, Model, Manufacturer, Serial, MediaType, Protocol string
	CapacityBytes                                        int64
}

type volume struct {
	ID, Name, RAIDType string
	CapacityBytes      int64
	Drives             []int
}

// hardware is the immutable, generated part of a system.
type hardware struct {
	ID, UUID, Manufacturer, Model, Serial, SKU, PartNumber, BIOS string
	ChassisID                                                    string
	CPUs                                                         []cpu
	DIMMs                                                        []dimm
	NICs                                                         []nic
	Disks                                                        []disk
	Volumes                                                      []volume
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

func makeUUID(r *rand.Rand, idx int) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	b[12], b[13], b[14], b[15] = byte(idx>>24), byte(idx>>16), byte(idx>>8), byte(idx)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func makeMAC(oui [3]byte, n int) string {
	return fmt.Sprintf("%02X:%02X:%02X:%02X:%02X:%02X", oui[0], oui[1], oui[2], byte(n>>16), byte(n>>8), byte(n))
}

func serialFor(p *profile, r *rand.Rand, idx int) string {
	switch p.name {
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

// idStyle picks how systems on a multi-system BMC are named: numbers, serials
// or UUIDs, never something a client could guess.
type idStyle int

const (
	idNumeric idStyle = iota
	idSerial
	idUUID
)

// generateSystem builds the hardware of system k on a BMC. idx is the global
// system index (unique across the emulator).
func generateSystem(p *profile, r *rand.Rand, idx, k, perBMC int, style idStyle) hardware {
	h := hardware{
		Manufacturer: p.manufacturer,
		Model:        p.models[r.IntN(len(p.models))],
		BIOS:         p.bios[r.IntN(len(p.bios))],
	}
	h.Serial = serialFor(p, r, idx)
	h.UUID = makeUUID(r, idx)
	h.SKU = h.Serial
	if p.name != "dell" {
		h.SKU = strings.ToUpper(randString(r, base36, 10))
	}
	h.PartNumber = fmt.Sprintf("%s-%03d", strings.ToUpper(p.name[:3]), r.IntN(1000))
	switch {
	case perBMC == 1:
		h.ID = p.systemID
		h.ChassisID = p.systemID
		if p.name == "openbmc" {
			h.ChassisID = "chassis"
		}
	case style == idSerial:
		h.ID, h.ChassisID = h.Serial, h.Serial
	case style == idUUID:
		h.ID, h.ChassisID = h.UUID, "Enclosure-"+h.Serial
	default:
		h.ID, h.ChassisID = strconv.Itoa(k+1), "Node"+strconv.Itoa(k+1)
	}

	cm := p.cpus[r.IntN(len(p.cpus))]
	sockets := 1 + r.IntN(2)
	for s := range sockets {
		id := fmt.Sprintf("CPU%d", s)
		if p.name == "dell" {
			id = fmt.Sprintf("CPU.Socket.%d", s+1)
		}
		h.CPUs = append(h.CPUs, cpu{ID: id, Socket: fmt.Sprintf("CPU %d", s+1), cpuModel: cm})
	}

	dimmCount := []int{4, 8, 12, 16}[r.IntN(4)]
	size := []int{16384, 32768, 65536}[r.IntN(3)]
	vendor := []string{"Samsung", "Micron Technology", "SK Hynix"}[r.IntN(3)]
	for d := range dimmCount {
		id := fmt.Sprintf("DIMM%d", d)
		if p.name == "dell" {
			id = fmt.Sprintf("DIMM.Socket.%c%d", 'A'+d%2, d/2+1)
		}
		h.DIMMs = append(h.DIMMs, dimm{
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
		h.NICs = append(h.NICs, nic{ID: p.nicID(n), MAC: makeMAC(p.macOUI, idx*8+n), SpeedMbps: speed, Connected: connected})
	}

	disks := 1 + r.IntN(6)
	kind := r.IntN(3)
	for d := range disks {
		dk := disk{Serial: strings.ToUpper(randString(r, base36, 12))}
		switch kind {
		case 0:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "MZ7LH480HBHQ0D3", "SAMSUNG", "SSD", "SATA", 480103981056
		case 1:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "Dell Ent NVMe P5600 MU U.2 1.6TB", "INTEL", "SSD", "NVMe", 1600321314816
		default:
			dk.Model, dk.Manufacturer, dk.MediaType, dk.Protocol, dk.CapacityBytes = "ST2400MM0129", "SEAGATE", "HDD", "SAS", 2399611242496
		}
		if p.diskID != nil {
			dk.ID = p.diskID(d, p.storageID)
		} else {
			dk.ID = strconv.Itoa(d)
		}
		h.Disks = append(h.Disks, dk)
	}
	if !p.simpleOnly && disks >= 2 {
		h.Volumes = append(h.Volumes, volume{ID: "Volume0", Name: "OS", RAIDType: "RAID1", CapacityBytes: h.Disks[0].CapacityBytes, Drives: []int{0, 1}})
	}
	return h
}
