// Package sensors is the emulated machines' telemetry: power draw, power supplies, temperatures,
// fans and the memory and processor health rollups, as real BMCs serve them in the legacy Power
// and Thermal resources of a chassis and/or the newer PowerSubsystem, ThermalSubsystem and Sensors.
//
// Readings are deterministic: they follow from the system's global index, its power state and a
// clock, in steps of Step along a triangle wave of Period, so a test predicts them exactly
// (Machine.Snapshot at the same instant) or by range. A test fails a power supply or stops a fan
// with Machine.SetFaults. The package holds no HTTP routing beyond its own resources and must not
// import the emulator.
package sensors

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Period is how long the readings take to swing from their low to their high and back; Step is
// how often they move (a BMC's sensor poll).
const (
	Period = 10 * time.Minute
	Step   = 10 * time.Second
)

// PSUs and Fans are the power supplies and fans of every emulated machine.
var (
	PSUs = []string{"PSU1", "PSU2"}
	Fans = []string{"Fan1", "Fan2", "Fan3", "Fan4"}
)

// Health values as Redfish spells them.
const (
	HealthOK       = "OK"
	HealthWarning  = "Warning"
	HealthCritical = "Critical"
)

// Faults are a machine's failed parts, set by a test (Machine.SetFaults, or the control API).
type Faults struct {
	// FailedPSUs are power supplies that failed: Health Critical, no output, the other carries
	// the load.
	FailedPSUs []string `json:"failedPsus,omitempty"`
	// StoppedFans are fans that stopped: reading 0 RPM, Health Critical.
	StoppedFans []string `json:"stoppedFans,omitempty"`
	// MemoryHealth and ProcessorHealth are the health rollups of MemorySummary and
	// ProcessorSummary ("" is OK).
	MemoryHealth    string `json:"memoryHealth,omitempty"`
	ProcessorHealth string `json:"processorHealth,omitempty"`
}

// Validate refuses parts the machine does not have and health values Redfish does not know.
func (f Faults) Validate() error {
	for _, p := range f.FailedPSUs {
		if !slices.Contains(PSUs, p) {
			return fmt.Errorf("no power supply %q (have %v)", p, PSUs)
		}
	}
	for _, p := range f.StoppedFans {
		if !slices.Contains(Fans, p) {
			return fmt.Errorf("no fan %q (have %v)", p, Fans)
		}
	}
	for _, h := range []string{f.MemoryHealth, f.ProcessorHealth} {
		if h != "" && h != HealthOK && h != HealthWarning && h != HealthCritical {
			return fmt.Errorf("health %q: want OK, Warning or Critical", h)
		}
	}
	return nil
}

// Machine is one system's sensors. Index is the system's global index in the fleet, CPUs its
// number of sockets (a temperature each).
type Machine struct {
	Index, CPUs int

	mu     sync.Mutex
	faults Faults
}

// SetFaults replaces the machine's failed parts (after Validate).
func (m *Machine) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = Faults{
		FailedPSUs: slices.Clone(f.FailedPSUs), StoppedFans: slices.Clone(f.StoppedFans),
		MemoryHealth: f.MemoryHealth, ProcessorHealth: f.ProcessorHealth,
	}
	return nil
}

// Faults returns the machine's failed parts.
func (m *Machine) Faults() Faults {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.faults
	f.FailedPSUs, f.StoppedFans = slices.Clone(f.FailedPSUs), slices.Clone(f.StoppedFans)
	return f
}

// Reading is one named sensor value with its health.
type Reading struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Health string  `json:"health"`
}

// Snapshot is every reading of a machine at one instant.
type Snapshot struct {
	// PowerWatts is what the chassis draws (standby power when the host is off).
	PowerWatts float64 `json:"powerWatts"`
	// PSUs are the power supplies: Value is each one's output in watts.
	PSUs []Reading `json:"psus"`
	// Temperatures are in degrees Celsius.
	Temperatures []Reading `json:"temperatures"`
	// Fans are in RPM.
	Fans            []Reading `json:"fans"`
	MemoryHealth    string    `json:"memoryHealth"`
	ProcessorHealth string    `json:"processorHealth"`
}

