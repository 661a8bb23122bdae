package telemetry

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

// DefaultMaxSensorsPerServer bounds the sensor series (power supplies, fans, temperatures) of
// one server: a BMC that lists hundreds of sensors (every DIMM's, every VR's) must not grow the
// scrape without bound.
const DefaultMaxSensorsPerServer = 32

// Read results in metalhub_telemetry_reads_total.
const (
	ResultOK       = "ok"       // every part the BMC links was read
	ResultPartial  = "partial"  // some linked part failed; the rest is exported
	ResultFailed   = "failed"   // the system or its chassis could not be read
	ResultSkipped  = "skipped"  // the BMC was busy or failing fast: not asked this round
	ResultMismatch = "mismatch" // another machine answered: nothing of it is exported
)

var (
	descPower = prometheus.NewDesc("metalhub_server_power_watts",
		"Power the server's chassis draws, as its BMC reports it (standby power when off).", []string{"server"}, nil)
	descTemp = prometheus.NewDesc("metalhub_server_temperature_celsius",
		"Temperature of a sensor of the server's chassis; sensor is its normalised name.", []string{"server", "sensor"}, nil)
	descFan = prometheus.NewDesc("metalhub_server_fan_rpm",
		"Speed of a fan of the server's chassis, where its BMC reports it in RPM.", []string{"server", "fan"}, nil)
	descFanHealthy = prometheus.NewDesc("metalhub_server_fan_healthy",
		"1 while a fan of the server's chassis reports OK health (or none), 0 on Warning or Critical.", []string{"server", "fan"}, nil)
	descPSU = prometheus.NewDesc("metalhub_server_psu_healthy",
		"1 while a power supply of the server's chassis reports OK health (or none), 0 on Warning or Critical.", []string{"server", "psu"}, nil)
	descComponent = prometheus.NewDesc("metalhub_server_component_healthy",
		"1 while the server's memory or processors roll up to OK health, 0 on Warning or Critical.", []string{"server", "component"}, nil)
	descLastRead = prometheus.NewDesc("metalhub_server_telemetry_timestamp_seconds",
		"When the server's telemetry was last read (Unix time): its other series are that old.", []string{"server"}, nil)
)

// sample is one server's exported telemetry, already named and capped, and its reading as a
// view shows it.
type sample struct {
	reading    latest.Reading
	at         float64
	power      *float64
	temps      []value
	fans       []value // value: RPM; fans without an RPM reading are not in it
	fanHealthy []value
	psus       []value
	components []value
}

type value struct {
	name string
	v    float64
}

// Metrics is the prometheus.Collector of the telemetry: every server's last good reading, and
// the read counters. It is safe for concurrent use.
type Metrics struct {
	max int

	mu      sync.Mutex
	servers map[string]sample

	reads   *prometheus.CounterVec
	dropped prometheus.Counter
}

// NewMetrics returns empty metrics capping each server at maxSensors sensor series (0: the
// default).
func NewMetrics(maxSensors int) *Metrics {
	if maxSensors <= 0 {
		maxSensors = DefaultMaxSensorsPerServer
	}
	m := &Metrics{
		max:     maxSensors,
		servers: map[string]sample{},
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metalhub_telemetry_reads_total",
			Help: "Reads of a server's Redfish telemetry, by result: ok, partial, failed, skipped (BMC busy or failing fast), mismatch (another machine answered).",
		}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metalhub_telemetry_sensors_dropped_total",
			Help: "Sensor readings not exported because their server reached --telemetry-max-sensors-per-server.",
		}),
	}
	for _, r := range []string{ResultOK, ResultPartial, ResultFailed, ResultSkipped, ResultMismatch} {
		m.reads.WithLabelValues(r)
	}
	return m
}

// Count records one read's result.
func (m *Metrics) Count(result string) { m.reads.WithLabelValues(result).Inc() }

