package sensors

import (
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

type obj = rfhttp.Obj

// Model says which resources a chassis serves its readings in: real BMCs serve the legacy
// Power and Thermal (deprecated, still the most common), the newer subsystems and Sensors, or both.
type Model struct {
	Legacy, Subsystems bool
}

// Links are the chassis' links to the resources of the model, to merge into its body.
func (md Model) Links(base string) obj {
	l := obj{}
	if md.Legacy {
		l["Power"] = rfhttp.Link(base + "/Power")
		l["Thermal"] = rfhttp.Link(base + "/Thermal")
	}
	if md.Subsystems {
		l["PowerSubsystem"] = rfhttp.Link(base + "/PowerSubsystem")
		l["ThermalSubsystem"] = rfhttp.Link(base + "/ThermalSubsystem")
		l["Sensors"] = rfhttp.Link(base + "/Sensors")
	}
	return l
}

// Serve answers the chassis' telemetry resources below base (the chassis' path): rest is the
// path after it. It reports false when rest is none of them, for the caller to answer 404.
func Serve(w http.ResponseWriter, r *http.Request, md Model, s Snapshot, base string, rest []string) bool {
	if len(rest) == 0 {
		return false
	}
	switch {
	case md.Legacy && len(rest) == 1 && rest[0] == "Power":
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, powerBody(s, base+"/Power"))
		}
	case md.Legacy && len(rest) == 1 && rest[0] == "Thermal":
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, thermalBody(s, base+"/Thermal"))
		}
	case md.Subsystems && rest[0] == "PowerSubsystem":
		p := base + "/PowerSubsystem"
		if len(rest) == 1 {
			if rfhttp.MethodIs(w, r, http.MethodGet) {
				rfhttp.WriteJSON(w, http.StatusOK, obj{
					"@odata.type": "#PowerSubsystem.v1_1_0.PowerSubsystem", "@odata.id": p, "Id": "PowerSubsystem",
					"Name": "Power Subsystem", "CapacityWatts": 1600, "Status": rollup(s.PSUs),
					"PowerSupplies": rfhttp.Link(p + "/PowerSupplies"),
				})
			}
			return true
		}
		if rest[1] != "PowerSupplies" || len(rest) > 3 {
			return false
		}
		rfhttp.ServeMembers(w, r, p+"/PowerSupplies", "PowerSupplyCollection", "Power Supply Collection", rest[2:], len(s.PSUs),
			func(i int) string { return s.PSUs[i].Name }, func(i int, path string) obj { return psuBody(s.PSUs[i], path) })
	case md.Subsystems && rest[0] == "ThermalSubsystem":
		p := base + "/ThermalSubsystem"
		if len(rest) == 1 {
			if rfhttp.MethodIs(w, r, http.MethodGet) {
				rfhttp.WriteJSON(w, http.StatusOK, obj{
					"@odata.type": "#ThermalSubsystem.v1_0_0.ThermalSubsystem", "@odata.id": p, "Id": "ThermalSubsystem",
					"Name": "Thermal Subsystem", "Status": rollup(s.Fans), "Fans": rfhttp.Link(p + "/Fans"),
				})
			}
			return true
		}
		if rest[1] != "Fans" || len(rest) > 3 {
			return false
		}
		rfhttp.ServeMembers(w, r, p+"/Fans", "FanCollection", "Fan Collection", rest[2:], len(s.Fans),
			func(i int) string { return s.Fans[i].Name }, func(i int, path string) obj { return fanBody(s.Fans[i], path, base) })
	case md.Subsystems && rest[0] == "Sensors" && len(rest) <= 2:
		sensors := sensorList(s)
		rfhttp.ServeMembers(w, r, base+"/Sensors", "SensorCollection", "Sensors", rest[1:], len(sensors),
			func(i int) string { return sensors[i].id }, func(i int, path string) obj { return sensors[i].body(path) })
	default:
		return false
	}
	return true
}

// SensorID is a reading's Id in the Sensors collection (OpenBMC's style: no spaces).
func SensorID(name string) string { return strings.ReplaceAll(name, " ", "_") }

func status(health string) obj { return obj{"State": "Enabled", "Health": health} }

