package bmc_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
)

// near reports whether v is one of the snapshots' values, give or take the BMC's rounding.
func near(v float64, want ...float64) bool {
	for _, w := range want {
		if math.Abs(v-w) <= 0.5 {
			return true
		}
	}
	return false
}

func TestTelemetry(t *testing.T) {
	e := fleet(t, redfish.Options{PowerDelay: -1, InitialPower: redfish.PowerOn})
	for _, tc := range []struct {
		name       string
		vendor     string
		faults     redfish.Faults
		parts      redfish.SensorFaults
		noReadings bool     // neither model: health rollups only
		failed     []string // parts the BMC fails to serve
		percent    bool     // fans also in percent (the subsystems' Fan)
	}{
		{name: "both models, legacy read", vendor: "dell"},
		{name: "legacy only", vendor: "hpe"},
		{name: "subsystems and Sensors only", vendor: "openbmc", percent: true},
		{name: "legacy removed", vendor: "lenovo", faults: redfish.Faults{NoLegacyTelemetry: true}, percent: true},
		{name: "legacy Thermal broken falls back", vendor: "dell", faults: redfish.Faults{BrokenCollections: map[string]int{"Thermal": 500}},
			failed: []string{"thermal"}, percent: true},
		{name: "no telemetry at all", vendor: "dell", faults: redfish.Faults{NoLegacyTelemetry: true, NoTelemetrySubsystems: true}, noReadings: true},
		{name: "failed PSU, stopped fan, memory critical", vendor: "supermicro",
			parts: redfish.SensorFaults{FailedPSUs: []string{"PSU2"}, StoppedFans: []string{"Fan3"}, MemoryHealth: "Critical"}},
		{name: "failed PSU in the PowerSubsystem", vendor: "openbmc", percent: true,
			parts: redfish.SensorFaults{FailedPSUs: []string{"PSU1"}, StoppedFans: []string{"Fan1"}, ProcessorHealth: "Warning"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := byVendor(t, e, tc.vendor)
			s := b.Systems()[0]
			b.SetFaults(tc.faults)
			t.Cleanup(b.ClearFaults)
			if err := s.SetSensorFaults(tc.parts); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.SetSensorFaults(redfish.SensorFaults{}) })
			c := bmc.Expect(get(t, pool(t, bmc.Options{}), endpoint(b)), bmc.Identity{UUID: s.UUID()})

			before := s.Sensors(time.Now())
			got, err := c.Telemetry(context.Background(), s.ID())
			after := s.Sensors(time.Now())
			if err != nil {
				t.Fatalf("Telemetry: %v", err)
			}
			var failed []string
			for _, f := range got.Failed {
				failed = append(failed, f.Part)
			}
			if !slices.Equal(failed, tc.failed) {
				t.Errorf("failed parts %v, want %v (%v)", failed, tc.failed, got.Failed)
			}
			if got.MemoryHealth != before.MemoryHealth || got.ProcessorHealth != before.ProcessorHealth {
				t.Errorf("health rollups memory %q processor %q, want %q %q", got.MemoryHealth, got.ProcessorHealth, before.MemoryHealth, before.ProcessorHealth)
			}
			if tc.noReadings {
				if got.PowerWatts != nil || len(got.PowerSupplies)+len(got.Temperatures)+len(got.Fans) != 0 {
					t.Errorf("readings from a chassis that serves none: %+v", got)
				}
				return
			}
			if got.Chassis == "" {
				t.Error("no chassis named")
			}
			if got.PowerWatts == nil || !near(*got.PowerWatts, before.PowerWatts, after.PowerWatts) {
				t.Errorf("power %v, want %v or %v", got.PowerWatts, before.PowerWatts, after.PowerWatts)
			}
			if len(got.PowerSupplies) != len(before.PSUs) {
				t.Fatalf("power supplies %+v", got.PowerSupplies)
			}
			for i, p := range got.PowerSupplies {
				want := before.PSUs[i]
				if p.Name != want.Name || p.Health != want.Health || p.Healthy() != (want.Health == "OK") {
					t.Errorf("power supply %+v, want %+v", p, want)
				}
			}
			if len(got.Temperatures) != len(before.Temperatures) {
				t.Fatalf("temperatures %+v, want %+v", got.Temperatures, before.Temperatures)
			}
			for _, tp := range got.Temperatures {
				i := slices.IndexFunc(before.Temperatures, func(r sensors.Reading) bool { return r.Name == tp.Name })
				if i < 0 || !near(tp.Celsius, before.Temperatures[i].Value, after.Temperatures[i].Value) {
					t.Errorf("temperature %+v, want one of %+v", tp, before.Temperatures)
				}
			}
			if len(got.Fans) != len(before.Fans) {
				t.Fatalf("fans %+v", got.Fans)
			}
			for i, f := range got.Fans {
				want := before.Fans[i]
				if f.Name != want.Name || f.Health != want.Health || f.RPM == nil || !near(*f.RPM, want.Value, after.Fans[i].Value) {
					t.Errorf("fan %+v (rpm %v), want %+v", f, f.RPM, want)
				}
				if (f.Percent != nil) != tc.percent {
					t.Errorf("fan %s percent %v", f.Name, f.Percent)
				}
			}
		})
	}
}

// Another machine's readings are not this one's: the read fails before the chassis is read.
func TestTelemetryIdentity(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, PowerDelay: -1})
	b := e.BMC(0)
	c := bmc.Expect(get(t, pool(t, bmc.Options{}), endpoint(b)), bmc.Identity{UUID: "00000000-0000-4000-8000-000000000001"})
	_, err := c.Telemetry(context.Background(), b.SystemIDs()[0])
	if bmc.ReasonOf(err) != bmc.ReasonIdentityMismatch {
		t.Fatalf("Telemetry of another machine: %v, want %s", err, bmc.ReasonIdentityMismatch)
	}
}
