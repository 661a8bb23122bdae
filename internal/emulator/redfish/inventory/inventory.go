// Package inventory serves the Redfish resources of an emulated machine's hardware: its
// processors, memory, storage controller, drives and volumes, from the generated description
// (package hardware).
//
// It holds no state (the machine's, volumes included, is the system's, reached through Host);
// it must not import the emulator package.
package inventory

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// CPUBody is the Processor resource of c at path.
func CPUBody(c hardware.CPU, path string) rfhttp.Obj {
	arch, set := "x86", "x86-64"
	return rfhttp.Obj{
		"@odata.type": "#Processor.v1_7_0.Processor", "@odata.id": path, "Id": c.ID, "Name": c.Socket,
		"Socket": c.Socket, "ProcessorType": "CPU", "ProcessorArchitecture": arch, "InstructionSet": set,
		"Manufacturer": c.Manufacturer, "Model": c.Model, "MaxSpeedMHz": c.MHz,
		"TotalCores": c.Cores, "TotalThreads": 2 * c.Cores, "Status": rfhttp.Status("Enabled"),
	}
}

// DIMMBody is the Memory resource of d at path.
func DIMMBody(d hardware.DIMM, path string) rfhttp.Obj {
	return rfhttp.Obj{
		"@odata.type": "#Memory.v1_7_0.Memory", "@odata.id": path, "Id": d.ID, "Name": d.ID,
		"CapacityMiB": d.CapacityMiB, "MemoryDeviceType": "DDR4", "OperatingSpeedMhz": d.SpeedMHz,
		"Manufacturer": d.Manufacturer, "PartNumber": d.PartNumber, "SerialNumber": d.Serial,
		"Status": rfhttp.Status("Enabled"),
	}
}

// Host gives the storage handler a machine's hardware under the system's lock; fn says
// whether it changed it (a volume made).
type Host interface {
	Hardware(fn func(hw *hardware.System) bool)
}

// raidTypes are what the emulated controllers make.
var raidTypes = []string{"RAID0", "RAID1"}

// ServeStorage serves a machine's Storage collection at base: its one controller (sid), drives
// and volumes. With makesVolumes the controller advertises SupportedRAIDTypes and a POST to its
// Volumes makes a volume at once (RAID0 over any drives, RAID1 over two, none of them in
// another volume); without, it makes none (405).
func ServeStorage(w http.ResponseWriter, r *http.Request, h Host, sid, base string, rest []string, makesVolumes bool) {
	if len(rest) == 3 && rest[0] == sid && rest[1] == "Volumes" && rest[2] == "" {
		rest = rest[:2]
	}
	if r.Method == http.MethodPost && len(rest) == 2 && rest[0] == sid && rest[1] == "Volumes" {
		if !makesVolumes {
			rfhttp.WriteError(w, http.StatusMethodNotAllowed, "ActionNotSupported", "this controller makes no volumes")
			return
		}
		createVolume(w, r, h, base+"/"+sid)
		return
	}
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	var hw hardware.System
	h.Hardware(func(live *hardware.System) bool {
		hw = *live
		hw.Volumes = slices.Clone(live.Volumes)
		return false
	})
	if len(rest) == 0 {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base, "StorageCollection", "Storage Collection", []string{base + "/" + sid}))
		return
	}
	if rest[0] != sid {
		rfhttp.NotFound(w, r)
		return
	}
	sp := base + "/" + sid
	switch {
	case len(rest) == 1:
		drives := make([]rfhttp.Obj, len(hw.Disks))
		for i, d := range hw.Disks {
			drives[i] = rfhttp.Link(sp + "/Drives/" + d.ID)
		}
		ctl := rfhttp.Obj{"MemberId": "0", "Name": sid, "Model": "PERC H755 Front", "Status": rfhttp.Status("Enabled")}
		if makesVolumes {
			ctl["SupportedRAIDTypes"] = raidTypes
		}
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
			"@odata.type": "#Storage.v1_8_0.Storage", "@odata.id": sp, "Id": sid, "Name": "Storage Controller " + sid,
			"StorageControllers": []rfhttp.Obj{ctl},
			"Drives":             drives, "Drives@odata.count": len(drives), "Volumes": rfhttp.Link(sp + "/Volumes"), "Status": rfhttp.Status("Enabled"),
		})
	case len(rest) == 3 && rest[1] == "Drives":
		for _, d := range hw.Disks {
			if d.ID == rest[2] {
				rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
					"@odata.type": "#Drive.v1_9_0.Drive", "@odata.id": sp + "/Drives/" + d.ID, "Id": d.ID, "Name": "Disk " + d.ID,
					"Model": d.Model, "Manufacturer": d.Manufacturer, "SerialNumber": d.Serial, "CapacityBytes": d.CapacityBytes,
					"MediaType": d.MediaType, "Protocol": d.Protocol, "Status": rfhttp.Status("Enabled"),
				})
				return
			}
		}
		rfhttp.NotFound(w, r)
	case rest[1] == "Volumes" && len(rest) <= 3:
		rfhttp.ServeMembers(w, r, sp+"/Volumes", "VolumeCollection", "Volume Collection", rest[2:], len(hw.Volumes),
			func(i int) string { return hw.Volumes[i].ID },
			func(i int, p string) rfhttp.Obj { return volumeBody(&hw, hw.Volumes[i], sp, p) })
	default:
		rfhttp.NotFound(w, r)
	}
}