// rollup is the worst health of parts.
func rollup(parts []Reading) obj {
	worst := HealthOK
	for _, p := range parts {
		if p.Health == HealthCritical || (p.Health == HealthWarning && worst == HealthOK) {
			worst = p.Health
		}
	}
	return obj{"State": "Enabled", "Health": worst, "HealthRollup": worst}
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func powerBody(s Snapshot, p string) obj {
	psus := make([]obj, len(s.PSUs))
	for i, u := range s.PSUs {
		psus[i] = obj{
			"@odata.id": p + "#/PowerSupplies/" + itoa(i), "MemberId": itoa(i), "Name": u.Name,
			"PowerSupplyType": "AC", "LineInputVoltage": 230, "PowerCapacityWatts": 800,
			"LastPowerOutputWatts": round1(u.Value), "Status": status(u.Health),
		}
	}
	return obj{
		"@odata.type": "#Power.v1_7_1.Power", "@odata.id": p, "Id": "Power", "Name": "Power",
		"PowerControl": []obj{{
			"@odata.id": p + "#/PowerControl/0", "MemberId": "0", "Name": "System Power Control",
			"PowerConsumedWatts": round1(s.PowerWatts), "PowerCapacityWatts": 1600,
			"PowerMetrics": obj{"IntervalInMin": 1, "AverageConsumedWatts": round1(s.PowerWatts)},
			"Status":       rollup(s.PSUs),
		}},
		"PowerControl@odata.count":  1,
		"PowerSupplies":             psus,
		"PowerSupplies@odata.count": len(psus),
	}
}

func thermalBody(s Snapshot, p string) obj {
	temps := make([]obj, len(s.Temperatures))
	for i, t := range s.Temperatures {
		temps[i] = obj{
			"@odata.id": p + "#/Temperatures/" + itoa(i), "MemberId": itoa(i), "Name": t.Name,
			"ReadingCelsius": round1(t.Value), "PhysicalContext": context(t.Name),
			"UpperThresholdCritical": 95, "Status": status(t.Health),
		}
	}
	fans := make([]obj, len(s.Fans))
	for i, f := range s.Fans {
		fans[i] = obj{
			"@odata.id": p + "#/Fans/" + itoa(i), "MemberId": itoa(i), "Name": f.Name,
			"Reading": int(math.Round(f.Value)), "ReadingUnits": "RPM", "PhysicalContext": "SystemBoard",
			"LowerThresholdCritical": 500, "Status": status(f.Health),
		}
	}
	return obj{
		"@odata.type": "#Thermal.v1_6_0.Thermal", "@odata.id": p, "Id": "Thermal", "Name": "Thermal",
		"Temperatures": temps, "Temperatures@odata.count": len(temps),
		"Fans": fans, "Fans@odata.count": len(fans),
	}
}

func psuBody(u Reading, p string) obj {
	return obj{
		"@odata.type": "#PowerSupply.v1_5_0.PowerSupply", "@odata.id": p, "Id": u.Name, "Name": u.Name,
		"PowerSupplyType": "AC", "PowerCapacityWatts": 800, "Status": status(u.Health),
	}
}

func fanBody(f Reading, p, chassis string) obj {
	pct := math.Round(f.Value / 120) // of a 12000 RPM fan
	return obj{
		"@odata.type": "#Fan.v1_3_0.Fan", "@odata.id": p, "Id": f.Name, "Name": f.Name,
		"PhysicalContext": "SystemBoard", "Status": status(f.Health),
		"SpeedPercent": obj{
			"Reading": pct, "SpeedRPM": math.Round(f.Value),
			"DataSourceUri": chassis + "/Sensors/" + SensorID(f.Name),
		},
	}
}

type sensor struct {
	id, name, typ, units, context string
	value                         float64
	health                        string
}

func (s sensor) body(p string) obj {
	return obj{
		"@odata.type": "#Sensor.v1_2_0.Sensor", "@odata.id": p, "Id": s.id, "Name": s.name,
		"ReadingType": s.typ, "ReadingUnits": s.units, "Reading": round1(s.value),
		"PhysicalContext": s.context, "Status": status(s.health),
	}
}

// sensorList is the Sensors collection: the chassis' draw, then temperatures and fans.
func sensorList(s Snapshot) []sensor {
	out := []sensor{{id: "total_power", name: "Total Power", typ: "Power", units: "W", context: "Chassis", value: s.PowerWatts, health: HealthOK}}
	for _, t := range s.Temperatures {
		out = append(out, sensor{id: SensorID(t.Name), name: t.Name, typ: "Temperature", units: "Cel", context: context(t.Name), value: t.Value, health: t.Health})
	}
	for _, f := range s.Fans {
		out = append(out, sensor{id: SensorID(f.Name), name: f.Name, typ: "Rotational", units: "RPM", context: "Fan", value: f.Value, health: f.Health})
	}
	return out
}

func context(name string) string {
	switch {
	case strings.HasPrefix(name, "Inlet"):
		return "Intake"
	case strings.HasPrefix(name, "Exhaust"):
		return "Exhaust"
	case strings.HasPrefix(name, "CPU"):
		return "CPU"
	}
	return "SystemBoard"
}

func itoa(i int) string { return strconv.Itoa(i) }
