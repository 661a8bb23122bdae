package sensors

import (
	"testing"
	"time"
)

func TestWave(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 0},
		{Step - 1, 0}, // readings move in steps
		{Period / 2, 1},
		{Period / 4, 0.5},
		{3 * Period / 4, 0.5},
		{Period, 0},
	} {
		if got := wave(t0.Add(tc.at)); got != tc.want {
			t.Errorf("wave(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestSnapshot(t *testing.T) {
	at := time.Unix(0, 0).Add(Period / 2) // the high
	for _, tc := range []struct {
		name      string
		on        bool
		faults    Faults
		power     float64
		psuOut    []float64
		fan3      float64
		psuHealth string
	}{
		{name: "on", on: true, power: 180 + 20*3 + 80, psuOut: []float64{160, 160}, fan3: 5000 + 250*3 + 3000 + 120, psuHealth: HealthOK},
		{name: "off", on: false, power: 12, psuOut: []float64{6, 6}, fan3: 2200 + 120, psuHealth: HealthOK},
		{name: "failed PSU carries nothing", on: true, faults: Faults{FailedPSUs: []string{"PSU2"}, StoppedFans: []string{"Fan3"}},
			power: 320, psuOut: []float64{320, 0}, fan3: 0, psuHealth: HealthCritical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Machine{Index: 3, CPUs: 2}
			if err := m.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			s := m.Snapshot(tc.on, at)
			if s.PowerWatts != tc.power {
				t.Errorf("power %v, want %v", s.PowerWatts, tc.power)
			}
			for i, want := range tc.psuOut {
				if s.PSUs[i].Value != want {
					t.Errorf("PSU%d output %v, want %v", i+1, s.PSUs[i].Value, want)
				}
			}
			if s.PSUs[1].Health != tc.psuHealth {
				t.Errorf("PSU2 health %q, want %q", s.PSUs[1].Health, tc.psuHealth)
			}
			if s.Fans[2].Value != tc.fan3 {
				t.Errorf("Fan3 %v, want %v", s.Fans[2].Value, tc.fan3)
			}
			if len(s.Temperatures) != 2+2 {
				t.Errorf("temperatures %v", s.Temperatures)
			}
		})
	}
}

func TestFaultsValidate(t *testing.T) {
	for _, tc := range []struct {
		f  Faults
		ok bool
	}{
		{Faults{}, true},
		{Faults{FailedPSUs: []string{"PSU1"}, StoppedFans: []string{"Fan4"}, MemoryHealth: HealthCritical}, true},
		{Faults{FailedPSUs: []string{"PSU3"}}, false},
		{Faults{StoppedFans: []string{"fan1"}}, false},
		{Faults{ProcessorHealth: "Bad"}, false},
	} {
		if err := tc.f.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v", tc.f, err)
		}
	}
}
