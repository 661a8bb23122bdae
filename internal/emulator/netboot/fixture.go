package netboot

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/metalhub/metalhub/internal/probe"
)

// Hardware is the machine an emulated server turns out to be when the probe looks at it. It is
// a function of the system UUID (and the BMC's NIC MACs, so the OS sees the NICs the BMC lists).
type Hardware struct {
	UUID, Serial   string
	Sockets        int
	CoresPerSocket int
	ThreadsPerCore int
	CPUModel       string
	CPUVendor      string // vendor_id
	MaxMHz         int
	MemoryKiB      int64
	NICs           []FixtureNIC
	Disks          []FixtureDisk
	// GPUs are accelerators on the PCI bus; every machine also has its BMC's VGA, which is none.
	GPUs []FixtureGPU
}

// FixtureGPU is one accelerator: its PCI IDs and class, as pci.ids names them.
type FixtureGPU struct {
	Vendor, Device, Class string
	Driver                string
}

// gpuModels are the accelerators the generated machines carry (a machine has one model).
var gpuModels = []FixtureGPU{
	{Vendor: "10de", Device: "20b2", Class: "030200", Driver: "nvidia"},
	{Vendor: "10de", Device: "2330", Class: "030200", Driver: "nvidia"},
	{Vendor: "1002", Device: "740f", Class: "038000", Driver: "amdgpu"},
}

// fixturePCIIDs is the slice of a pci.ids database the generated machines need, as the
// discovery OS ships it (the probe names devices from it).
const fixturePCIIDs = `# pci.ids, the entries the emulated fleet uses
1002  Advanced Micro Devices, Inc. [AMD/ATI]
	740f  Aldebaran/MI200 [Instinct MI210]
10de  NVIDIA Corporation
	20b2  GA100 [A100 SXM4 80GB]
	2330  GH100 [H100 SXM5 80GB]
144d  Samsung Electronics Co Ltd
	a80a  NVMe SSD Controller PM9A1/PM9A3/980PRO
15b3  Mellanox Technologies
	101d  MT2892 Family [ConnectX-6 Dx]
1a03  ASPEED Technology, Inc.
	2000  ASPEED Graphics Family
8086  Intel Corporation
	09a2  Ice Lake Memory Map/VT-d
`

// FixtureNIC is one NIC of the generated machine.
type FixtureNIC struct {
	Name, MAC string
	Up        bool
	SpeedMbps int
	IP        string // with prefix length; empty when down
	// Switch and Port are its LLDP neighbour (empty when down): the same for a UUID on every
	// run, and no two NICs of a machine on one switch port.
	Switch, Port string
}

// FixtureDisk is one disk of the generated machine.
type FixtureDisk struct {
	Name       string
	Sectors    int64
	Model      string
	Serial     string
	Rotational bool
}

// Threads is the number of logical CPUs.
func (h Hardware) Threads() int { return h.Sockets * h.CoresPerSocket * h.ThreadsPerCore }

