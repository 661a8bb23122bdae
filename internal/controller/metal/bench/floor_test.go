package bench

import (
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

// phase is one measured phase of a benchmark against its two floors.
type phase struct {
	name    string
	took    time.Duration
	servers int // the servers the phase works on
	fleet   redfish.Stats
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
		p.apiFloor.Round(time.Millisecond), ratio, p.fleet.QueueSummary())
	return ratio
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
