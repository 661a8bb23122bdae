package redfish

import (
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
)

// SensorFaults are a system's failed parts: PSUs, fans, memory and processor health (package
// sensors).
type SensorFaults = sensors.Faults

// SensorSnapshot is every reading of a system at one instant (package sensors).
type SensorSnapshot = sensors.Snapshot

// telemetryModel is where b's chassis serve their readings now: the profile's, less what the
// faults remove.
func (b *BMC) telemetryModel(f *Faults) sensors.Model {
	return sensors.Model{
		Legacy:     !b.profile.NoLegacyTelemetry && !f.NoLegacyTelemetry,
		Subsystems: b.profile.TelemetrySubsystems && !f.NoTelemetrySubsystems,
	}
}

// SetSensorFaults fails the system's parts (a PSU Critical, a fan stopped, memory or processor
// health); the zero value repairs them. Unknown parts are refused.
func (s *System) SetSensorFaults(f SensorFaults) error { return s.sens.SetFaults(f) }

// SensorFaults returns the system's failed parts.
func (s *System) SensorFaults() SensorFaults { return s.sens.Faults() }

// Sensors are the system's readings at t, as its chassis serves them then.
func (s *System) Sensors(t time.Time) SensorSnapshot {
	return s.sens.Snapshot(s.PowerState() == PowerOn, t)
}

// SensorIndex is the system's index in the fleet, from which its readings follow
// (sensors.RangesFor).
func (s *System) SensorIndex() int { return s.sens.Index }

// componentStatus is MemorySummary's or ProcessorSummary's Status with its health rollup.
func componentStatus(health string) obj {
	st := rfhttp.Status("Enabled")
	st["Health"], st["HealthRollup"] = health, health
	return st
}
