package redfish_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
)

// chassisOf is the path of the system's chassis, from the system's links.
func chassisOf(t *testing.T, b *redfish.BMC, sysID string) string {
	t.Helper()
	_, sys := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + sysID, basic: true})
	links := sys["Links"].(map[string]any)["Chassis"].([]any)
	return links[0].(map[string]any)["@odata.id"].(string)
}

func within(v float64, r [2]float64) bool { return v >= r[0] && v <= r[1]+1 }

// Each vendor's chassis serves the model its firmware has, with readings in their ranges.
func TestChassisTelemetryModels(t *testing.T) {
	e := start(t, redfish.Options{BMCs: 12, PowerDelay: -1, InitialPower: redfish.PowerOn})
	seen := map[string]bool{}
	for _, b := range e.BMCs() {
		if seen[b.Vendor()] {
			continue
		}
		seen[b.Vendor()] = true
		t.Run(b.Vendor(), func(t *testing.T) {
			s := b.Systems()[0]
			cp := chassisOf(t, b, s.ID())
			_, ch := do(t, b, call{method: "GET", path: cp, basic: true})
			legacy, subsystems := ch["Power"] != nil, ch["PowerSubsystem"] != nil
			wantLegacy, wantSub := b.Vendor() != "openbmc", b.Vendor() == "dell" || b.Vendor() == "lenovo" || b.Vendor() == "openbmc"
			if legacy != wantLegacy || subsystems != wantSub || (ch["Thermal"] != nil) != wantLegacy || (ch["Sensors"] != nil) != wantSub {
				t.Fatalf("chassis links legacy=%t subsystems=%t, want %t %t: %v", legacy, subsystems, wantLegacy, wantSub, ch)
			}
			rg := sensors.RangesFor(s.SensorIndex(), true)
			if legacy {
				_, pw := do(t, b, call{method: "GET", path: cp + "/Power", basic: true})
				watts := pw["PowerControl"].([]any)[0].(map[string]any)["PowerConsumedWatts"].(float64)
				if !within(watts, rg.PowerWatts) {
					t.Errorf("PowerConsumedWatts %v outside %v", watts, rg.PowerWatts)
				}
				if n := len(pw["PowerSupplies"].([]any)); n != len(sensors.PSUs) {
					t.Errorf("%d power supplies", n)
				}
				_, th := do(t, b, call{method: "GET", path: cp + "/Thermal", basic: true})
				inlet := th["Temperatures"].([]any)[0].(map[string]any)
				if inlet["Name"] != "Inlet Temp" || !within(inlet["ReadingCelsius"].(float64), rg.Inlet) {
					t.Errorf("inlet %v outside %v", inlet, rg.Inlet)
				}
				fan := th["Fans"].([]any)[0].(map[string]any)
				if fan["ReadingUnits"] != "RPM" || !within(fan["Reading"].(float64), rg.FanRPM) {
					t.Errorf("fan %v outside %v", fan, rg.FanRPM)
				}
			} else if resp, _ := do(t, b, call{method: "GET", path: cp + "/Power", basic: true}); resp.StatusCode != 404 {
				t.Errorf("Power without the legacy model: %d", resp.StatusCode)
			}
			if subsystems {
				_, sens := do(t, b, call{method: "GET", path: cp + "/Sensors", basic: true})
				if n := int(sens["Members@odata.count"].(float64)); n != 1+len(s.Sensors(time.Now()).Temperatures)+len(sensors.Fans) {
					t.Errorf("%d sensors", n)
				}
				_, total := do(t, b, call{method: "GET", path: cp + "/Sensors/total_power", basic: true})
				if total["ReadingType"] != "Power" || !within(total["Reading"].(float64), rg.PowerWatts) {
					t.Errorf("total_power %v outside %v", total, rg.PowerWatts)
				}
				_, fan := do(t, b, call{method: "GET", path: cp + "/ThermalSubsystem/Fans/Fan1", basic: true})
				if rpm := fan["SpeedPercent"].(map[string]any)["SpeedRPM"].(float64); !within(rpm, rg.FanRPM) {
					t.Errorf("Fan1 %v outside %v", rpm, rg.FanRPM)
				}
				if resp, _ := do(t, b, call{method: "GET", path: cp + "/PowerSubsystem/PowerSupplies/PSU1", basic: true}); resp.StatusCode != 200 {
					t.Errorf("PSU1: %d", resp.StatusCode)
				}
			}
		})
	}
}

