package redfish

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyModel is how fast and how much at once a BMC answers. The zero value is the emulator
// as it always was: every answer at once, as many in parallel as asked.
//
// Real BMCs are small embedded computers: they answer in 100 ms to 2 s, serve 2 to 4 requests
// at a time, answer nothing for tens of seconds while they reset, and a chassis manager serves
// 8 to 16 systems through one of them. The presets (Preset) model that; a test or benchmark that
// measures the operator rather than the hardware keeps the zero model.
type LatencyModel struct {
	// Name is the preset's name ("" for a model made by hand).
	Name string
	// Median is the median answer time; 0 adds none (and ignores P95, Min and Max).
	Median time.Duration
	// P95 is the 95th percentile of the answer time; with Median it fixes a log-normal
	// distribution (real answer times have a long tail). 0 or below Median: every answer takes
	// Median.
	P95 time.Duration
	// Min and Max bound every answer time (0: unbounded on that side).
	Min, Max time.Duration
	// Concurrency is how many requests the BMC serves at once (its sessions or worker threads);
	// the others wait for one to end, holding nothing. The answer time is spent holding one.
	// 0: unlimited.
	Concurrency int
	// ResetSilence is how long the BMC answers nothing after a Manager.Reset (connections are
	// closed unanswered, as during an update's reboot). 0: it answers again at once.
	ResetSilence time.Duration
	// SystemsPerBMC is the chassis manager the preset models: Options.SystemsPerBMC when that
	// is left 0 (0 here: one system per BMC).
	SystemsPerBMC int
}

// Latency presets, named after what they model (Preset reads them by name).
const (
	LatencyFast    = "fast"
	LatencyTypical = "typical"
	LatencySlow    = "slow"
)

// presets: fast is the emulator as it was (answers in a few milliseconds of CPU, no cap); typical
// a current rack server's BMC or a chassis manager (median 250 ms within 100 ms to 2 s, 4
// sessions, half a minute to come back from a reset, 8 systems); slow an older or loaded one
// (median 1 s up to 5 s, 2 at a time, a minute to reset, 16 systems, as a blade chassis).
var presets = map[string]LatencyModel{
	LatencyFast: {Name: LatencyFast},
	LatencyTypical: {Name: LatencyTypical, Median: 250 * time.Millisecond, P95: time.Second, Min: 100 * time.Millisecond, Max: 2 * time.Second,
		Concurrency: 4, ResetSilence: 30 * time.Second, SystemsPerBMC: 8},
	LatencySlow: {Name: LatencySlow, Median: time.Second, P95: 3 * time.Second, Min: 250 * time.Millisecond, Max: 5 * time.Second,
		Concurrency: 2, ResetSilence: time.Minute, SystemsPerBMC: 16},
}

// LatencyPresets lists the presets' names, fastest first.
func LatencyPresets() []string { return []string{LatencyFast, LatencyTypical, LatencySlow} }

// Preset is the latency model of that name (fast, typical, slow); "" is fast.
func Preset(name string) (LatencyModel, error) {
	if name == "" {
		name = LatencyFast
	}
	m, ok := presets[strings.ToLower(name)]
	if !ok {
		return LatencyModel{}, fmt.Errorf("unknown latency preset %q (want %s)", name, strings.Join(LatencyPresets(), ", "))
	}
	return m, nil
}

// String names the preset, or spells the model out.
func (m LatencyModel) String() string {
	if m.Name != "" {
		return m.Name
	}
	if m.Median <= 0 && m.Concurrency <= 0 && m.ResetSilence <= 0 {
		return LatencyFast
	}
	return fmt.Sprintf("median %s p95 %s [%s, %s], %d at once, reset silent %s", m.Median, m.P95, m.Min, m.Max, m.Concurrency, m.ResetSilence)
}

// z95 is the standard normal's 95th percentile: P95 = Median·exp(σ·z95).
const z95 = 1.6448536269514722

// Sampler draws a model's answer times, deterministically: the same seed and stream give the
// same sequence. Safe for concurrent use.
type Sampler struct {
	m     LatencyModel
	sigma float64
	mu    sync.Mutex
	r     *rand.Rand
}

