package bmc

import (
	"cmp"
	"context"
	"sort"
	"strings"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Inventory implements BMC. Only reading the system itself is fatal; each
// other section fails on its own and is listed in FailedSections.
func (c *conn) Inventory(ctx context.Context, systemID string) (*Inventory, error) {
	op := "inventory " + systemID
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	inv := &Inventory{System: systemInfo(sys)}
	fail := func(section string, err error) {
		inv.FailedSections = append(inv.FailedSections, SectionError{Section: section, Reason: ReasonOf(err), Message: err.Error()})
	}

	if procs, err := sys.Processors(); err != nil && len(procs) == 0 {
		fail(SectionProcessors, err)
	} else {
		if err != nil {
			fail(SectionProcessors, err)
		}
		inv.Processors = processors(procs)
	}

	inv.Memory, err = memory(sys)
	if err != nil {
		fail(SectionMemory, err)
	}

	if nics, err := sys.EthernetInterfaces(); err != nil && len(nics) == 0 {
		fail(SectionNICs, err)
	} else {
		if err != nil {
			fail(SectionNICs, err)
		}
		inv.NICs = hostNICs(nics)
	}

	inv.Storage, err = storage(sys)
	if err != nil {
		fail(SectionStorage, err)
	}

	if err := ctx.Err(); err != nil {
		return nil, wire.Wrap(op, err)
	}
	inv.Manager, err = c.systemManager(ctx, sys)
	if err != nil {
		fail(SectionManager, err)
	}
	return inv, nil
}

func systemInfo(s *schemas.ComputerSystem) SystemInfo {
	info := SystemInfo{
		ID: s.ID, ODataID: s.ODataID, Name: s.Name, UUID: s.UUID,
		Manufacturer: s.Manufacturer, Model: s.Model, SerialNumber: s.SerialNumber,
		SKU: s.SKU, PartNumber: s.PartNumber, BIOSVersion: s.BiosVersion,
		PowerState: PowerState(s.PowerState), IndicatorLED: string(s.IndicatorLED),
		Health:         string(s.Status.Health),
		ProcessorModel: s.ProcessorSummary.Model,
	}
	if s.ProcessorSummary.Count != nil {
		info.ProcessorCount = int(*s.ProcessorSummary.Count)
	}
	return info
}

func processors(procs []*schemas.Processor) []Processor {
	out := make([]Processor, 0, len(procs))
	for _, p := range procs {
		// Collections may hold GPUs/FPGAs as well; keep CPUs (or untyped).
		if p.ProcessorType != "" && p.ProcessorType != schemas.CPUProcessorType {
			continue
		}
		if p.Status.State == schemas.AbsentState {
			continue
		}
		out = append(out, Processor{
			ID: p.ID, Socket: p.Socket, Manufacturer: p.Manufacturer,
			Model:        strings.TrimSpace(p.Model),
			Architecture: string(p.ProcessorArchitecture),
			Cores:        gofish.Deref(p.TotalCores),
			Threads:      gofish.Deref(p.TotalThreads),
			MaxSpeedMHz:  gofish.Deref(p.MaxSpeedMHz),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// memory sums DIMM capacities; when the collection is broken it falls back to
// MemorySummary (the error is still returned so the section is reported).
func memory(s *schemas.ComputerSystem) (MemoryInfo, error) {
	var info MemoryInfo
	dimms, err := s.Memory()
	for _, d := range dimms {
		if d.Status.State == schemas.AbsentState || gofish.Deref(d.CapacityMiB) == 0 {
			continue
		}
		info.Modules++
		info.TotalMiB += int64(*d.CapacityMiB)
	}
	if info.TotalMiB == 0 && s.MemorySummary.TotalSystemMemoryGiB != nil {
		info.Modules = 0
		info.TotalMiB = int64(*s.MemorySummary.TotalSystemMemoryGiB * 1024)
	}
	return info, err
}

func hostNICs(nics []*schemas.EthernetInterface) []NIC {
	out := make([]NIC, 0, len(nics))
	for _, n := range nics {
		nic := NIC{
			ID: n.ID, Name: n.Name,
			MACAddress: strings.ToLower(cmp.Or(n.MACAddress, n.PermanentMACAddress)),
			LinkStatus: string(n.LinkStatus),
			Carrier:    n.LinkStatus == schemas.LinkUpLinkStatus,
			SpeedMbps:  gofish.Deref(n.SpeedMbps),
		}
		for _, a := range n.IPv4Addresses {
			if a.Address != "" {
				nic.IPv4 = append(nic.IPv4, a.Address)
			}
		}
		for _, a := range n.IPv6Addresses {
			if a.Address != "" {
				nic.IPv6 = append(nic.IPv6, a.Address)
			}
		}
		out = append(out, nic)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// storage reads Storage (controllers, drives, volumes) or, when the system
// has no Storage collection or it is broken, SimpleStorage.
func storage(s *schemas.ComputerSystem) (StorageInfo, error) {
	var info StorageInfo
	stores, err := s.Storage()
	if err == nil && stores == nil {
		// No Storage link at all: older BMCs only have SimpleStorage.
		return simpleStorage(s)
	}
	var firstErr error
	if err != nil {
		firstErr = err
		if len(stores) == 0 {
			// Broken Storage: SimpleStorage may still describe the disks.
			if simple, serr := simpleStorage(s); serr == nil && len(simple.Drives) > 0 {
				return simple, err
			}
			return info, err
		}
	}
	info.Source = "Storage"
	for _, st := range stores {
		info.Controllers = append(info.Controllers, st.ID)
		drives, err := st.Drives()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, d := range drives {
			info.Drives = append(info.Drives, Drive{
				ID: d.ID, Name: d.Name, Model: strings.TrimSpace(d.Model), Manufacturer: d.Manufacturer,
				SerialNumber: strings.TrimSpace(d.SerialNumber), CapacityBytes: int64(gofish.Deref(d.CapacityBytes)),
				MediaType: string(d.MediaType), Protocol: string(d.Protocol),
			})
		}
		vols, err := st.Volumes()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		for _, v := range vols {
			info.Volumes = append(info.Volumes, Volume{
				ID: v.ID, Name: v.Name, CapacityBytes: int64(gofish.Deref(v.CapacityBytes)), RAIDType: string(v.RAIDType),
			})
		}
	}
	sort.Strings(info.Controllers)
	sort.Slice(info.Drives, func(i, j int) bool { return info.Drives[i].ID < info.Drives[j].ID })
	sort.Slice(info.Volumes, func(i, j int) bool { return info.Volumes[i].ID < info.Volumes[j].ID })
	return info, firstErr
}

func simpleStorage(s *schemas.ComputerSystem) (StorageInfo, error) {
	info := StorageInfo{Source: "SimpleStorage"}
	simple, err := s.SimpleStorage()
	if simple == nil && err == nil {
		return StorageInfo{}, nil
	}
	for _, ss := range simple {
		info.Controllers = append(info.Controllers, ss.ID)
		for _, d := range ss.Devices {
			if d.Status.State == schemas.AbsentState {
				continue
			}
			info.Drives = append(info.Drives, Drive{
				Name: d.Name, Model: strings.TrimSpace(d.Model), Manufacturer: d.Manufacturer,
				CapacityBytes: int64(gofish.Deref(d.CapacityBytes)),
			})
		}
	}
	sort.Strings(info.Controllers)
	return info, err
}

// systemManager reads the manager that manages sys, else the service's first.
func (c *conn) systemManager(ctx context.Context, sys *schemas.ComputerSystem) (*ManagerInfo, error) {
	if m := wire.ManagedBy(sys.RawData); m != "" {
		api, err := c.client(ctx)
		if err != nil {
			return nil, err
		}
		return c.readManager(api, m)
	}
	return c.Manager(ctx)
}
