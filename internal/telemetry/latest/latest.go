// Package latest is a server's latest telemetry reading as a view of the fleet shows it, and
// the read-only interface through which the telemetry collector lends it. It imports nothing
// of the operator's, so that a view (the web dashboard) can take the collector's readings
// without taking on the controllers' dependencies, and never reads a BMC itself.
package latest

import "time"

// Reading is one server's last good telemetry read, summed up for a glance.
type Reading struct {
	// At is when it was read: a BMC that stopped answering leaves an old reading.
	At time.Time
	// PowerWatts is the chassis's power draw; nil when its BMC reports none.
	PowerWatts *float64
	// HottestCelsius is the highest temperature of any of the chassis's sensors, and
	// HottestSensor that sensor's name as the BMC gives it; nil and "" when it reports none.
	HottestCelsius *float64
	HottestSensor  string
	// FailedPSUs and FailedFans name, as the BMC does, the power supplies and fans whose health
	// is Warning or Critical, sorted.
	FailedPSUs []string
	FailedFans []string
}

// Source gives the latest reading of a server, and false when it has none (never read, not
// read by this replica, or telemetry is off). Implementations are safe for concurrent use, and
// callers do not change what they return.
type Source interface {
	Latest(server string) (Reading, bool)
}
