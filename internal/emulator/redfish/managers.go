package redfish

import (
	"encoding/json"
	"maps"
	"net/http"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/media"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
)

func (b *BMC) routeManagers(w http.ResponseWriter, r *http.Request, segs []string, f *Faults) {
	mp := v1 + "/Managers/" + b.managerID
	if len(segs) >= 2 && segs[0] == b.managerID && segs[1] == "VirtualMedia" && b.mediaOnManager() && !f.NoVirtualMedia {
		media.Serve(w, r, mediaHost{b.systems[0]}, mp+"/VirtualMedia", segs[2:], f)
		return
	}
	if len(segs) == 3 && segs[0] == b.managerID && segs[1] == "Actions" && segs[2] == "Manager.Reset" {
		b.resetManager(w, r, f)
		return
	}
	if len(segs) >= 2 && segs[0] == b.managerID && segs[1] == "NetworkProtocol" {
		b.routeNetworkProtocol(w, r, segs[2:], f)
		return
	}
	if len(segs) == 2 && segs[0] == b.managerID && segs[1] == "Attributes" {
		b.serveManagerAttributes(w, r, mp+"/Attributes")
		return
	}
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	switch {
	case len(segs) == 0:
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(v1+"/Managers", "ManagerCollection", "Manager Collection", []string{mp}))
	case segs[0] != b.managerID:
		rfhttp.NotFound(w, r)
	case len(segs) == 1:
		servers := make([]obj, len(b.systems))
		chassis := make([]obj, len(b.systems))
		for i, s := range b.systems {
			servers[i] = rfhttp.Link(v1 + "/Systems/" + s.hw.ID)
			chassis[i] = rfhttp.Link(v1 + "/Chassis/" + s.hw.ChassisID)
		}
		m := obj{
			"@odata.type": "#Manager.v1_10_0.Manager", "@odata.id": mp, "Id": b.managerID, "Name": "Manager",
			"ManagerType": "BMC", "Manufacturer": b.profile.Manufacturer, "Model": b.mgrModel,
			"FirmwareVersion": b.FirmwareVersion(), "UUID": b.mgrUUID, "PowerState": "On", "Status": rfhttp.Status("Enabled"),
			"EthernetInterfaces": rfhttp.Link(mp + "/EthernetInterfaces"),
			"NetworkProtocol":    rfhttp.Link(mp + "/NetworkProtocol"),
			"Links":              obj{"ManagerForServers": servers, "ManagerForChassis": chassis},
			"Actions": obj{"#Manager.Reset": obj{
				"target":                            mp + "/Actions/Manager.Reset",
				"ResetType@Redfish.AllowableValues": []string{"GracefulRestart", "ForceRestart"},
			}},
		}
		if b.mediaOnManager() && !f.NoVirtualMedia {
			m["VirtualMedia"] = rfhttp.Link(mp + "/VirtualMedia")
		}
		m["SerialConsole"] = b.managerSerialConsole()
		if b.reportsReset.Load() {
			// LastResetTime came with Manager v1_13_0.
			m["@odata.type"] = "#Manager.v1_13_0.Manager"
			m["LastResetTime"] = b.LastResetTime().UTC().Format(time.RFC3339)
		}
		rfhttp.WriteJSON(w, http.StatusOK, m)
	case segs[1] == "EthernetInterfaces":
		rfhttp.ServeMembers(w, r, mp+"/EthernetInterfaces", "EthernetInterfaceCollection", "Manager Ethernet Interfaces", segs[2:], 1,
			func(int) string { return "1" },
			func(_ int, p string) obj {
				return obj{
					"@odata.type": "#EthernetInterface.v1_5_1.EthernetInterface", "@odata.id": p, "Id": "1", "Name": "Manager Ethernet Interface",
					"MACAddress": b.mgrMAC, "PermanentMACAddress": b.mgrMAC, "LinkStatus": "LinkUp", "SpeedMbps": 1000,
					"InterfaceEnabled": true, "Status": rfhttp.Status("Enabled"),
				}
			})
	default:
		rfhttp.NotFound(w, r)
	}
}

// resetManager restarts the BMC itself: recorded, and every session ends, as when a real BMC
// reboots (its systems keep running).
func (b *BMC) resetManager(w http.ResponseWriter, r *http.Request, f *Faults) {
	if !rfhttp.MethodIs(w, r, http.MethodPost) {
		return
	}
	var req struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if req.ResetType != "GracefulRestart" && req.ResetType != "ForceRestart" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterNotSupported", "The parameter ResetType value "+req.ResetType+" is not supported by this manager.")
		return
	}
	now := time.Now()
	b.em.rec.add(Record{Time: now, BMC: b.index, Address: b.url, Via: via(r, b), Action: ActionManagerReset, ResetType: req.ResetType})
	// Seconds, as BMCs report it; a reset within the same second as the last still moves it.
	next := now.Truncate(time.Second)
	if last := b.LastResetTime(); !next.After(last) {
		next = last.Add(time.Second)
	}
	b.lastReset.Store(next.UnixNano())
	b.activateStagedFirmware()
	b.certs.Reset()
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed due to an internal service error.")
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
	b.ExpireSessions()
	// Answered first, then down while it restarts, as a real BMC.
	b.silence(b.em.opts.Latency.ResetSilence)
}

func (b *BMC) routeChassis(w http.ResponseWriter, r *http.Request, segs []string) {
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	if len(segs) == 0 {
		ids := make([]string, len(b.systems))
		for i, s := range b.systems {
			ids[i] = v1 + "/Chassis/" + s.hw.ChassisID
		}
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(v1+"/Chassis", "ChassisCollection", "Chassis Collection", ids))
		return
	}
	f := b.Faults()
	md := b.telemetryModel(&f)
	for _, s := range b.systems {
		if s.hw.ChassisID != segs[0] {
			continue
		}
		cp := v1 + "/Chassis/" + s.hw.ChassisID
		if len(segs) == 1 {
			body := obj{
				"@odata.type": "#Chassis.v1_14_0.Chassis", "@odata.id": cp, "Id": s.hw.ChassisID,
				"Name": "Chassis", "ChassisType": "RackMount", "Manufacturer": s.hw.Manufacturer, "Model": s.hw.Model,
				"SerialNumber": s.SerialNumber(), "PowerState": s.PowerState(), "Status": rfhttp.Status("Enabled"),
				"Links": obj{
					"ComputerSystems": []obj{rfhttp.Link(v1 + "/Systems/" + s.hw.ID)},
					"ManagedBy":       []obj{rfhttp.Link(v1 + "/Managers/" + b.managerID)},
				},
			}
			maps.Copy(body, md.Links(cp))
			rfhttp.WriteJSON(w, http.StatusOK, body)
			return
		}
		if sensors.Serve(w, r, md, s.Sensors(time.Now()), cp, segs[1:]) {
			return
		}
		break
	}
	rfhttp.NotFound(w, r)
}
