package telemetry

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/metalhub/metalhub/internal/bmc"
)

func ptr(v float64) *float64 { return &v }

// The cap keeps power supplies first, then fans, then temperatures, and counts the rest.
func TestMetricsCap(t *testing.T) {
	tel := &bmc.Telemetry{
		PowerWatts:    ptr(250),
		PowerSupplies: []bmc.TelemetryPowerSupply{{Name: "PSU1", Health: "OK"}, {Name: "PSU2", Health: "Critical"}},
		Fans:          []bmc.TelemetryFan{{Name: "Fan1", RPM: ptr(5000)}, {Name: "Fan2", Percent: ptr(40)}},
		Temperatures:  []bmc.TelemetryTemperature{{Name: "Inlet Temp", Celsius: 21}, {Name: "CPU1 Temp", Celsius: 60}},
		MemoryHealth:  "Warning",
	}
	for _, tc := range []struct {
		max                      int
		psus, fans, temps, drops int
	}{
		{max: 32, psus: 2, fans: 2, temps: 2, drops: 0},
		{max: 5, psus: 2, fans: 2, temps: 1, drops: 1},
		{max: 3, psus: 2, fans: 1, temps: 0, drops: 3},
		{max: 1, psus: 1, fans: 0, temps: 0, drops: 5},
	} {
		m := NewMetrics(tc.max)
		m.Set("a", 1, tel)
		for name, want := range map[string]int{
			"metalhub_server_psu_healthy":         tc.psus,
			"metalhub_server_fan_healthy":         tc.fans,
			"metalhub_server_temperature_celsius": tc.temps,
			"metalhub_server_power_watts":         1,
			"metalhub_server_component_healthy":   1,
		} {
			if got := testutil.CollectAndCount(m, name); got != want {
				t.Errorf("max %d: %d series of %s, want %d", tc.max, got, name, want)
			}
		}
		if got := testutil.ToFloat64(m.dropped); got != float64(tc.drops) {
			t.Errorf("max %d: %v dropped, want %d", tc.max, got, tc.drops)
		}
	}
	// A fan reported in percent only has health, no RPM series.
	m := NewMetrics(0)
	m.Set("a", 1, tel)
	if got := testutil.CollectAndCount(m, "metalhub_server_fan_rpm"); got != 1 {
		t.Errorf("%d fan_rpm series, want 1", got)
	}
}

// A view's reading is over every sensor, the capped ones too, and goes with the server.
func TestLatest(t *testing.T) {
	m := NewMetrics(2) // the two PSUs only: the fans and temperatures are not exported
	if _, ok := m.Latest("a"); ok {
		t.Fatal("a reading before any read")
	}
	m.Set("a", 1700000000.5, &bmc.Telemetry{
		PowerWatts:    ptr(250),
		PowerSupplies: []bmc.TelemetryPowerSupply{{Name: "PSU2", Health: "Critical"}, {Name: "PSU1", Health: "OK"}},
		Fans:          []bmc.TelemetryFan{{Name: "Fan3", Health: "Warning"}, {Name: "Fan1"}},
		Temperatures:  []bmc.TelemetryTemperature{{Name: "Inlet Temp", Celsius: 21}, {Name: "CPU1 Temp", Celsius: 64.5}, {Name: "CPU2 Temp", Celsius: 60}},
	})
	r, ok := m.Latest("a")
	if !ok {
		t.Fatal("no reading after a read")
	}
	if r.At.UnixMilli() != 1700000000500 || r.PowerWatts == nil || *r.PowerWatts != 250 {
		t.Errorf("at %v power %v", r.At, r.PowerWatts)
	}
	if r.HottestCelsius == nil || *r.HottestCelsius != 64.5 || r.HottestSensor != "CPU1 Temp" {
		t.Errorf("hottest %v %q, want 64.5 CPU1 Temp", r.HottestCelsius, r.HottestSensor)
	}
	if !slices.Equal(r.FailedPSUs, []string{"PSU2"}) || !slices.Equal(r.FailedFans, []string{"Fan3"}) {
		t.Errorf("failed PSUs %v fans %v", r.FailedPSUs, r.FailedFans)
	}
	m.Retain(map[string]bool{})
	if _, ok := m.Latest("a"); ok {
		t.Error("a reading of a server no longer read")
	}
}
