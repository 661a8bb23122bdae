package redfish

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/inventory"
	"github.com/metalhub/metalhub/internal/emulator/redfish/media"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

func (b *BMC) routeSystems(w http.ResponseWriter, r *http.Request, segs []string, f *Faults) {
	if len(segs) == 0 {
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			ids := make([]string, len(b.systems))
			for i, s := range b.systems {
				ids[i] = v1 + "/Systems/" + s.hw.ID
			}
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(v1+"/Systems", "ComputerSystemCollection", "Computer System Collection", ids))
		}
		return
	}
	s := b.byID[segs[0]]
	if s == nil {
		// A system addressed by UUID redirects to its canonical address.
		for _, c := range b.systems {
			if strings.EqualFold(c.UUID(), segs[0]) {
				target := v1 + "/Systems/" + c.hw.ID + strings.TrimPrefix(strings.TrimRight(r.URL.Path, "/"), v1+"/Systems/"+segs[0])
				http.Redirect(w, r, target, http.StatusTemporaryRedirect)
				return
			}
		}
		rfhttp.NotFound(w, r)
		return
	}
	sp := v1 + "/Systems/" + s.hw.ID
	rest := segs[1:]
	switch {
	case len(rest) == 0:
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch) {
			return
		}
		if r.Method == http.MethodPatch {
			b.patchSystem(w, r, s, f)
			return
		}
		s.mu.Lock()
		body, etag := b.systemBody(s, f), s.etagLocked()
		s.mu.Unlock()
		w.Header().Set("ETag", etag)
		rfhttp.WriteJSON(w, http.StatusOK, body)
	case len(rest) == 2 && rest[0] == "Actions" && rest[1] == "ComputerSystem.Reset":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			b.resetSystem(w, r, s, f)
		}
	case len(rest) == 1 && rest[0] == "ResetActionInfo" && b.profile.ActionInfo:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "@odata.id": sp + "/ResetActionInfo",
				"Id": "ResetActionInfo", "Name": "Reset Action Info",
				"Parameters": []obj{{"Name": "ResetType", "Required": true, "DataType": "String", "AllowableValues": s.allowedResetTypes()}},
			})
		}
	case rest[0] == "Processors":
		rfhttp.ServeMembers(w, r, sp+"/Processors", "ProcessorCollection", "Processors Collection", rest[1:], len(s.hw.CPUs),
			func(i int) string { return s.hw.CPUs[i].ID }, func(i int, p string) obj { return inventory.CPUBody(s.hw.CPUs[i], p) })
	case rest[0] == "Memory":
		rfhttp.ServeMembers(w, r, sp+"/Memory", "MemoryCollection", "Memory Collection", rest[1:], len(s.hw.DIMMs),
			func(i int) string { return s.hw.DIMMs[i].ID }, func(i int, p string) obj { return inventory.DIMMBody(s.hw.DIMMs[i], p) })
	case rest[0] == "EthernetInterfaces":
		power := s.PowerState()
		rfhttp.ServeMembers(w, r, sp+"/EthernetInterfaces", "EthernetInterfaceCollection", "Ethernet Interface Collection", rest[1:], len(s.hw.NICs),
			func(i int) string { return s.hw.NICs[i].ID }, func(i int, p string) obj { return nicBody(s, i, p, power) })
	case rest[0] == "Bios":
		b.serveBios(w, r, s, sp+"/Bios", rest[1:])
	case rest[0] == "BootOptions":
		rfhttp.ServeMembers(w, r, sp+"/BootOptions", "BootOptionCollection", "Boot Options", rest[1:], len(bootOptions),
			func(i int) string { return bootOptions[i].ref }, func(i int, p string) obj {
				return obj{"@odata.type": "#BootOption.v1_0_4.BootOption", "@odata.id": p, "Id": bootOptions[i].ref, "Name": "Boot Option",
					"BootOptionReference": bootOptions[i].ref, "DisplayName": bootOptions[i].name, "BootOptionEnabled": true}
			})
	case rest[0] == "VirtualMedia" && !b.mediaOnManager() && !f.NoVirtualMedia:
		media.Serve(w, r, mediaHost{s}, sp+"/VirtualMedia", rest[1:], f)
	case rest[0] == "Storage" && !b.profile.SimpleOnly:
		inventory.ServeStorage(w, r, storageHost{s}, b.profile.StorageID, sp+"/Storage", rest[1:], f)
	case rest[0] == "LogServices" && !f.NoLogServices:
		b.serveLogServices(w, r, s, sp+"/LogServices", rest[1:])
	case rest[0] == "SimpleStorage" && b.profile.SimpleOnly:
		rfhttp.ServeMembers(w, r, sp+"/SimpleStorage", "SimpleStorageCollection", "Simple Storage Collection", rest[1:], 1,
			func(int) string { return "1" }, func(_ int, p string) obj { return inventory.SimpleStorageBody(&s.hw, p) })
	default:
		rfhttp.NotFound(w, r)
	}
}

