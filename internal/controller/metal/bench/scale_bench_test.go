package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/testenv"
)

// systemsPerBMC is how many systems each emulated BMC serves at scale unless the latency
// preset models another chassis: a chassis manager's share, and it keeps the emulator's
// listeners within the file-descriptor limit.
const systemsPerBMC = 8

// writesBeforeBound are the API writes every claim needs before the last one is Bound: its
// creation, the server's claim ref (the lock), the boot configuration, the claim's server ref,
// its Bound status. The floor is these over the API server's measured parallel write rate.
const writesBeforeBound = 5

// BenchmarkScale runs a whole fleet's day at 1,000 and 10,000 servers (BENCH_SCALE_SERVERS
// lists others, e.g. "10000"), 8 systems per BMC (or the latency preset's), the BMCs answering
// at METALHUB_BENCH_LATENCY (default fast), and prints:
//
//   - bring-up: Servers and BMCs created on the fast path (durable state Available, no
//     discovery) until all are observed Available and off;
//   - the write-bound floor: the API server's parallel write rate measured in the same run
//     (as many writers as the operator has writes in flight), and writesBeforeBound per claim
//     over it;
//   - servers/2 claims (any server, power On): to all Bound (and × the floor), to all On,
//     API writes per claim, CPU per claim;
//   - every claim deleted: to all servers Available and off again;
//   - steady state over the longest resync period plus a minute (BENCH_STEADY sets another
//     window): Redfish requests per server per minute, API writes per minute, manager CPU;
//   - per phase, the BMC floor and the API write floor, and the time over the larger (phase);
//     for the steady state how busy it keeps the BMCs' request slots;
//   - the process's RSS and Go heap at the end (METALHUB_BENCH_HEAP names a file for a heap
//     profile; METALHUB_BENCH_CPU one for the CPU profile of the claims).
//
// Run: make bench-scale (METALHUB_BENCH_SCALE=1 KUBEBUILDER_ASSETS=... go test -run '^$' -bench Scale -benchtime 1x
// -timeout 60m ./internal/controller/metal/bench/).
func BenchmarkScale(b *testing.B) {
	if os.Getenv("METALHUB_BENCH_SCALE") == "" {
		b.Skip("an hour at 10,000 servers: make bench-scale runs it (METALHUB_BENCH_SCALE=1)")
	}
	perBMC := systemsPerBMC
	if k := benchLatency(b).SystemsPerBMC; k > 0 {
		perBMC = k
	}
	sizes := []int{1000, 10000}
	if v := os.Getenv("BENCH_SCALE_SERVERS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < perBMC {
				b.Fatalf("BENCH_SCALE_SERVERS: %q is not a fleet size", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			for range b.N {
				runScale(b, n/perBMC*perBMC, perBMC)
			}
		})
	}
}

