package telemetry

import (
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
