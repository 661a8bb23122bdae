package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// latencyEnv names the emulated BMCs' latency preset (fast, typical, slow; default fast): the
// benchmark and its emulator child both read it.
const latencyEnv = "METALHUB_BENCH_LATENCY"

// benchLatency is the latency model the fleet answers with.
func benchLatency(b *testing.B) redfish.LatencyModel {
	m, err := redfish.Preset(os.Getenv(latencyEnv))
	if err != nil {
		b.Fatalf("%s: %v", latencyEnv, err)
	}
	return m
}

// fleetStats are the emulated fleet's request counters, summed over its BMCs; the maxima are
// the largest of any BMC since the last read.
type fleetStats struct {
	Requests, Waited       int64
	QueueWait              time.Duration
	MaxInFlight, MaxQueued int64
	MaxQueueWait           time.Duration
}

// since is what happened between before and s: counts as differences, maxima as read in s.
func (s fleetStats) since(before fleetStats) fleetStats {
	s.Requests -= before.Requests
	s.Waited -= before.Waited
	s.QueueWait -= before.QueueWait
	return s
}

// peaks keeps the larger maxima of s and o (a phase read in two parts).
func (s fleetStats) peaks(o fleetStats) fleetStats {
	s.MaxInFlight, s.MaxQueued, s.MaxQueueWait = max(s.MaxInFlight, o.MaxInFlight), max(s.MaxQueued, o.MaxQueued), max(s.MaxQueueWait, o.MaxQueueWait)
	return s
}

// phase is one measured phase of a benchmark against its two floors.
type phase struct {
	name    string
	took    time.Duration
	servers int // the servers the phase works on
	fleet   fleetStats
	// apiFloor is the phase's API writes over the API server's measured parallel write rate.
	apiFloor time.Duration
}

// bmcFloor is the least time the busiest BMC needs in the phase: the requests one server
// needed (measured over the phase, divided among the servers it works on) at the model's median
// answer time, for each system of the BMC, its slots all busy.
func (p phase) bmcFloor(m redfish.LatencyModel, perBMC int) (time.Duration, float64) {
	perServer := float64(p.fleet.Requests) / float64(max(p.servers, 1))
	return m.Floor(perServer, perBMC), perServer
}

// report logs the phase and returns its time over the larger floor (0 without one).
func (p phase) report(b *testing.B, m redfish.LatencyModel, perBMC int) float64 {
	b.Helper()
	floor, perServer := p.bmcFloor(m, perBMC)
	larger, ratio := max(floor, p.apiFloor), 0.0
	if larger > 0 {
		ratio = p.took.Seconds() / larger.Seconds()
	}
	b.Logf("%s: %s; BMC floor %s (%.1f requests per server x median %s x %d systems per BMC / %d at once, latency %s), API write floor %s; %.2f x the larger floor; BMC queue: %s",
		p.name, p.took.Round(time.Millisecond), floor.Round(time.Millisecond), perServer, m.Median, perBMC, m.Concurrency, m,
		p.apiFloor.Round(time.Millisecond), ratio, p.fleet.queue())
	return ratio
}

// queue says how the BMCs' request slots held up.
func (s fleetStats) queue() string {
	mean := time.Duration(0)
	if s.Waited > 0 {
		mean = s.QueueWait / time.Duration(s.Waited)
	}
	return fmt.Sprintf("%d of %d requests waited for a slot (mean %s, max %s), at most %d served and %d queued at once at one BMC",
		s.Waited, s.Requests, mean.Round(time.Millisecond), s.MaxQueueWait.Round(time.Millisecond), s.MaxInFlight, s.MaxQueued)
}

// apiFloor is writes at rate (per second).
func apiFloor(writes, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(writes / rate * float64(time.Second))
}

// writesBetween is how many writes the API server took between two of its counter reads.
func writesBetween(before, after map[string]float64) float64 {
	n := 0.0
	for k, v := range after {
		n += v - before[k]
	}
	return n
}

// busy is the share of the BMCs' slots a steady load keeps busy at the median answer time.
func busy(m redfish.LatencyModel, requests int64, bmcs int, window time.Duration) float64 {
	if m.Concurrency <= 0 || bmcs <= 0 || window <= 0 {
		return 0
	}
	return float64(requests) * m.Median.Seconds() / (float64(bmcs*m.Concurrency) * window.Seconds())
}
