// Package probe is the discovery agent's library: it collects a server's hardware from Linux
// (/sys, /proc, DMI and lldpctl) under a root directory and reports it to the metalhub registry.
//
// The Report is the wire format between the agent and internal/registry. It stays close to what
// Linux says (bytes, sysfs names) and leaves the mapping onto the Server status to the registry,
// so that an old agent and a new registry still agree.
//
// It changes nothing on the machine it inspects, and it imports no metalhub package and no
// Kubernetes library: it runs on the server, and reaches metalhub only through the report.
package probe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// RegisterPath is where the registry accepts reports (POST, JSON, Authorization: Bearer <token>).
const RegisterPath = "/v1/register"

// ReportVersion is the version of the Report format this agent speaks.
const ReportVersion = 1

// Report is what the agent sends: the hardware of one server.
type Report struct {
	// Version of the format; the registry rejects versions it does not know.
	Version int `json:"version"`
	// SystemUUID is the server the agent speaks for (from its --server-uuid flag, else DMI).
	SystemUUID string `json:"systemUUID"`
	// System is the DMI identity of the machine.
	System System `json:"system"`
	// CPUs has one entry per socket.
	CPUs []CPU `json:"cpus,omitempty"`
	// MemoryBytes is MemTotal from /proc/meminfo.
	MemoryBytes int64 `json:"memoryBytes"`
	// NICs are the network interfaces except loopback.
	NICs []NIC `json:"nics,omitempty"`
	// BlockDevices are disks (no loop, ram or device-mapper devices).
	BlockDevices []BlockDevice `json:"blockDevices,omitempty"`
	// PCIDevices are every PCI function.
	PCIDevices []PCIDevice `json:"pciDevices,omitempty"`
}

// System is the machine's DMI identity and architecture.
type System struct {
	UUID         string `json:"uuid,omitempty"`
	Vendor       string `json:"vendor,omitempty"`
	Product      string `json:"product,omitempty"`
	Serial       string `json:"serial,omitempty"`
	BIOSVersion  string `json:"biosVersion,omitempty"`
	Architecture string `json:"architecture,omitempty"` // uname -m, e.g. x86_64
}

// CPU is one socket.
type CPU struct {
	Socket  int    `json:"socket"`
	Vendor  string `json:"vendor,omitempty"` // vendor_id, e.g. GenuineIntel
	Model   string `json:"model,omitempty"`
	Cores   int    `json:"cores"`
	Threads int    `json:"threads"`
	MaxMHz  int    `json:"maxMHz,omitempty"`
}

// NIC is one network interface.
type NIC struct {
	Name    string `json:"name"`
	MAC     string `json:"mac"`
	Carrier string `json:"carrier,omitempty"` // up, down or unknown
	// SpeedMbps is the negotiated speed; 0 when unknown or down.
	SpeedMbps int  `json:"speedMbps,omitempty"`
	MTU       int  `json:"mtu,omitempty"`
	Virtual   bool `json:"virtual,omitempty"` // no backing device (bridge, veth, ...)
	// PCIAddress is the PCI function behind the NIC (see PCIDevices for its names).
	PCIAddress string `json:"pciAddress,omitempty"`
	// Driver is the kernel driver of the NIC.
	Driver string `json:"driver,omitempty"`
	// IPs are addresses without prefix length.
	IPs       []string   `json:"ips,omitempty"`
	Neighbors []Neighbor `json:"neighbors,omitempty"`
}

// Neighbor is what LLDP says is on the other end of a NIC.
type Neighbor struct {
	ChassisID         string `json:"chassisID,omitempty"`
	ChassisIDType     string `json:"chassisIDType,omitempty"` // mac, ip, local, ...
	SystemName        string `json:"systemName,omitempty"`
	SystemDescription string `json:"systemDescription,omitempty"`
	PortID            string `json:"portID,omitempty"`
	PortIDType        string `json:"portIDType,omitempty"`
	PortDescription   string `json:"portDescription,omitempty"`
}

// BlockDevice is one disk.
type BlockDevice struct {
	Name       string `json:"name"`
	SizeBytes  int64  `json:"sizeBytes"`
	Vendor     string `json:"vendor,omitempty"`
	Model      string `json:"model,omitempty"`
	Serial     string `json:"serial,omitempty"`
	WWN        string `json:"wwn,omitempty"`
	Rotational bool   `json:"rotational,omitempty"`
	Removable  bool   `json:"removable,omitempty"`
}

// PCIDevice is one PCI function; IDs are lower-case hex without 0x.
type PCIDevice struct {
	Address string `json:"address"`
	Vendor  string `json:"vendor,omitempty"`
	Device  string `json:"device,omitempty"`
	Class   string `json:"class,omitempty"`
	// VendorName and DeviceName come from the pci.ids database of the discovery OS, when it has
	// one (an older agent sends neither).
	VendorName string `json:"vendorName,omitempty"`
	DeviceName string `json:"deviceName,omitempty"`
	// Driver is the kernel driver bound to the function.
	Driver string `json:"driver,omitempty"`
}