// wave is where t lies on the triangle wave: 0 at the low, 1 at the high, in steps of Step.
func wave(t time.Time) float64 {
	steps := int64(Period / Step)
	n := t.UnixNano() / int64(Step) % steps
	half := steps / 2
	if n > half {
		n = steps - n
	}
	return float64(n) / float64(half)
}

// Ranges bound a machine's readings over a whole Period, for tests that predict by range: each
// is [low, high].
type Ranges struct {
	PowerWatts, Inlet, Exhaust, CPU, FanRPM [2]float64
}

// RangesFor bounds the readings of the machine with this index, host on or off. CPU is the first
// socket's (each further one reads a degree more), FanRPM the first fan's (each further one
// 60 RPM more); a failed PSU or stopped fan reads 0.
func RangesFor(index int, on bool) Ranges {
	var r Ranges
	lo, hi := readings(index, on, 0), readings(index, on, 1)
	r.PowerWatts = [2]float64{lo.power, hi.power}
	r.Inlet = [2]float64{lo.inlet, hi.inlet}
	r.Exhaust = [2]float64{lo.exhaust, hi.exhaust}
	r.CPU = [2]float64{lo.cpu, hi.cpu}
	r.FanRPM = [2]float64{lo.fan, hi.fan}
	return r
}

type values struct{ power, inlet, exhaust, cpu, fan float64 }

// readings are the base values of machine index at wave position w. Machines differ by index
// so a fleet's dashboard has a hottest server and a hungriest one.
func readings(index int, on bool, w float64) values {
	inlet := 18 + float64(index%6) + 2*w
	if !on {
		// Standby: the BMC and fans draw a little, the CPUs sit at room temperature.
		return values{power: 8 + 4*w, inlet: inlet, exhaust: inlet + 1, cpu: inlet + 2, fan: 2000 + 200*w}
	}
	return values{
		power:   180 + 20*float64(index%8) + 80*w,
		inlet:   inlet,
		exhaust: inlet + 15 + 10*w,
		cpu:     45 + float64(index%10) + 20*w,
		fan:     5000 + 250*float64(index%4) + 3000*w,
	}
}

// Snapshot is the machine's readings at t with the host on or off.
func (m *Machine) Snapshot(on bool, t time.Time) Snapshot {
	f := m.Faults()
	v := readings(m.Index, on, wave(t))
	s := Snapshot{
		PowerWatts:      v.power,
		MemoryHealth:    or(f.MemoryHealth, HealthOK),
		ProcessorHealth: or(f.ProcessorHealth, HealthOK),
	}
	working := 0
	for _, p := range PSUs {
		if !slices.Contains(f.FailedPSUs, p) {
			working++
		}
	}
	for _, p := range PSUs {
		r := Reading{Name: p, Health: HealthOK}
		if slices.Contains(f.FailedPSUs, p) {
			r.Health = HealthCritical
		} else {
			// Load shared by the supplies that work (a PSU's output is the chassis draw).
			r.Value = v.power / float64(working)
		}
		s.PSUs = append(s.PSUs, r)
	}
	s.Temperatures = append(s.Temperatures,
		Reading{Name: "Inlet Temp", Value: v.inlet, Health: HealthOK},
		Reading{Name: "Exhaust Temp", Value: v.exhaust, Health: HealthOK})
	for c := range max(m.CPUs, 1) {
		// Each socket a degree apart: sensors of one machine are never all equal.
		s.Temperatures = append(s.Temperatures, Reading{Name: fmt.Sprintf("CPU%d Temp", c+1), Value: v.cpu + float64(c), Health: HealthOK})
	}
	for i, name := range Fans {
		r := Reading{Name: name, Value: v.fan + float64(60*i), Health: HealthOK}
		if slices.Contains(f.StoppedFans, name) {
			r.Value, r.Health = 0, HealthCritical
		}
		s.Fans = append(s.Fans, r)
	}
	return s
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