func volumeBody(hw *hardware.System, v hardware.Volume, sp, p string) rfhttp.Obj {
	drives := make([]rfhttp.Obj, len(v.Drives))
	for k, d := range v.Drives {
		drives[k] = rfhttp.Link(sp + "/Drives/" + hw.Disks[d].ID)
	}
	typ := "Mirrored"
	if v.RAIDType == "RAID0" {
		typ = "StripedWithParity"
	}
	return rfhttp.Obj{
		"@odata.type": "#Volume.v1_5_0.Volume", "@odata.id": p, "Id": v.ID, "Name": v.Name,
		"CapacityBytes": v.CapacityBytes, "RAIDType": v.RAIDType, "VolumeType": typ,
		"Links": rfhttp.Obj{"Drives": drives}, "Status": rfhttp.Status("Enabled"),
	}
}

// createVolume makes the volume a POST asks for, or says why not (400).
func createVolume(w http.ResponseWriter, r *http.Request, h Host, sp string) {
	var req struct {
		Name     string `json:"Name"`
		RAIDType string `json:"RAIDType"`
		Links    struct {
			Drives []struct {
				ID string `json:"@odata.id"`
			} `json:"Drives"`
		} `json:"Links"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", err.Error())
		return
	}
	var made rfhttp.Obj
	var bad string
	h.Hardware(func(hw *hardware.System) bool {
		switch {
		case !slices.Contains(raidTypes, req.RAIDType):
			bad = "RAIDType " + req.RAIDType + " is not supported"
			return false
		case req.RAIDType == "RAID1" && len(req.Links.Drives) != 2:
			bad = "RAID1 takes exactly two drives"
			return false
		case len(req.Links.Drives) == 0:
			bad = "no drives"
			return false
		}
		used := map[int]bool{}
		for _, v := range hw.Volumes {
			for _, d := range v.Drives {
				used[d] = true
			}
		}
		var idx []int
		capacity := int64(0)
		for _, l := range req.Links.Drives {
			k := slices.IndexFunc(hw.Disks, func(d hardware.Disk) bool { return sp+"/Drives/"+d.ID == strings.TrimSuffix(l.ID, "/") })
			if k < 0 || used[k] || slices.Contains(idx, k) {
				bad = "drive " + l.ID + " does not exist or is in a volume already"
				return false
			}
			idx = append(idx, k)
			if c := hw.Disks[k].CapacityBytes; capacity == 0 || c < capacity {
				capacity = c
			}
		}
		if req.RAIDType == "RAID0" {
			capacity *= int64(len(idx))
		}
		v := hardware.Volume{ID: fmt.Sprintf("Volume%d", len(hw.Volumes)), Name: req.Name, RAIDType: req.RAIDType, CapacityBytes: capacity, Drives: idx, Created: time.Now()}
		for slices.ContainsFunc(hw.Volumes, func(x hardware.Volume) bool { return x.ID == v.ID }) {
			v.ID += "a"
		}
		hw.Volumes = append(hw.Volumes, v)
		made = volumeBody(hw, v, sp, sp+"/Volumes/"+v.ID)
		return true
	})
	if bad != "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", bad)
		return
	}
	w.Header().Set("Location", made["@odata.id"].(string))
	rfhttp.WriteJSON(w, http.StatusCreated, made)
}

// SimpleStorageBody is the SimpleStorage resource of a machine at path, for BMCs without Storage.
func SimpleStorageBody(hw *hardware.System, path string) rfhttp.Obj {
	devs := make([]rfhttp.Obj, len(hw.Disks))
	for i, d := range hw.Disks {
		devs[i] = rfhttp.Obj{"Name": "Disk " + d.ID, "Manufacturer": d.Manufacturer, "Model": d.Model, "CapacityBytes": d.CapacityBytes, "Status": rfhttp.Status("Enabled")}
	}
	return rfhttp.Obj{
		"@odata.type": "#SimpleStorage.v1_2_0.SimpleStorage", "@odata.id": path, "Id": "1", "Name": "Smart Storage Controller",
		"UefiDevicePath": "PciRoot(0x0)/Pci(0x1F,0x2)/Sata(0x0,0x0,0x0)", "Devices": devs, "Status": rfhttp.Status("Enabled"),
	}
}
