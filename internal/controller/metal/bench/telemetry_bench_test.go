package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/telemetry"
	"github.com/metalhub/metalhub/internal/testenv"
)

// BenchmarkTelemetryClaims is BenchmarkClaims's workload at 1,000 servers (500 claims, any
// server, power On, one system per BMC) run with telemetry off and with it on at a short
// interval, so that several of its rounds overlap the claims, and reports each claim's latency
// from its creation to Bound and to its server On (p50, p95, mean) for both, and their ratios
// (on/off; the acceptance is <= 1.10):
//
//   - bound-p50-ratio, bound-p95-ratio, bound-mean-ratio, on-p50-ratio, on-p95-ratio
//   - off-/on- s-bound-p50, s-bound-p95, s-on-p50, s-on-p95: the figures themselves
//   - telemetry-reads/claims-window: reads the collector finished while the claims ran, over
//     the servers (rounds overlapping the claims), so a ratio near 1 is not one of a collector
//     that never ran.
//
// Each run has its own control plane, emulated fleet (a child process) and manager; runs come
// in pairs, off then on, then on then off, ... (BENCH_TELEMETRY_PAIRS pairs, default 2) so that
// a load that comes and goes on the machine falls on both; each pair's ratios are logged, and
// the metrics pool every run's claims. BENCH_TELEMETRY_NO_YIELD=1 runs the collector without
// its Yield (the manager's Slots.Busy), for comparison. On a shared machine two runs alike differ by more than 10%: compare
// the pairs before the pooled figure.
// BENCH_TELEMETRY_SERVERS sets another fleet size, BENCH_TELEMETRY_INTERVAL another interval
// (default 5s).
//
// Run: make bench-telemetry (METALHUB_BENCH_TELEMETRY=1 KUBEBUILDER_ASSETS=... go test -run '^$'
// -bench TelemetryClaims -benchtime 1x -timeout 60m ./internal/controller/metal/bench/).
func BenchmarkTelemetryClaims(b *testing.B) {
	if os.Getenv("METALHUB_BENCH_TELEMETRY") == "" {
		b.Skip("several minutes per pair of runs: make bench-telemetry runs it (METALHUB_BENCH_TELEMETRY=1)")
	}
	servers, pairs, interval := 1000, 2, 5*time.Second
	if v, err := strconv.Atoi(os.Getenv("BENCH_TELEMETRY_SERVERS")); err == nil && v >= 2 {
		servers = v
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_TELEMETRY_PAIRS")); err == nil && v >= 1 {
		pairs = v
	}
	if v, err := time.ParseDuration(os.Getenv("BENCH_TELEMETRY_INTERVAL")); err == nil && v > 0 {
		interval = v
	}
	// BENCH_TELEMETRY_NO_YIELD=1 measures the collector without Yield: reading through the
	// claims.
	yield := os.Getenv("BENCH_TELEMETRY_NO_YIELD") == ""
	b.Logf("telemetry every %s, yielding to lifecycle work: %t", interval, yield)
	b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) {
		for range b.N {
			var off, on claimLatencies
			var reads float64
			for p := range pairs {
				// Every other pair runs telemetry on first: a run's place in the process (the
				// first has the freshest heap and machine) falls on both alike.
				var o, n *claimLatencies
				if p%2 == 0 {
					o = runTelemetryClaims(b, servers, 0, yield)
					n = runTelemetryClaims(b, servers, interval, yield)
				} else {
					n = runTelemetryClaims(b, servers, interval, yield)
					o = runTelemetryClaims(b, servers, 0, yield)
				}
				off.add(o)
				b.Logf("pair %d, telemetry off: %s", p+1, o)
				on.add(n)
				reads += n.reads
				b.Logf("pair %d, telemetry every %s: %s, %.0f telemetry reads while the claims ran (%.2f per server); on/off: to Bound p50 %.3f p95 %.3f, to On p50 %.3f p95 %.3f",
					p+1, interval, n, n.reads, n.reads/float64(servers),
					n.q(n.bound, 0.5).Seconds()/o.q(o.bound, 0.5).Seconds(), n.q(n.bound, 0.95).Seconds()/o.q(o.bound, 0.95).Seconds(),
					n.q(n.on, 0.5).Seconds()/o.q(o.on, 0.5).Seconds(), n.q(n.on, 0.95).Seconds()/o.q(o.on, 0.95).Seconds())
			}
			ratio := func(on, off time.Duration) float64 { return on.Seconds() / off.Seconds() }
			b.ReportMetric(off.q(off.bound, 0.5).Seconds(), "off-s-bound-p50")
			b.ReportMetric(off.q(off.bound, 0.95).Seconds(), "off-s-bound-p95")
			b.ReportMetric(off.q(off.on, 0.5).Seconds(), "off-s-on-p50")
			b.ReportMetric(off.q(off.on, 0.95).Seconds(), "off-s-on-p95")
			b.ReportMetric(on.q(on.bound, 0.5).Seconds(), "on-s-bound-p50")
			b.ReportMetric(on.q(on.bound, 0.95).Seconds(), "on-s-bound-p95")
			b.ReportMetric(on.q(on.on, 0.5).Seconds(), "on-s-on-p50")
			b.ReportMetric(on.q(on.on, 0.95).Seconds(), "on-s-on-p95")
			b.ReportMetric(ratio(on.q(on.bound, 0.5), off.q(off.bound, 0.5)), "bound-p50-ratio")
			b.ReportMetric(ratio(on.q(on.bound, 0.95), off.q(off.bound, 0.95)), "bound-p95-ratio")
			b.ReportMetric(ratio(on.mean(on.bound), off.mean(off.bound)), "bound-mean-ratio")
			b.ReportMetric(ratio(on.q(on.on, 0.5), off.q(off.on, 0.5)), "on-p50-ratio")
			b.ReportMetric(ratio(on.q(on.on, 0.95), off.q(off.on, 0.95)), "on-p95-ratio")
			b.ReportMetric(reads/float64(servers*pairs), "telemetry-reads/claims-window")
			b.Logf("all runs, telemetry off: %s", &off)
			b.Logf("all runs, telemetry every %s: %s", interval, &on)
		}
	})
}