// NewSampler draws m's answer times from the random stream (seed, stream).
func (m LatencyModel) NewSampler(seed, stream uint64) *Sampler {
	s := &Sampler{m: m, r: rand.New(rand.NewPCG(seed, stream))}
	if m.P95 > m.Median && m.Median > 0 {
		s.sigma = math.Log(float64(m.P95)/float64(m.Median)) / z95
	}
	return s
}

// Next is the next answer time (0 when the model adds none).
func (s *Sampler) Next() time.Duration {
	if s.m.Median <= 0 {
		return 0
	}
	d := s.m.Median
	if s.sigma > 0 {
		s.mu.Lock()
		z := s.r.NormFloat64()
		s.mu.Unlock()
		d = time.Duration(float64(s.m.Median) * math.Exp(s.sigma*z))
	}
	if s.m.Min > 0 {
		d = max(d, s.m.Min)
	}
	if s.m.Max > 0 {
		d = min(d, s.m.Max)
	}
	return d
}

// latencyStream is the random stream of BMC i's answer times: apart from the streams that
// generate its inventory, so that a model changes no fleet.
func latencyStream(i int) uint64 { return 1<<32 + uint64(i) }

// admit waits for one of the BMC's request slots (LatencyModel.Concurrency) and then the
// answer time, holding the slot; release gives it back. ok is false when the client gave up or
// the emulator closed meanwhile: the request is not served.
func (b *BMC) admit(r *http.Request) (release func(), ok bool) {
	release = func() {}
	if b.slots != nil {
		select {
		case b.slots <- struct{}{}:
		default:
			// Full: wait in the queue, counted.
			q := b.queued.Add(1)
			raise(&b.maxQueued, q)
			began := time.Now()
			select {
			case b.slots <- struct{}{}:
			case <-r.Context().Done():
				b.queued.Add(-1)
				return release, false
			case <-b.em.closing:
				b.queued.Add(-1)
				return release, false
			}
			b.queued.Add(-1)
			w := int64(time.Since(began))
			b.waited.Add(1)
			b.queueWait.Add(w)
			raise(&b.maxQueueWait, w)
		}
		release = func() { <-b.slots }
	}
	if d := b.latency.Next(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			release()
			return func() {}, false
		case <-b.em.closing:
			t.Stop()
			release()
			return func() {}, false
		}
	}
	return release, true
}

// silence makes the BMC answer nothing for d from now (a manager's reset).
func (b *BMC) silence(d time.Duration) {
	if d > 0 {
		raise(&b.silentUntil, time.Now().Add(d).UnixNano())
	}
}

// silent reports whether the BMC is still down after a manager reset.
func (b *BMC) silent() bool { return time.Now().UnixNano() < b.silentUntil.Load() }

// Latency is the BMC's latency model.
func (b *BMC) Latency() LatencyModel { return b.em.opts.Latency }

// raise sets v to n if n is more.
func raise(v *atomic.Int64, n int64) {
	for {
		m := v.Load()
		if n <= m || v.CompareAndSwap(m, n) {
			return
		}
	}
}

// Floor is the least time one BMC of this model needs to answer requestsPerServer requests for
// each of its systemsPerBMC systems: every answer at the median, every slot busy throughout. 0
// for a model that adds no answer time or has no cap (nothing then bounds a BMC but the CPU).
func (m LatencyModel) Floor(requestsPerServer float64, systemsPerBMC int) time.Duration {
	if m.Median <= 0 || m.Concurrency <= 0 {
		return 0
	}
	return time.Duration(requestsPerServer * float64(m.Median) * float64(systemsPerBMC) / float64(m.Concurrency))
}

// Busy is the share of bmcs' request slots that requests over window keep busy, each answered
// at the median: how close a steady load comes to what the BMCs can serve.
func (m LatencyModel) Busy(requests int64, bmcs int, window time.Duration) float64 {
	if m.Median <= 0 || m.Concurrency <= 0 || bmcs <= 0 || window <= 0 {
		return 0
	}
	return float64(requests) * m.Median.Seconds() / (float64(bmcs*m.Concurrency) * window.Seconds())
}
