// Package inventory serves the Redfish resources of an emulated machine's hardware: its
// processors, memory, storage controller, drives and volumes, from the generated description
// (package hardware).
//
// Drives offer Drive.SecureErase and volumes Volume.Initialize, each run as a task of the BMC's
// TaskService (update.Job); volumes are made by a POST to Volumes and removed by a DELETE.
//
// It holds no state (the machine's, volumes and erasures included, is the system's, reached
// through Host; the tasks are the BMC's); it must not import the emulator package.
package inventory

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/update"
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

// Host is what the storage handler needs of a machine and its BMC.
type Host interface {
	// Hardware runs fn on the machine's hardware under the system's lock; fn says whether it
	// changed what the system's resources show (a volume made or deleted: its ETag moves).
	Hardware(fn func(hw *hardware.System) bool)
	// Tasks is the BMC's TaskService, which runs the erases.
	Tasks() *update.Service
	// Record records an action accepted from r on device (a drive's or volume's Id);
	// initializeType is a Volume.Initialize's InitializeType.
	Record(r *http.Request, action, device, initializeType string)
}

// The storage actions in the recorder: Record.Device is the drive's or volume's Id.
const (
	// ActionSecureErase is an accepted Drive.SecureErase (recorded when the task starts).
	ActionSecureErase = "SecureErase"
	// ActionInitializeVolume is an accepted Volume.Initialize (Record.InitializeType says Fast
	// or Slow; recorded when the task starts).
	ActionInitializeVolume = "InitializeVolume"
	// ActionDeleteVolume is a volume deleted (DELETE on it).
	ActionDeleteVolume = "DeleteVolume"
)

// defaultEraseDuration is how long an erase task runs without Faults.EraseDuration.
const defaultEraseDuration = 500 * time.Millisecond

// initializeTypes are the Volume.Initialize types the emulated controllers take.
var initializeTypes = []string{"Fast", "Slow"}

// raidTypes are what the emulated controllers make.
var raidTypes = []string{"RAID0", "RAID1"}