// Limits on a report. Generous for the biggest real machines, small enough that a hostile
// client cannot make the registry write megabytes into etcd.
const (
	MaxCPUs         = 64
	MaxNICs         = 256
	MaxIPsPerNIC    = 64
	MaxNeighbors    = 32
	MaxBlockDevices = 1024
	MaxPCIDevices   = 4096
	MaxStringLen    = 512
	maxCores        = 4096
)

// Validate checks a report's shape and sizes; the registry refuses reports that fail it.
func (r *Report) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	str := func(field, s string) {
		if len(s) > MaxStringLen {
			bad("%s is longer than %d bytes", field, MaxStringLen)
		}
	}
	if r.Version != ReportVersion {
		bad("version %d is not supported (want %d)", r.Version, ReportVersion)
	}
	if r.SystemUUID == "" {
		bad("systemUUID is empty")
	}
	str("systemUUID", r.SystemUUID)
	for k, v := range map[string]string{"system.uuid": r.System.UUID, "system.vendor": r.System.Vendor,
		"system.product": r.System.Product, "system.serial": r.System.Serial,
		"system.biosVersion": r.System.BIOSVersion, "system.architecture": r.System.Architecture} {
		str(k, v)
	}
	if r.MemoryBytes < 0 || r.MemoryBytes > 1<<56 {
		bad("memoryBytes %d is out of range", r.MemoryBytes)
	}
	if len(r.CPUs) > MaxCPUs {
		bad("%d cpus, at most %d", len(r.CPUs), MaxCPUs)
	}
	for i, c := range r.CPUs {
		if c.Cores < 0 || c.Cores > maxCores || c.Threads < 0 || c.Threads > maxCores || c.MaxMHz < 0 || c.MaxMHz > 100000 || c.Socket < 0 {
			bad("cpus[%d]: counts out of range", i)
		}
		str(fmt.Sprintf("cpus[%d].model", i), c.Model)
		str(fmt.Sprintf("cpus[%d].vendor", i), c.Vendor)
	}
	if len(r.NICs) > MaxNICs {
		bad("%d nics, at most %d", len(r.NICs), MaxNICs)
	}
	for i, n := range r.NICs {
		if n.Name == "" || len(n.Name) > 64 {
			bad("nics[%d]: name must be 1-64 bytes", i)
		}
		if _, err := net.ParseMAC(n.MAC); err != nil {
			bad("nics[%d]: mac %q: %v", i, n.MAC, err)
		}
		if len(n.IPs) > MaxIPsPerNIC {
			bad("nics[%d]: %d ips, at most %d", i, len(n.IPs), MaxIPsPerNIC)
		}
		for _, ip := range n.IPs {
			if a, err := netip.ParseAddr(ip); err != nil {
				bad("nics[%d]: ip %q: %v", i, ip, err)
			} else if a.Zone() != "" {
				bad("nics[%d]: ip %q has a zone", i, ip) // the Server CRD's format=ip refuses it
			}
		}
		if len(n.Neighbors) > MaxNeighbors {
			bad("nics[%d]: %d neighbors, at most %d", i, len(n.Neighbors), MaxNeighbors)
		}
		for j, nb := range n.Neighbors {
			for _, s := range []string{nb.ChassisID, nb.ChassisIDType, nb.SystemName, nb.SystemDescription, nb.PortID, nb.PortIDType, nb.PortDescription} {
				str(fmt.Sprintf("nics[%d].neighbors[%d]", i, j), s)
			}
		}
		str(fmt.Sprintf("nics[%d].carrier", i), n.Carrier)
		str(fmt.Sprintf("nics[%d].pciAddress", i), n.PCIAddress)
		str(fmt.Sprintf("nics[%d].driver", i), n.Driver)
	}
	if len(r.BlockDevices) > MaxBlockDevices {
		bad("%d block devices, at most %d", len(r.BlockDevices), MaxBlockDevices)
	}
	for i, d := range r.BlockDevices {
		if d.Name == "" || d.SizeBytes < 0 {
			bad("blockDevices[%d]: needs a name and a size >= 0", i)
		}
		for _, s := range []string{d.Name, d.Vendor, d.Model, d.Serial, d.WWN} {
			str(fmt.Sprintf("blockDevices[%d]", i), s)
		}
	}
	if len(r.PCIDevices) > MaxPCIDevices {
		bad("%d pci devices, at most %d", len(r.PCIDevices), MaxPCIDevices)
	}
	for i, p := range r.PCIDevices {
		for _, s := range []string{p.Address, p.Vendor, p.Device, p.Class, p.VendorName, p.DeviceName, p.Driver} {
			str(fmt.Sprintf("pciDevices[%d]", i), s)
		}
	}
	// Keep the message short: a hostile report could otherwise produce thousands of lines.
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Errorf("and %d more problems", len(errs)-5))
	}
	return errors.Join(errs...)
}