var cpuModels = []struct{ vendor, model string }{
	{"GenuineIntel", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"},
	{"GenuineIntel", "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz"},
	{"AuthenticAMD", "AMD EPYC 7543 32-Core Processor"},
	{"AuthenticAMD", "AMD EPYC 9354 32-Core Processor"},
}

// HardwareFor derives a machine from a system UUID; macs, when given, are its NICs in order
// (the PXE NIC first, as the emulator's boot event lists them).
func HardwareFor(uuid, serial string, macs []string) Hardware {
	sum := sha256.Sum256([]byte(strings.ToLower(uuid)))
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
	cpu := cpuModels[r.IntN(len(cpuModels))]
	h := Hardware{
		UUID: strings.ToLower(uuid), Serial: serial,
		Sockets:        1 + r.IntN(2),
		CoresPerSocket: []int{4, 8, 12, 16}[r.IntN(4)],
		ThreadsPerCore: []int{1, 2}[r.IntN(2)],
		CPUModel:       cpu.model, CPUVendor: cpu.vendor,
		MaxMHz: 2800 + 100*r.IntN(10),
	}
	h.MemoryKiB = int64(h.Sockets) * []int64{32, 64, 128, 256}[r.IntN(4)] << 20
	if len(macs) == 0 {
		n := 2 + r.IntN(3)
		for k := range n {
			// Locally administered, unique per UUID and NIC.
			macs = append(macs, fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[16], sum[17], sum[18], sum[19], k))
		}
	}
	for k, mac := range macs {
		nic := FixtureNIC{Name: fmt.Sprintf("eno%d", k+1), MAC: strings.ToLower(mac), SpeedMbps: []int{10000, 25000}[r.IntN(2)]}
		if k == 0 || r.IntN(2) == 0 { // the PXE NIC is up: it just booted the machine
			nic.Up = true
			nic.IP = fmt.Sprintf("10.%d.%d.%d/16", 20+k, sum[20], 1+int(sum[21])%254)
			// Cabled as a rack is: NICs alternate over the rack's pair of leaves, each NIC on a
			// port of its own, so a ServerWiring can tell a NIC in the wrong port. From the
			// UUID's bytes, not r, so the rest of the machine stays as it was.
			nic.Switch = fmt.Sprintf("leaf-%02d", 1+2*(int(sum[22])%20)+k%2)
			nic.Port = fmt.Sprintf("Ethernet%d", 1+int(sum[23])%24+24*(k/2))
		}
		h.NICs = append(h.NICs, nic)
	}
	for k := range 1 + r.IntN(3) {
		h.Disks = append(h.Disks, FixtureDisk{Name: fmt.Sprintf("nvme%dn1", k), Sectors: []int64{960, 1920, 3840}[r.IntN(3)] * 1953125, Model: "SAMSUNG MZQL2960HCJR-00A07",
			Serial: fmt.Sprintf("S64NNE0R%02X%02X%02X%d", sum[24], sum[25], sum[26], k)})
	}
	for k := range r.IntN(3) {
		h.Disks = append(h.Disks, FixtureDisk{Name: fmt.Sprintf("sd%c", 'a'+k), Sectors: 7814037168, Model: "ST4000NM0035-1V4", Rotational: true,
			Serial: fmt.Sprintf("ZC1%02X%02X%02X%d", sum[27], sum[28], sum[29], k)})
	}
	// Half the machines carry accelerators: 2, 4 or 8 of one model.
	if r.IntN(2) == 0 {
		g := gpuModels[r.IntN(len(gpuModels))]
		for range []int{2, 4, 8}[r.IntN(3)] {
			h.GPUs = append(h.GPUs, g)
		}
	}
	return h
}