func (b *BMC) systemBody(s *System, f *Faults) obj {
	h, p := &s.hw, b.profile
	sp := v1 + "/Systems/" + h.ID
	var memGiB int
	for _, d := range h.DIMMs {
		memGiB += d.CapacityMiB / 1024
	}
	enabled := s.boot.Enabled
	if f.BootReadbackContinuous && enabled == "Once" {
		enabled = "Continuous"
	}
	boot := obj{
		"BootSourceOverrideEnabled":                        enabled,
		"BootSourceOverrideTarget":                         s.boot.Target,
		"BootSourceOverrideTarget@Redfish.AllowableValues": b.bootTargets(f),
	}
	if b.httpBoot(f) {
		boot["HttpBootUri"] = s.boot.HTTPBootURI
	}
	boot["BootOrder"] = s.bootOrder
	boot["BootOptions"] = rfhttp.Link(sp + "/BootOptions")
	if p.UEFI {
		boot["BootSourceOverrideMode"] = s.boot.Mode
		boot["BootSourceOverrideMode@Redfish.AllowableValues"] = []string{"Legacy", "UEFI"}
	}
	reset := obj{"target": sp + "/Actions/ComputerSystem.Reset"}
	if p.ActionInfo {
		reset["@Redfish.ActionInfo"] = sp + "/ResetActionInfo"
	} else {
		reset["ResetType@Redfish.AllowableValues"] = p.ResetTypes
	}
	// Only the health rollups: the readings are the chassis'.
	sf := s.sens.Faults()
	led := s.led
	if led == "" {
		led = "Off"
	}
	body := obj{
		"@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem", "@odata.id": sp, "@odata.etag": s.etagLocked(),
		"Id": h.ID, "Name": "System", "SystemType": "Physical",
		"Manufacturer": h.Manufacturer, "Model": h.Model, "SerialNumber": h.Serial, "SKU": h.SKU,
		"PartNumber": h.PartNumber, "UUID": h.UUID, "BiosVersion": h.BIOS, "AssetTag": "",
		"PowerState": s.power, "IndicatorLED": led, "LocationIndicatorActive": led != "Off", "Status": s.sel.Status(),
		"ProcessorSummary": obj{
			"Count": len(h.CPUs), "Model": h.CPUs[0].Model, "CoreCount": len(h.CPUs) * h.CPUs[0].Cores,
			"LogicalProcessorCount": 2 * len(h.CPUs) * h.CPUs[0].Cores, "Status": componentStatus(cmp.Or(sf.ProcessorHealth, "OK")),
		},
		"MemorySummary": obj{"TotalSystemMemoryGiB": memGiB, "Status": componentStatus(cmp.Or(sf.MemoryHealth, "OK"))},
		"Boot":          boot,
		"Processors":    rfhttp.Link(sp + "/Processors"), "Memory": rfhttp.Link(sp + "/Memory"),
		"EthernetInterfaces": rfhttp.Link(sp + "/EthernetInterfaces"), "Bios": rfhttp.Link(sp + "/Bios"),
		"Links": obj{
			"Chassis":   []obj{rfhttp.Link(v1 + "/Chassis/" + h.ChassisID)},
			"ManagedBy": []obj{rfhttp.Link(v1 + "/Managers/" + b.managerID)},
		},
		"Actions": obj{"#ComputerSystem.Reset": reset},
	}
	body["SerialConsole"] = b.systemSerialConsole(h.ID)
	if b.reportsSystemReset.Load() {
		body["LastResetTime"] = time.Unix(0, s.lastReset).UTC().Format(time.RFC3339)
	}
	if !b.mediaOnManager() && !f.NoVirtualMedia {
		body["VirtualMedia"] = rfhttp.Link(sp + "/VirtualMedia")
	}
	if !f.NoLogServices {
		body["LogServices"] = rfhttp.Link(sp + "/LogServices")
	}
	if p.SimpleOnly {
		body["SimpleStorage"] = rfhttp.Link(sp + "/SimpleStorage")
	} else {
		body["Storage"] = rfhttp.Link(sp + "/Storage")
	}
	return body
}

