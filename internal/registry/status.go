package registry

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/probe"
)

// applyReport writes a report into the status fields discovery owns: processors,
// totalSystemMemory, networkInterfaces and storages. A section the agent could not read (empty)
// leaves the field as it is rather than erasing what the BMC may have reported.
func applyReport(st *metalv1alpha1.ServerStatus, r *probe.Report) {
	if p := processors(r); len(p) > 0 {
		st.Processors = p
	}
	if r.MemoryBytes > 0 {
		st.TotalSystemMemory = resource.NewQuantity(r.MemoryBytes, resource.BinarySI)
	}
	if n := networkInterfaces(r); len(n) > 0 {
		st.NetworkInterfaces = n
	}
	if s := storages(r); len(s) > 0 {
		st.Storages = s
	}
	// A machine without GPUs reports none: a GPU taken out shows.
	st.GPUs = gpus(r)
	if p := pciSummary(r); len(p) > 0 {
		st.PCIDevices = p
	}
}

// pciSummary counts the PCI functions by kind, ordered by class, vendor and device.
func pciSummary(r *probe.Report) []metalv1alpha1.PCIDeviceSummary {
	idx := map[[3]string]int{}
	var out []metalv1alpha1.PCIDeviceSummary
	for _, d := range r.PCIDevices {
		if d.Vendor == "" {
			continue
		}
		k := [3]string{d.Class, d.Vendor, d.Device}
		if i, ok := idx[k]; ok {
			out[i].Count++
			continue
		}
		idx[k] = len(out)
		out = append(out, metalv1alpha1.PCIDeviceSummary{Class: d.Class, VendorID: d.Vendor, DeviceID: d.Device,
			Vendor: d.VendorName, Model: d.DeviceName, Count: 1})
	}
	slices.SortFunc(out, func(a, b metalv1alpha1.PCIDeviceSummary) int {
		return cmp.Or(cmp.Compare(a.Class, b.Class), cmp.Compare(a.VendorID, b.VendorID), cmp.Compare(a.DeviceID, b.DeviceID))
	})
	return out
}

// accelerator reports whether a PCI function is a GPU or accelerator: a 3D controller (0302),
// another display controller (0380) or a processing accelerator (12xx) of any vendor, or a VGA
// controller (0300) of a GPU vendor. Server boards carry their BMC's VGA (ASPEED, Matrox) as
// class 0300: it is none.
func accelerator(d probe.PCIDevice) bool {
	class := d.Class
	switch {
	case strings.HasPrefix(class, "0302"), strings.HasPrefix(class, "0380"), strings.HasPrefix(class, "12"):
		return true
	case strings.HasPrefix(class, "0300"):
		return d.Vendor == "10de" || d.Vendor == "1002" // NVIDIA, AMD
	}
	return false
}

func gpus(r *probe.Report) []metalv1alpha1.GPU {
	var out []metalv1alpha1.GPU
	for _, d := range r.PCIDevices {
		if accelerator(d) {
			out = append(out, metalv1alpha1.GPU{PCIAddress: d.Address, VendorID: d.Vendor, DeviceID: d.Device,
				Vendor: d.VendorName, Model: d.DeviceName, Driver: d.Driver})
		}
	}
	return out
}

// inventoryLabels are the labels a report gives a server: a value to set, or "" to remove.
func inventoryLabels(r *probe.Report) map[string]string {
	g := gpus(r)
	out := map[string]string{metalv1alpha1.GPUCountLabel: strconv.Itoa(len(g)),
		metalv1alpha1.GPUModelLabel: "", metalv1alpha1.GPUIDLabel: "", metalv1alpha1.GPUVendorLabel: ""}
	one := func(key string, value func(metalv1alpha1.GPU) string) {
		v := value(g[0])
		for _, x := range g[1:] {
			if value(x) != v {
				v = "mixed"
			}
		}
		out[key] = labelValue(v)
	}
	if len(g) > 0 {
		one(metalv1alpha1.GPUModelLabel, func(x metalv1alpha1.GPU) string { return x.Model })
		one(metalv1alpha1.GPUIDLabel, func(x metalv1alpha1.GPU) string { return x.VendorID + "-" + x.DeviceID })
		one(metalv1alpha1.GPUVendorLabel, func(x metalv1alpha1.GPU) string { return x.Vendor })
	}
	return out
}

// labelValue makes s a label value: lower case, runs of other characters as one '-', at most
// 63 characters, alphanumeric at both ends; "" stays "".
func labelValue(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' {
			b.WriteRune(c)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "-._")
}

