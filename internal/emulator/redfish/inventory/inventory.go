// Package inventory serves the Redfish resources of an emulated machine's hardware: its
// processors, memory, storage controller, drives and volumes, from the generated description
// (package hardware).
//
// It holds no state; it must not import the emulator package.
package inventory

import (
	"net/http"

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

// ServeStorage serves a machine's Storage collection at base: its one controller (sid), drives
// and volumes.
func ServeStorage(w http.ResponseWriter, r *http.Request, hw *hardware.System, sid, base string, rest []string) {
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
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
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
			"@odata.type": "#Storage.v1_8_0.Storage", "@odata.id": sp, "Id": sid, "Name": "Storage Controller " + sid,
			"StorageControllers": []rfhttp.Obj{{"MemberId": "0", "Name": sid, "Model": "PERC H755 Front", "Status": rfhttp.Status("Enabled")}},
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
			func(i int, p string) rfhttp.Obj {
				v := hw.Volumes[i]
				drives := make([]rfhttp.Obj, len(v.Drives))
				for k, d := range v.Drives {
					drives[k] = rfhttp.Link(sp + "/Drives/" + hw.Disks[d].ID)
				}
				return rfhttp.Obj{
					"@odata.type": "#Volume.v1_5_0.Volume", "@odata.id": p, "Id": v.ID, "Name": v.Name,
					"CapacityBytes": v.CapacityBytes, "RAIDType": v.RAIDType, "VolumeType": "Mirrored",
					"Links": rfhttp.Obj{"Drives": drives}, "Status": rfhttp.Status("Enabled"),
				}
			})
	default:
		rfhttp.NotFound(w, r)
	}
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
