package telemetry

import (
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"CPU1 Temp", "cpu1_temp"},
		{"Cpu1Temp", "cpu1_temp"},
		{"CPU1.Temp", "cpu1_temp"},
		{"CPUTemp", "cpu_temp"},
		{"Inlet Temp", "inlet_temp"},
		{"inletTemp", "inlet_temp"},
		{"System Board Fan1A", "system_board_fan1a"},
		{"PSU1", "psu1"},
		{"PS2 Status", "ps2_status"},
		{"Fan.Embedded.1A", "fan_embedded_1a"},
		{"DIMM.Socket.A1", "dimm_socket_a1"},
		{"  --Exhaust__Temp-- ", "exhaust_temp"},
		{"Température°", "temp_rature"},
		{"", "unnamed"},
		{"---", "unnamed"},
		{strings.Repeat("a", 100), strings.Repeat("a", 64)},
	} {
		if got := Normalize(tc.in); got != tc.want {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUniqueNames(t *testing.T) {
	got := uniqueNames([]string{"Fan 1", "FAN_1", "fan1", "Fan-1"})
	if want := []string{"fan_1", "fan_1_2", "fan1", "fan_1_3"}; !slices.Equal(got, want) {
		t.Errorf("uniqueNames = %v, want %v", got, want)
	}
}
