package registry

import (
	"fmt"
	"net/netip"
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
			Name:      d.Name,
			MediaType: media,
			Capacity:  resource.NewQuantity(d.SizeBytes, resource.BinarySI),
			Vendor:    d.Vendor,
			Model:     d.Model,
			State:     "Enabled",
		}
		if strings.HasPrefix(d.Name, "nvme") {
			drive.Type = "NVMe"
		}
		s.Drives = append(s.Drives, drive)
	}
	return []metalv1alpha1.Storage{s}
}