// WriteTree writes h as a root the probe can read (/sys, /proc, DMI, plus the probe's fixture
// files for addresses and lldpctl output) under dir.
func (h Hardware) WriteTree(dir string) error {
	files := map[string]string{
		"sys/class/dmi/id/product_uuid":   h.UUID,
		"sys/class/dmi/id/sys_vendor":     "metalhub emulator",
		"sys/class/dmi/id/product_name":   "Emulated Server",
		"sys/class/dmi/id/product_serial": h.Serial,
		"sys/class/dmi/id/bios_version":   "1.0.0",
		"proc/sys/kernel/arch":            "x86_64",
		"proc/meminfo":                    fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\n", h.MemoryKiB, h.MemoryKiB/2),
		"sys/devices/system/cpu/online":   fmt.Sprintf("0-%d", h.Threads()-1),
	}
	var cpuinfo strings.Builder
	// Linux numbers the first thread of every core first, then the siblings.
	id := 0
	for range h.ThreadsPerCore {
		for s := range h.Sockets {
			for c := range h.CoresPerSocket {
				d := fmt.Sprintf("sys/devices/system/cpu/cpu%d/", id)
				files[d+"topology/physical_package_id"] = fmt.Sprint(s)
				files[d+"topology/core_id"] = fmt.Sprint(c)
				files[d+"topology/die_id"] = "0"
				files[d+"cpufreq/cpuinfo_max_freq"] = fmt.Sprint(h.MaxMHz * 1000)
				fmt.Fprintf(&cpuinfo, "processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\ncpu MHz\t\t: 2000.000\nphysical id\t: %d\ncore id\t\t: %d\n\n",
					id, h.CPUVendor, h.CPUModel, s, c)
				id++
			}
		}
	}
	files["proc/cpuinfo"] = cpuinfo.String()

	var addrs strings.Builder
	var lldp []string
	for k, n := range h.NICs {
		d := "sys/class/net/" + n.Name + "/"
		files[d+"address"] = n.MAC
		files[d+"type"] = "1"
		files[d+"mtu"] = "1500"
		files[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/vendor", 0x10+k)] = "0x15b3"
		files[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/device", 0x10+k)] = "0x101d"
		files[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/class", 0x10+k)] = "0x020000"
		if n.Up {
			files[d+"carrier"], files[d+"operstate"], files[d+"speed"] = "1", "up", fmt.Sprint(n.SpeedMbps)
			fmt.Fprintf(&addrs, "%s %s\n", n.Name, n.IP)
			lldp = append(lldp, fmt.Sprintf(`{%q: {"via": "LLDP", "chassis": {%q: {"id": {"type": "mac", "value": "00:1c:73:00:%02x:01"}, "descr": "Arista Networks EOS"}}, "port": {"id": {"type": "ifname", "value": %q}, "descr": "server %s"}}}`,
				n.Name, n.Switch, k, n.Port, h.Serial))
		} else {
			files[d+"carrier"], files[d+"operstate"], files[d+"speed"] = "0", "down", "-1"
		}
	}
	files[probe.FixtureAddresses] = addrs.String()
	files[probe.FixtureLLDP] = `{"lldp": {"interface": [` + strings.Join(lldp, ",") + `]}}`

	for k, disk := range h.Disks {
		d := "sys/block/" + disk.Name + "/"
		files[d+"size"] = fmt.Sprint(disk.Sectors)
		files[d+"device/model"] = disk.Model
		files[d+"device/serial"] = disk.Serial
		files[d+"queue/rotational"] = map[bool]string{true: "1", false: "0"}[disk.Rotational]
		files[d+"removable"] = "0"
		files[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/vendor", 0x40+k)] = "0x144d"
		files[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/class", 0x40+k)] = "0x010802"
	}
	for k, g := range h.GPUs {
		d := fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/", 0x80+k)
		files[d+"vendor"], files[d+"device"], files[d+"class"] = "0x"+g.Vendor, "0x"+g.Device, "0x"+g.Class
	}
	// The BMC's own VGA is on every server board: a display controller, not an accelerator.
	files["sys/bus/pci/devices/0000:02:00.0/vendor"] = "0x1a03"
	files["sys/bus/pci/devices/0000:02:00.0/device"] = "0x2000"
	files["sys/bus/pci/devices/0000:02:00.0/class"] = "0x030000"
	files["usr/share/misc/pci.ids"] = fixturePCIIDs
	// Kernel devices the probe must skip, as on a real discovery OS.
	files["sys/block/loop0/size"] = "0"
	files["sys/class/net/lo/address"] = "00:00:00:00:00:00"
	files["sys/class/net/lo/type"] = "772"
	files["sys/bus/pci/devices/0000:00:00.0/vendor"] = "0x8086"
	files["sys/bus/pci/devices/0000:00:00.0/class"] = "0x060000"

	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("writing hardware tree: %w", err)
		}
		if err := os.WriteFile(full, []byte(content+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing hardware tree: %w", err)
		}
	}
	// sysfs ties a NIC to its PCI function, and a function to its driver, by symlinks.
	links := map[string]string{}
	for k, n := range h.NICs {
		links["sys/class/net/"+n.Name+"/device"] = fmt.Sprintf("../../../bus/pci/devices/0000:%02x:00.0", 0x10+k)
		links[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/driver", 0x10+k)] = "../../drivers/mlx5_core"
	}
	for k, g := range h.GPUs {
		links[fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/driver", 0x80+k)] = "../../drivers/" + g.Driver
	}
	links["sys/bus/pci/devices/0000:02:00.0/driver"] = "../../drivers/ast"
	for p, target := range links {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("writing hardware tree: %w", err)
		}
		if err := os.Symlink(target, full); err != nil && !os.IsExist(err) {
			return fmt.Errorf("writing hardware tree: %w", err)
		}
	}
	return nil
}