// ServeStorage serves a machine's Storage collection at base: its one controller (sid), drives
// and volumes; rest are the segments after base.
//
// Unless f.NoVolumes the controller advertises SupportedRAIDTypes, a POST to its Volumes makes a
// volume at once (RAID0 over any drives, RAID1 over two, none of them in another volume) and a
// DELETE of a volume removes it (204), freeing its drives; with it, it makes and deletes none
// (405). Unless f.NoSecureErase every drive offers Drive.SecureErase, and unless f.NoVolumes or
// f.NoVolumeInitialize every volume Volume.Initialize (Fast or Slow): a POST starts a task in
// the BMC's TaskService (202, Location the task) that runs f.EraseDuration and completes, or
// ends in Exception with f.EraseFails; a second one on the same drive or volume while it runs
// is refused (409 ResourceInUse), as is deleting a volume being initialized.
func ServeStorage(w http.ResponseWriter, r *http.Request, h Host, sid, base string, rest []string, f *faults.Faults) {
	if len(rest) == 3 && rest[0] == sid && rest[1] == "Volumes" && rest[2] == "" {
		rest = rest[:2]
	}
	makesVolumes := !f.NoVolumes
	sp := base + "/" + sid
	switch {
	case r.Method == http.MethodPost && len(rest) == 2 && rest[0] == sid && rest[1] == "Volumes":
		if !makesVolumes {
			rfhttp.WriteError(w, http.StatusMethodNotAllowed, "ActionNotSupported", "this controller makes no volumes")
			return
		}
		createVolume(w, r, h, sp, f)
		return
	case len(rest) == 5 && rest[0] == sid && rest[1] == "Drives" && rest[3] == "Actions" && rest[4] == "Drive.SecureErase":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			secureErase(w, r, h, sp, rest[2], f)
		}
		return
	case len(rest) == 5 && rest[0] == sid && rest[1] == "Volumes" && rest[3] == "Actions" && rest[4] == "Volume.Initialize":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			initializeVolume(w, r, h, sp, rest[2], f)
		}
		return
	case r.Method == http.MethodDelete && len(rest) == 3 && rest[0] == sid && rest[1] == "Volumes":
		if !makesVolumes {
			rfhttp.WriteError(w, http.StatusMethodNotAllowed, "ActionNotSupported", "this controller deletes no volumes")
			return
		}
		deleteVolume(w, r, h, sp, rest[2], f)
		return
	}
	methods := []string{http.MethodGet}
	if makesVolumes && len(rest) == 3 && rest[1] == "Volumes" {
		methods = append(methods, http.MethodDelete)
	}
	if !rfhttp.MethodIs(w, r, methods...) {
		return
	}
	var hw hardware.System
	h.Hardware(func(live *hardware.System) bool {
		hw = *live
		hw.Disks = slices.Clone(live.Disks)
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
				p := sp + "/Drives/" + d.ID
				body := rfhttp.Obj{
					"@odata.type": "#Drive.v1_9_0.Drive", "@odata.id": p, "Id": d.ID, "Name": "Disk " + d.ID,
					"Model": d.Model, "Manufacturer": d.Manufacturer, "SerialNumber": d.Serial, "CapacityBytes": d.CapacityBytes,
					"MediaType": d.MediaType, "Protocol": d.Protocol, "Status": rfhttp.Status("Enabled"),
				}
				if !f.NoSecureErase {
					body["Actions"] = rfhttp.Obj{"#Drive.SecureErase": rfhttp.Obj{"target": p + "/Actions/Drive.SecureErase"}}
				}
				rfhttp.WriteJSON(w, http.StatusOK, body)
				return
			}
		}
		rfhttp.NotFound(w, r)
	case rest[1] == "Volumes" && len(rest) <= 3:
		rfhttp.ServeMembers(w, r, sp+"/Volumes", "VolumeCollection", "Volume Collection", rest[2:], len(hw.Volumes),
			func(i int) string { return hw.Volumes[i].ID },
			func(i int, p string) rfhttp.Obj { return volumeBody(&hw, hw.Volumes[i], sp, p, f) })
	default:
		rfhttp.NotFound(w, r)
	}
}

func volumeBody(hw *hardware.System, v hardware.Volume, sp, p string, f *faults.Faults) rfhttp.Obj {
	drives := make([]rfhttp.Obj, len(v.Drives))
	for k, d := range v.Drives {
		drives[k] = rfhttp.Link(sp + "/Drives/" + hw.Disks[d].ID)
	}
	typ := "Mirrored"
	if v.RAIDType == "RAID0" {
		typ = "StripedWithParity"
	}
	body := rfhttp.Obj{
		"@odata.type": "#Volume.v1_5_0.Volume", "@odata.id": p, "Id": v.ID, "Name": v.Name,
		"CapacityBytes": v.CapacityBytes, "RAIDType": v.RAIDType, "VolumeType": typ,
		"Links": rfhttp.Obj{"Drives": drives}, "Status": rfhttp.Status("Enabled"),
	}
	if initializes(f) {
		body["Actions"] = rfhttp.Obj{"#Volume.Initialize": rfhttp.Obj{
			"target": p + "/Actions/Volume.Initialize", "InitializeType@Redfish.AllowableValues": initializeTypes,
		}}
	}
	return body
}

// initializes says whether the volumes offer Volume.Initialize.
func initializes(f *faults.Faults) bool { return !f.NoVolumes && !f.NoVolumeInitialize }

// createVolume makes the volume a POST asks for, or says why not (400).
func createVolume(w http.ResponseWriter, r *http.Request, h Host, sp string, f *faults.Faults) {
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
		made = volumeBody(hw, v, sp, sp+"/Volumes/"+v.ID, f)
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