// A failed PSU and a stopped fan show as Critical where the BMC serves them, through the control
// API as through the Go one; faults take a model away.
func TestSensorFaults(t *testing.T) {
	e := start(t, redfish.Options{BMCs: 12, PowerDelay: -1, InitialPower: redfish.PowerOn})
	var b *redfish.BMC
	for _, c := range e.BMCs() {
		if c.Vendor() == "dell" { // both models
			b = c
			break
		}
	}
	if b == nil {
		t.Skip("no dell BMC in this fleet")
	}
	s := b.Systems()[0]
	ctl := httptest.NewServer(e.ControlHandler())
	defer ctl.Close()
	put := func(body string) int {
		req, _ := http.NewRequest(http.MethodPut, ctl.URL+"/emulator/bmcs/"+itoaT(b.Index())+"/systems/"+s.ID()+"/sensors", bytes.NewBufferString(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(`{"failedPsus":["PSU9"]}`); code != 400 {
		t.Fatalf("unknown PSU: %d, want 400", code)
	}
	if code := put(`{"failedPsus":["PSU2"],"stoppedFans":["Fan3"],"memoryHealth":"Critical"}`); code != 200 {
		t.Fatalf("set sensor faults: %d", code)
	}
	cp := chassisOf(t, b, s.ID())
	_, pw := do(t, b, call{method: "GET", path: cp + "/Power", basic: true})
	psu2 := pw["PowerSupplies"].([]any)[1].(map[string]any)
	if psu2["Status"].(map[string]any)["Health"] != "Critical" || psu2["LastPowerOutputWatts"].(float64) != 0 {
		t.Errorf("failed PSU2 reads %v", psu2)
	}
	_, psu := do(t, b, call{method: "GET", path: cp + "/PowerSubsystem/PowerSupplies/PSU2", basic: true})
	if psu["Status"].(map[string]any)["Health"] != "Critical" {
		t.Errorf("failed PSU2 in PowerSubsystem reads %v", psu)
	}
	_, th := do(t, b, call{method: "GET", path: cp + "/Thermal", basic: true})
	fan3 := th["Fans"].([]any)[2].(map[string]any)
	if fan3["Reading"].(float64) != 0 || fan3["Status"].(map[string]any)["Health"] != "Critical" {
		t.Errorf("stopped Fan3 reads %v", fan3)
	}
	_, sys := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + s.ID(), basic: true})
	if h := sys["MemorySummary"].(map[string]any)["Status"].(map[string]any)["HealthRollup"]; h != "Critical" {
		t.Errorf("memory health rollup %v", h)
	}

	if err := s.SetSensorFaults(redfish.SensorFaults{}); err != nil {
		t.Fatal(err)
	}
	_, pw = do(t, b, call{method: "GET", path: cp + "/Power", basic: true})
	if h := pw["PowerSupplies"].([]any)[1].(map[string]any)["Status"].(map[string]any)["Health"]; h != "OK" {
		t.Errorf("repaired PSU2 reads %v", h)
	}

	b.SetFaults(redfish.Faults{NoLegacyTelemetry: true})
	_, ch := do(t, b, call{method: "GET", path: cp, basic: true})
	if ch["Power"] != nil || ch["Thermal"] != nil || ch["Sensors"] == nil {
		t.Errorf("NoLegacyTelemetry chassis: %v", ch)
	}
	b.SetFaults(redfish.Faults{NoTelemetrySubsystems: true})
	if resp, _ := do(t, b, call{method: "GET", path: cp + "/Sensors", basic: true}); resp.StatusCode != 404 {
		t.Errorf("Sensors with NoTelemetrySubsystems: %d", resp.StatusCode)
	}
}

func itoaT(i int) string { raw, _ := json.Marshal(i); return string(raw) }