func nicBody(s *System, i int, path, power string) obj {
	n := s.hw.NICs[i]
	link := "NoLink"
	if n.Connected {
		link = "LinkDown"
		if power == PowerOn {
			link = "LinkUp"
		}
	}
	ipv4, ipv6 := []obj{}, []obj{}
	if power == PowerOn && n.Connected && i == 0 {
		// Documentation ranges: the emulator never suggests real networks.
		g := s.bmc.index*len(s.bmc.systems) + slices.Index(s.bmc.systems, s)
		ipv4 = append(ipv4, obj{"Address": fmt.Sprintf("198.18.%d.%d", (g/250)%256, g%250+2), "SubnetMask": "255.255.0.0", "AddressOrigin": "DHCP", "Gateway": "198.18.0.1"})
		ipv6 = append(ipv6, obj{"Address": fmt.Sprintf("2001:db8::%x", g+2), "PrefixLength": 64, "AddressOrigin": "SLAAC", "AddressState": "Preferred"})
	}
	speed := any(n.SpeedMbps)
	if link != "LinkUp" {
		speed = nil
	}
	return obj{
		"@odata.type": "#EthernetInterface.v1_5_1.EthernetInterface", "@odata.id": path, "Id": n.ID, "Name": "Ethernet Interface " + n.ID,
		"MACAddress": n.MAC, "PermanentMACAddress": n.MAC, "SpeedMbps": speed, "LinkStatus": link,
		"InterfaceEnabled": true, "Status": rfhttp.Status("Enabled"), "IPv4Addresses": ipv4, "IPv6Addresses": ipv6,
	}
}

func (b *BMC) resetSystem(w http.ResponseWriter, r *http.Request, s *System, f *Faults) {
	var req struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if req.ResetType == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.")
		return
	}
	if !slices.Contains(s.allowedResetTypes(), req.ResetType) {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterNotSupported", "The parameter ResetType value "+req.ResetType+" is not supported by this system.")
		return
	}
	s.reset(req.ResetType, f.IgnoreGracefulShutdown, f.FailPowerTransitions)
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionReset, ResetType: req.ResetType})
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed due to an internal service error.")
		return
	}
	switch b.profile.ResetStatus {
	case http.StatusAccepted:
		task := itoa(b.tasks.Add(1))
		w.Header().Set("Location", v1+"/TaskService/Tasks/"+task)
		rfhttp.WriteJSON(w, http.StatusAccepted, obj{"@odata.type": "#Task.v1_4_3.Task", "@odata.id": v1 + "/TaskService/Tasks/" + task, "Id": task, "TaskState": "Running"})
	case http.StatusOK:
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.SuccessBody())
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

var patchableSystem = []string{"Boot", "IndicatorLED", "LocationIndicatorActive", "AssetTag"}