// Set replaces server's exported telemetry with t, read at unix time at. Power supplies are
// kept first, then fans, then temperatures, up to the cap; the rest is counted as dropped.
func (m *Metrics) Set(server string, at float64, t *bmc.Telemetry) {
	s := sample{at: at, power: t.PowerWatts, reading: readingOf(at, t)}
	budget := m.max
	take := func(n int) int {
		k := min(n, budget)
		budget -= k
		if k < n {
			m.dropped.Add(float64(n - k))
		}
		return k
	}

	psus := t.PowerSupplies[:take(len(t.PowerSupplies))]
	names := make([]string, len(psus))
	for i, p := range psus {
		names[i] = p.Name
	}
	for i, n := range uniqueNames(names) {
		s.psus = append(s.psus, value{n, healthy(psus[i].Health)})
	}

	fans := t.Fans[:take(len(t.Fans))]
	names = make([]string, len(fans))
	for i, f := range fans {
		names[i] = f.Name
	}
	for i, n := range uniqueNames(names) {
		s.fanHealthy = append(s.fanHealthy, value{n, healthy(fans[i].Health)})
		if fans[i].RPM != nil {
			s.fans = append(s.fans, value{n, *fans[i].RPM})
		}
	}

	temps := t.Temperatures[:take(len(t.Temperatures))]
	names = make([]string, len(temps))
	for i, tp := range temps {
		names[i] = tp.Name
	}
	for i, n := range uniqueNames(names) {
		s.temps = append(s.temps, value{n, temps[i].Celsius})
	}

	if t.MemoryHealth != "" {
		s.components = append(s.components, value{"memory", healthy(t.MemoryHealth)})
	}
	if t.ProcessorHealth != "" {
		s.components = append(s.components, value{"processor", healthy(t.ProcessorHealth)})
	}

	m.mu.Lock()
	m.servers[server] = s
	m.mu.Unlock()
}

// readingOf sums t up for a view: over every sensor, the cap being the scrape's, not the view's.
func readingOf(at float64, t *bmc.Telemetry) latest.Reading {
	r := latest.Reading{At: time.UnixMilli(int64(at * 1000)), PowerWatts: t.PowerWatts}
	for _, tp := range t.Temperatures {
		if r.HottestCelsius == nil || tp.Celsius > *r.HottestCelsius {
			r.HottestCelsius, r.HottestSensor = &tp.Celsius, tp.Name
		}
	}
	for _, p := range t.PowerSupplies {
		if healthy(p.Health) == 0 {
			r.FailedPSUs = append(r.FailedPSUs, p.Name)
		}
	}
	for _, f := range t.Fans {
		if healthy(f.Health) == 0 {
			r.FailedFans = append(r.FailedFans, f.Name)
		}
	}
	sort.Strings(r.FailedPSUs)
	sort.Strings(r.FailedFans)
	return r
}

var _ latest.Source = (*Metrics)(nil)

// Latest implements latest.Source: the server's last good reading, which stays while its BMC
// is skipped or fails and goes with the server's series.
func (m *Metrics) Latest(server string) (latest.Reading, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[server]
	return s.reading, ok
}

// healthy is a Redfish health as 1 (OK, or unsaid) or 0 (Warning, Critical).
func healthy(h string) float64 {
	if h == "" || h == "OK" {
		return 1
	}
	return 0
}

// Retain drops the series of every server not in keep (deleted, or no longer read).
func (m *Metrics) Retain(keep map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.servers {
		if !keep[s] {
			delete(m.servers, s)
		}
	}
}

// Delete drops server's series.
func (m *Metrics) Delete(server string) {
	m.mu.Lock()
	delete(m.servers, server)
	m.mu.Unlock()
}

// Servers lists the servers with series, sorted.
func (m *Metrics) Servers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.servers))
	for s := range m.servers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPower, descTemp, descFan, descFanHealthy, descPSU, descComponent, descLastRead} {
		ch <- d
	}
	m.reads.Describe(ch)
	m.dropped.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.reads.Collect(ch)
	m.dropped.Collect(ch)
	m.mu.Lock()
	defer m.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for server, s := range m.servers {
		gauge(descLastRead, s.at, server)
		if s.power != nil {
			gauge(descPower, *s.power, server)
		}
		for _, v := range s.temps {
			gauge(descTemp, v.v, server, v.name)
		}
		for _, v := range s.fans {
			gauge(descFan, v.v, server, v.name)
		}
		for _, v := range s.fanHealthy {
			gauge(descFanHealthy, v.v, server, v.name)
		}
		for _, v := range s.psus {
			gauge(descPSU, v.v, server, v.name)
		}
		for _, v := range s.components {
			gauge(descComponent, v.v, server, v.name)
		}
	}
}