func processors(r *probe.Report) []metalv1alpha1.Processor {
	arch, isa := redfishArchitecture(r.System.Architecture)
	var out []metalv1alpha1.Processor
	for _, c := range r.CPUs {
		out = append(out, metalv1alpha1.Processor{
			ID:             fmt.Sprintf("CPU%d", c.Socket),
			Type:           "CPU",
			Architecture:   arch,
			InstructionSet: isa,
			Manufacturer:   cpuManufacturer(c.Vendor),
			Model:          c.Model,
			MaxSpeedMHz:    int32(c.MaxMHz),
			TotalCores:     int32(c.Cores),
			TotalThreads:   int32(c.Threads),
		})
	}
	return out
}

// redfishArchitecture maps uname -m to Redfish ProcessorArchitecture and InstructionSet, the
// vocabulary the rest of the status uses.
func redfishArchitecture(machine string) (arch, isa string) {
	switch machine {
	case "x86_64":
		return "x86", "x86-64"
	case "i386", "i486", "i586", "i686":
		return "x86", "x86"
	case "aarch64", "arm64":
		return "ARM", "ARM-A64"
	case "armv7l", "armv6l":
		return "ARM", "ARM-A32"
	case "ppc64", "ppc64le":
		return "Power", "PowerISA"
	case "mips", "mips64":
		return "MIPS", strings.ToUpper(machine)
	case "riscv64":
		return "RISC-V", "RV64"
	}
	return machine, ""
}

// cpuManufacturer turns /proc/cpuinfo's vendor_id (or ARM implementer) into the name BMCs use.
func cpuManufacturer(vendor string) string {
	switch strings.ToLower(vendor) {
	case "genuineintel":
		return "Intel(R) Corporation"
	case "authenticamd":
		return "Advanced Micro Devices, Inc."
	case "0x41":
		return "ARM Limited"
	case "0xc0":
		return "Ampere Computing"
	}
	return vendor
}

// networkInterfaces lists the NICs with a backing device: bridges, veths and the like only
// exist in the discovery OS and say nothing about the server.
func networkInterfaces(r *probe.Report) []metalv1alpha1.NetworkInterface {
	pci := map[string]probe.PCIDevice{}
	for _, d := range r.PCIDevices {
		pci[d.Address] = d
	}
	var out []metalv1alpha1.NetworkInterface
	for _, n := range r.NICs {
		if n.Virtual {
			continue
		}
		ni := metalv1alpha1.NetworkInterface{
			Name:          n.Name,
			MACAddress:    n.MAC,
			IPs:           n.IPs,
			CarrierStatus: n.Carrier,
			IP:            primaryIP(n.IPs),
			Driver:        n.Driver,
			PCIAddress:    n.PCIAddress,
			SpeedMbps:     int32(n.SpeedMbps),
		}
		if d, ok := pci[n.PCIAddress]; ok && n.PCIAddress != "" {
			ni.Vendor, ni.Model = d.VendorName, d.DeviceName
		}
		for _, nb := range n.Neighbors {
			x := metalv1alpha1.LLDPNeighbor{
				PortID:            nb.PortID,
				PortDescription:   nb.PortDescription,
				SystemName:        nb.SystemName,
				SystemDescription: nb.SystemDescription,
			}
			if nb.ChassisIDType == "mac" {
				x.MACAddress = nb.ChassisID
			}
			ni.Neighbors = append(ni.Neighbors, x)
		}
		out = append(out, ni)
	}
	return out
}

// primaryIP is the first global IPv4 address, else the first global one, else the first.
func primaryIP(ips []string) string {
	var firstGlobal string
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.IsGlobalUnicast() {
			continue
		}
		if ip.Is4() {
			return s
		}
		if firstGlobal == "" {
			firstGlobal = s
		}
	}
	if firstGlobal != "" {
		return firstGlobal
	}
	if len(ips) > 0 {
		return ips[0]
	}
	return ""
}

// storages reports the disks the OS sees as one storage subsystem; the OS cannot tell which
// controller a disk hangs off the way a BMC can.
func storages(r *probe.Report) []metalv1alpha1.Storage {
	if len(r.BlockDevices) == 0 {
		return nil
	}
	s := metalv1alpha1.Storage{Name: "Local", State: "Enabled"}
	for _, d := range r.BlockDevices {
		media := "SSD"
		if d.Rotational {
			media = "HDD"
		}
		drive := metalv1alpha1.StorageDrive{
			Name:         d.Name,
			MediaType:    media,
			Capacity:     resource.NewQuantity(d.SizeBytes, resource.BinarySI),
			Vendor:       d.Vendor,
			Model:        d.Model,
			SerialNumber: d.Serial,
			WWN:          d.WWN,
			State:        "Enabled",
		}
		if strings.HasPrefix(d.Name, "nvme") {
			drive.Type = "NVMe"
		}
		s.Drives = append(s.Drives, drive)
	}
	return []metalv1alpha1.Storage{s}
}