func (b *BMC) patchSystem(w http.ResponseWriter, r *http.Request, s *System, f *Faults) {
	var props map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&props); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	for k := range props {
		if !slices.Contains(patchableSystem, k) {
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyNotWritable", "The property "+k+" is a read only property and cannot be assigned a value.")
			return
		}
	}
	var boot struct {
		BootSourceOverrideEnabled, BootSourceOverrideTarget, BootSourceOverrideMode *string
		HttpBootUri                                                                 *string
		BootOrder                                                                   []string
	}
	if raw, ok := props["Boot"]; ok {
		if err := json.Unmarshal(raw, &boot); err != nil {
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueTypeError", "The value for the property Boot is of a different type than the property can accept.")
			return
		}
	}
	if v := boot.BootSourceOverrideEnabled; v != nil && normalizeEnabled(*v) == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+*v+" for the property BootSourceOverrideEnabled is not in the list of acceptable values.")
		return
	}
	if boot.BootOrder != nil && !samePermutation(boot.BootOrder, s.BootOrder()) {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueError", "The value for the property BootOrder must name every boot option of the system once.")
		return
	}
	if v := boot.HttpBootUri; v != nil && !b.httpBoot(f) {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyUnknown", "The property HttpBootUri is not in the list of valid properties for the resource.")
		return
	}
	if v := boot.BootSourceOverrideTarget; v != nil && !slices.Contains(b.bootTargets(f), *v) {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+*v+" for the property BootSourceOverrideTarget is not in the list of acceptable values.")
		return
	}
	if v := boot.BootSourceOverrideMode; v != nil && (!b.profile.UEFI || (*v != "UEFI" && *v != "Legacy")) {
		// Services that do not advertise the mode reject it.
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyUnknown", "The property BootSourceOverrideMode is not in the list of valid properties for the resource.")
		return
	}
	var led string
	if raw, ok := props["IndicatorLED"]; ok {
		if err := json.Unmarshal(raw, &led); err != nil || (led != "Lit" && led != "Blinking" && led != "Off") {
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+string(raw)+" for the property IndicatorLED is not in the list of acceptable values.")
			return
		}
	}
	if raw, ok := props["LocationIndicatorActive"]; ok {
		// The newer property (IndicatorLED is deprecated since ComputerSystem v1.13): a write
		// of it updates IndicatorLED too.
		var on bool
		if err := json.Unmarshal(raw, &on); err != nil {
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueTypeError", "The value for the property LocationIndicatorActive is of a different type than the property can accept.")
			return
		}
		led = "Off"
		if on {
			led = "Lit"
		}
	}

	s.mu.Lock()
	match := r.Header.Get("If-Match")
	if (match == "" && f.StrictETag) || (match != "" && match != "*" && match != s.etagLocked()) {
		s.mu.Unlock()
		rfhttp.WriteError(w, http.StatusPreconditionFailed, "PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
		return
	}
	if v := boot.BootSourceOverrideEnabled; v != nil {
		s.boot.Enabled = normalizeEnabled(*v)
	}
	if v := boot.BootSourceOverrideTarget; v != nil {
		s.boot.Target = *v
	}
	if v := boot.BootSourceOverrideMode; v != nil {
		s.boot.Mode = *v
	}
	if v := boot.HttpBootUri; v != nil {
		s.boot.HTTPBootURI = *v
	}
	if boot.BootOrder != nil {
		s.bootOrder = slices.Clone(boot.BootOrder)
	}
	overridden := boot.BootSourceOverrideEnabled != nil || boot.BootSourceOverrideTarget != nil || boot.BootSourceOverrideMode != nil || boot.HttpBootUri != nil
	if led != "" {
		s.led = led
	}
	s.etag++
	newBoot, etag := s.boot, s.etagLocked()
	s.mu.Unlock()

	if overridden {
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionBootOverride, Boot: &newBoot})
	}
	if boot.BootOrder != nil {
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionBootOrder, BootOrder: slices.Clone(boot.BootOrder)})
	}
	if led != "" {
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionIndicatorLED, LED: led})
	}
	w.Header().Set("ETag", etag)
	if b.profile.PatchStatus == http.StatusOK {
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.SuccessBody())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// storageHost gives the storage handler the system's hardware under its lock (a volume made or
// deleted moves the system's ETag), the BMC's TaskService and its recorder (storage.go).
type storageHost struct{ s *System }

func (h storageHost) Hardware(fn func(*hardware.System) bool) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if fn(&h.s.hw) {
		h.s.etag++
	}
}

// Volumes are the system's volumes as its controller has them now.
func (s *System) Volumes() []hardware.Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hw.Volumes)
}

// Disks are the system's drives.
func (s *System) Disks() []hardware.Disk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hw.Disks)
}