func runScale(b *testing.B, servers, perBMC int) {
	b.StopTimer()
	claims := servers / 2
	latency := benchLatency(b)
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	fleet := startFleet(b, fmt.Sprintf("%d,%d", servers/perBMC, perBMC))
	op := startOperator(b, env, nil)
	defer op.stop()
	ctx, cache, counter := op.ctx, op.mgr.GetCache(), op.counter
	// The steady window covers every periodic look once: the servers', the BMCs' and the
	// hardware logs' (BENCH_STEADY shortens it for a quick look, whose figure then
	// depends on whether it caught a burst of them: the claims bunch the servers' looks up).
	defaults := metal.DefaultOptions()
	window := max(defaults.ServerResync, defaults.BMCResync, defaults.HardwareLogPoll) + time.Minute
	if v, err := time.ParseDuration(os.Getenv("BENCH_STEADY")); err == nil && v > 0 {
		window = v
	}

	// Bring-up.
	bmcUp0, writesUp0 := fleet.stats(b), apiWrites(b, env)
	start := time.Now()
	createFleet(b, env.Client, fleet.systems)
	waitFor(b, 30*time.Minute, "fleet Available and off", func() (bool, string) {
		n := countServers(b, ctx, cache, func(s *metalv1alpha1.Server) bool {
			return s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff
		})
		return n == servers, fmt.Sprintf("%d/%d", n, servers)
	})
	bringUp := time.Since(start)
	bmcUp, writesUp := fleet.stats(b).Since(bmcUp0), apiWrites(b, env)
	b.Logf("%d servers (%d BMCs, latency %s): Available and off %s after their creation (fast path, no discovery)",
		servers, servers/perBMC, latency, bringUp.Round(time.Millisecond))
	settle(b, op)

	// The floor, measured now on the same API server: the rate of the binding's own writes (on
	// copies of the kinds nothing watches), and for reference that of the cheapest write there is
	// (a Lease created), which no write of a custom resource comes near.
	leaseRate := writeRate(b, env.Client, apilimit.DefaultWritesInFlight, 5*time.Second)
	// The probe's servers are copies of one of the fleet's, read from the API server as it is.
	// It runs 15 s: over 5 s its rate spread by a third between runs of one hour.
	like := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: fleetServerName(fleet.systems[0])}, like); err != nil {
		b.Fatal(err)
	}
	rate := claimWriteRate(b, env.Client, apilimit.DefaultWritesInFlight, 4000, 15*time.Second, like)
	floorOf := func(rate float64) time.Duration {
		return time.Duration(float64(claims*writesBeforeBound) / rate * float64(time.Second))
	}
	floor, leaseFloor := floorOf(rate), floorOf(leaseRate)
	b.Logf("API server parallel write rate (%d writers): the binding's writes %.0f/s, floor for %d claims x %d writes %s; Lease creates %.0f/s (floor %s)",
		apilimit.DefaultWritesInFlight, rate, claims, writesBeforeBound, floor.Round(time.Millisecond), leaseRate, leaseFloor.Round(time.Millisecond))

	// Claims.
	const ns = "bench"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	tl := newTimeline(b, ctx, cache, ns)
	counter.Written = tl.written(ns)
	counter.Reset()
	queues0 := sampleQueues(b)
	cpu0 := cpuSeconds()
	// METALHUB_BENCH_CPU names a file for this process's CPU profile from the first claim to
	// the last server On.
	stopProfile := profileCPU(b, os.Getenv("METALHUB_BENCH_CPU"))
	// METALHUB_BENCH_APISERVER_CPU names a file for the API server's CPU profile over the
	// first 8 s of the claims.
	if path := os.Getenv("METALHUB_BENCH_APISERVER_CPU"); path != "" {
		env.ProfileAPIServer(b, 8*time.Second, path)
	}
	// METALHUB_BENCH_STACKS names a file for the process's goroutines (counted by stack) 10 s
	// into the claims: where the workers wait.
	if path := os.Getenv("METALHUB_BENCH_STACKS"); path != "" {
		stacks := time.AfterFunc(10*time.Second, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				_ = f.Close()
			}
		})
		defer stacks.Stop()
	}
	writes0 := apiWrites(b, env)
	bmc0 := fleet.stats(b)
	b.StartTimer()
	start = time.Now()
	if err := testenv.Parallel(claims, 32, func(i int) error {
		return env.Client.Create(ctx, &metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%05d", i)},
			Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os-image:latest"},
		})
	}); err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	waitFor(b, 30*time.Minute, "claims Bound", func() (bool, string) {
		n := tl.count("claim Bound")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	claimStart := start
	toBound := time.Since(start)
	writesBound := apiWrites(b, env)
	bmcBound := fleet.stats(b)
	waitFor(b, 30*time.Minute, "claimed servers On", func() (bool, string) {
		n := tl.count("server On")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	toOn := time.Since(start)
	b.StopTimer()
	bmcOn, writesOn := fleet.stats(b), apiWrites(b, env)
	stopProfile()
	claimCPU := cpuSeconds() - cpu0
	queues := sampleQueues(b).since(queues0)
	settle(b, op)
	counts, _ := counter.Reset()
	counter.Written = nil
	checkBindings(b, ctx, cache, ns, claims)
	perClaim := func(v float64) float64 { return v / float64(claims) }
	b.Logf("%d claims created in %s", claims, created.Round(time.Millisecond))
	b.Logf("%d claims: all Bound after %s (%.2f x the floor, target <= 1.5; %.2f x the Lease-create floor), all On after %s; %.2f API writes per claim (%s); CPU %.4f s per claim",
		claims, toBound.Round(time.Millisecond), toBound.Seconds()/floor.Seconds(), toBound.Seconds()/leaseFloor.Seconds(), toOn.Round(time.Millisecond),
		perClaim(float64(total(counts))), byController(counts, claims), perClaim(claimCPU))
	// Everything the API server wrote while the claims bound (every client, events included,
	// the users' creates too), against the five per claim the floor counts.
	boundWrites, boundBreakdown := testenv.WritesPer(writes0, writesBound, claims, nil)
	b.Logf("API server writes per claim until all Bound: %.2f = %s", boundWrites, boundBreakdown)
	// Each phase against the BMCs' floor and the API server's (its writes at the probe's rate).
	upPhase := phase{name: "bring-up", took: bringUp, servers: servers, fleet: bmcUp,
		apiFloor: apiFloor(writesBetween(writesUp0, writesUp), rate)}
	boundPhase := phase{name: "claims Bound", took: toBound, servers: claims, fleet: bmcBound.Since(bmc0), apiFloor: floor}
	onPhase := phase{name: "claims On", took: toOn, servers: claims, fleet: bmcOn.Since(bmc0).Peaks(bmcBound),
		apiFloor: apiFloor(writesBetween(writes0, writesOn), rate)}
	upRatio, boundRatio, onRatio := upPhase.report(b, latency, perBMC), boundPhase.report(b, latency, perBMC), onPhase.report(b, latency, perBMC)
	b.Logf("queues, mean wait and pass (passes): %s", queues)
	tl.report(b, claimStart)

	// Release.
	bmcRel0, writesRel0 := fleet.stats(b), apiWrites(b, env)
	start = time.Now()
	// One by one: a collection delete of thousands outlasts the API server's request timeout.
	if err := testenv.Parallel(claims, 32, func(i int) error {
		return env.Client.Delete(ctx, &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%05d", i)}})
	}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 30*time.Minute, "servers Available and off again", func() (bool, string) {
		n := countServers(b, ctx, cache, func(s *metalv1alpha1.Server) bool {
			return s.Spec.ServerClaimRef == nil && s.Status.State == metalv1alpha1.ServerStateAvailable &&
				s.Status.PowerState == metalv1alpha1.PowerStateOff
		})
		return n == servers, fmt.Sprintf("%d/%d", n, servers)
	})
	toReleased := time.Since(start)
	relPhase := phase{name: "release", took: toReleased, servers: claims, fleet: fleet.stats(b).Since(bmcRel0),
		apiFloor: apiFloor(writesBetween(writesRel0, apiWrites(b, env)), rate)}
	relRatio := relPhase.report(b, latency, perBMC)
	settle(b, op)
	releaseCounts, _ := counter.Reset()
	b.Logf("all claims deleted: every server Available and off after %s, %.2f API writes per server released (%s)",
		toReleased.Round(time.Millisecond), perClaim(float64(total(releaseCounts))), byController(releaseCounts, claims))

	// Steady state: nothing asked of the fleet for a whole window.
	steady0, cpu0 := fleet.stats(b), cpuSeconds()
	time.Sleep(window) // the measurement is what happens in this window
	steady, steadyCPU := fleet.stats(b).Since(steady0), cpuSeconds()-cpu0
	requests := steady.Requests
	steadyCounts, _ := counter.Reset()
	minutes := window.Minutes()

	rss, heap := memory(b)

	b.ReportMetric(bringUp.Seconds(), "s-bring-up")
	b.ReportMetric(toBound.Seconds(), "s-to-bound")
	b.ReportMetric(floor.Seconds(), "s-floor")
	b.ReportMetric(toBound.Seconds()/floor.Seconds(), "bound/floor")
	b.ReportMetric(toBound.Seconds()/leaseFloor.Seconds(), "bound/lease-floor")
	b.ReportMetric(toOn.Seconds(), "s-to-on")
	b.ReportMetric(toReleased.Seconds(), "s-to-released")
	b.ReportMetric(upRatio, "bring-up/max-floor")
	b.ReportMetric(boundRatio, "bound/max-floor")
	b.ReportMetric(onRatio, "on/max-floor")
	b.ReportMetric(relRatio, "released/max-floor")
	b.ReportMetric(perClaim(float64(total(counts))), "writes/claim")
	b.ReportMetric(perClaim(claimCPU), "cpu-s/claim")
	b.ReportMetric(float64(requests)/float64(servers)/minutes, "redfish-req/server/min")
	b.ReportMetric(float64(total(steadyCounts))/minutes, "steady-writes/min")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.Logf("steady state over %s: %.3f Redfish requests per server per minute (target <= 1), %.1f API writes per minute, CPU %.1f%% of a core",
		window, float64(requests)/float64(servers)/minutes, float64(total(steadyCounts))/minutes, 100*steadyCPU/window.Seconds())
	// A steady state has no end to hold against a floor: how busy it keeps the BMCs instead.
	b.Logf("steady state: the BMCs' slots %.2f%% busy at the median answer time (latency %s); BMC queue: %s",
		100*latency.Busy(requests, servers/perBMC, window), latency, steady.QueueSummary())
	b.Logf("memory after the run: RSS %d MiB, Go heap in use %d MiB (the benchmark's own client and timeline included)", rss>>20, heap>>20)
}

// settle waits until the events of what just happened are written, and a little longer for
// the passes they bring: the next phase is measured on a quiet operator.
func settle(b *testing.B, op *operator) {
	b.Helper()
	waitFor(b, 10*time.Minute, "events written", func() (bool, string) {
		n := op.events.Pending()
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	time.Sleep(2 * time.Second) // stragglers: no signal says "no pass is coming"
}

func countServers(b *testing.B, ctx context.Context, c client.Reader, ok func(*metalv1alpha1.Server) bool) int {
	b.Helper()
	list := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		b.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		if ok(&list.Items[i]) {
			n++
		}
	}
	return n
}

// writeRate measures how many writes per second the API server takes from writers in
// parallel, each writing as soon as its last write returned: Lease creations in a namespace of
// their own, which nothing watches.
func writeRate(b *testing.B, c client.Client, writers int, d time.Duration) float64 {
	b.Helper()
	ctx := context.Background()
	const ns = "write-rate-probe"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	rate, _ := testenv.ParallelRate(b, writers, d, 0, func(i int64, n *atomic.Int64) error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("probe-%d", i)}}
		if err := c.Create(ctx, l); err != nil {
			return err
		}
		n.Add(1)
		return nil
	})
	return rate
}

// memory is the process's resident set and the Go heap in use after a collection; with
// METALHUB_BENCH_HEAP set, a heap profile goes to that file.
func memory(b *testing.B) (rss, heap uint64) {
	b.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if path := os.Getenv("METALHUB_BENCH_HEAP"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			rss = kb << 10
		}
	}
	return rss, ms.HeapInuse
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func byController(counts map[string]int, per int) string {
	var out []string
	for _, name := range sortedNames(counts) {
		out = append(out, fmt.Sprintf("%s %.2f", name, float64(counts[name])/float64(per)))
	}
	return strings.Join(out, ", ")
}

func sortedNames(counts map[string]int) []string {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