// claimLatencies are the claims' latencies from their creation, to Bound and to their server
// On, of one run or several pooled.
type claimLatencies struct {
	bound, on []time.Duration
	// reads is how many telemetry reads finished while the claims ran.
	reads float64
}

func (l *claimLatencies) add(o *claimLatencies) {
	l.bound = append(l.bound, o.bound...)
	l.on = append(l.on, o.on...)
	l.reads += o.reads
}

func (l *claimLatencies) q(ds []time.Duration, f float64) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	if len(s) == 0 {
		return 0
	}
	return s[int(f*float64(len(s)-1))]
}

func (l *claimLatencies) mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func (l *claimLatencies) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("%d claims: to Bound p50 %s p95 %s mean %s; to On p50 %s p95 %s mean %s", len(l.bound),
		r(l.q(l.bound, 0.5)), r(l.q(l.bound, 0.95)), r(l.mean(l.bound)), r(l.q(l.on, 0.5)), r(l.q(l.on, 0.95)), r(l.mean(l.on)))
}

// runTelemetryClaims binds servers/2 claims on a fresh fleet with telemetry read every
// interval (0: off), yielding to lifecycle work or not, and returns each claim's latency.
func runTelemetryClaims(b *testing.B, servers int, interval time.Duration, yield bool) *claimLatencies {
	b.StopTimer()
	claims := servers / 2
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	em := startFleet(b, strconv.Itoa(servers))
	defer em.stop()
	fleet := em.systems
	op := startOperator(b, env, func(o *metal.Options) {
		o.TelemetryInterval = interval
		if interval > 0 {
			o.Telemetry = telemetry.NewMetrics(0)
		}
		if !yield {
			o.TelemetryYield = nil
		}
	})
	defer op.stop()
	ctx, cache := op.ctx, op.mgr.GetCache()

	createFleet(b, env.Client, fleet)
	waitFor(b, 10*time.Minute, "fleet Available and off", func() (bool, string) {
		n := countServers(b, ctx, cache, func(s *metalv1alpha1.Server) bool {
			return s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff
		})
		return n == servers, fmt.Sprintf("%d/%d", n, servers)
	})
	if interval > 0 {
		// The claims start on a collector in its stride: a whole round done after bring-up.
		reads0 := telemetryReads(b)
		waitFor(b, 10*time.Minute, "a telemetry round", func() (bool, string) {
			n := telemetryReads(b) - reads0
			return n >= float64(servers), fmt.Sprintf("%.0f/%d reads", n, servers)
		})
	}
	settle(b, op)

	const ns = "bench"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	tl := newTimeline(b, ctx, cache, ns)
	var mu sync.Mutex
	created := map[string]time.Time{}
	reads0 := telemetryReads(b)
	b.StartTimer()
	if err := testenv.Parallel(claims, 32, func(i int) error {
		name := fmt.Sprintf("claim-%04d", i)
		at := time.Now()
		if err := env.Client.Create(ctx, &metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os-image:latest"},
		}); err != nil {
			return fmt.Errorf("creating claim %s: %w", name, err)
		}
		mu.Lock()
		created[name] = at
		mu.Unlock()
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 5*time.Minute, "claims Bound", func() (bool, string) {
		n := tl.count("claim Bound")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	waitFor(b, 5*time.Minute, "claimed servers On", func() (bool, string) {
		n := tl.count("server On")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	b.StopTimer()
	out := &claimLatencies{reads: telemetryReads(b) - reads0}
	checkBindings(b, ctx, cache, ns, claims)

	tl.mu.Lock()
	defer tl.mu.Unlock()
	for name, at := range created {
		out.bound = append(out.bound, tl.steps["claim Bound"][name].Sub(at))
		out.on = append(out.on, tl.steps["server On"][name].Sub(at))
	}
	return out
}

// telemetryReads is how many telemetry reads asked a BMC so far (metalhub_telemetry_reads_total
// of the newest collector, but for the skipped ones).
func telemetryReads(b *testing.B) float64 {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "metalhub_telemetry_reads_total" {
			for _, m := range f.GetMetric() {
				if skipped := slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == "result" && l.GetValue() == telemetry.ResultSkipped
				}); !skipped {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
