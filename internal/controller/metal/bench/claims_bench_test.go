package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/manager"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// emulatorEnv makes the test binary, re-executed by the benchmark, run the emulated fleet
// instead of tests: the emulator's CPU then stays out of the controllers' figure.
const emulatorEnv = "METALHUB_BENCH_EMULATOR"

// powerDelay is how long an emulated power transition takes.
const powerDelay = time.Second

func TestMain(m *testing.M) {
	if n := os.Getenv(emulatorEnv); n != "" {
		os.Exit(runEmulator(n))
	}
	os.Exit(m.Run())
}

// system is what the benchmark needs of one emulated BMC and one of its systems.
type system struct {
	URL, User, Pass, ID, UUID string
	// BMC is the index of the system's BMC (several systems share one where the fleet has
	// more systems per BMC).
	BMC int
}

// runEmulator is the child process: it starts the BMCs arg names ("n" BMCs of one system, or
// "n,k": n BMCs of k systems each) at the latency METALHUB_BENCH_LATENCY names, prints their
// systems as JSON, and then answers each line on stdin ("stats") with its BMCs' request
// counters (the maxima since the last line), as JSON, until stdin closes.
func runEmulator(arg string) int {
	nStr, kStr, _ := strings.Cut(arg, ",")
	n, err := strconv.Atoi(nStr)
	k := 1
	if err == nil && kStr != "" {
		k, err = strconv.Atoi(kStr)
	}
	if err != nil || n < 1 || k < 1 {
		fmt.Fprintln(os.Stderr, "emulator: bad size:", arg)
		return 2
	}
	latency, err := redfish.Preset(os.Getenv(latencyEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		return 2
	}
	e, err := redfish.Start(redfish.Options{BMCs: n, SystemsPerBMC: k, PowerDelay: powerDelay, Seed: 1, Latency: latency})
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		return 1
	}
	defer e.Close()
	out := make([]system, 0, n*k)
	for _, b := range e.BMCs() {
		u, p := b.Credentials()
		for _, sys := range b.Systems() {
			out = append(out, system{URL: b.URL(), User: u, Pass: p, ID: sys.ID(), UUID: sys.UUID(), BMC: b.Index()})
		}
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		return 1
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		fs := e.TotalStats()
		if err := enc.Encode(fs); err != nil {
			return 1
		}
	}
	return 0
}

// emulator is the child process running the fleet.
type emulator struct {
	systems []system
	in      io.Writer
	out     *json.Decoder
	// stop ends the child (at the latest when the benchmark ends): a benchmark of several
	// runs stops each run's, which would otherwise hold its thousand listeners meanwhile.
	stop func()
}

// requests asks the child for the Redfish requests its BMCs served so far.
func (e *emulator) requests(b *testing.B) int64 { return e.stats(b).Requests }

// stats asks the child for its BMCs' request counters (the maxima since the last ask).
func (e *emulator) stats(b *testing.B) redfish.Stats {
	b.Helper()
	if _, err := io.WriteString(e.in, "stats\n"); err != nil {
		b.Fatal(err)
	}
	var st redfish.Stats
	if err := e.out.Decode(&st); err != nil {
		b.Fatalf("reading the emulator's request counters: %v", err)
	}
	return st
}

// startFleet starts the child process with size as runEmulator reads it.
func startFleet(b *testing.B, size string) *emulator {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), emulatorEnv+"="+size)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	e := &emulator{in: stdin, out: json.NewDecoder(stdout)}
	var once sync.Once
	e.stop = func() { once.Do(func() { _ = stdin.Close(); _ = cmd.Wait() }) }
	b.Cleanup(e.stop)
	if err := e.out.Decode(&e.systems); err != nil {
		b.Fatalf("reading the emulator's fleet: %v", err)
	}
	return e
}

// ctrlSink is a log sink that writes nothing and remembers the controller a logger belongs to:
// controller-runtime puts the reconcile's logger into its context, so a client wrapper can
// tell which controller wrote.
type ctrlSink struct{ controller string }

func (s ctrlSink) Init(logr.RuntimeInfo)        {}
func (s ctrlSink) Enabled(int) bool             { return false }
func (s ctrlSink) Info(int, string, ...any)     {}
func (s ctrlSink) Error(error, string, ...any)  {}
func (s ctrlSink) WithName(string) logr.LogSink { return s }
func (s ctrlSink) WithValues(kv ...any) logr.LogSink {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "controller" {
			s.controller = fmt.Sprint(kv[i+1])
		}
	}
	return s
}

// writerOf names the controller a write was made for, from the reconcile's logger (ctrlSink).
func writerOf(ctx context.Context) string {
	if s, ok := logr.FromContextOrDiscard(ctx).GetSink().(ctrlSink); ok && s.controller != "" {
		return s.controller
	}
	return "(outside a reconcile)"
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkClaims binds servers/2 claims (no selector: any server) against a fleet of Available
// servers with a 1 s emulated power delay, at 250, 500 and 1000 servers, and reports:
//
//   - s-to-bound: from the first claim created to every claim Bound (target <= 5 s at 1000)
//   - s-to-on: to every claimed server reported On in its status (target <= 15 s at 1000)
//   - claim-ctrl-writes/claim: API writes of the claim controller per claim (target <= 5; its
//     floor is 5: the server's claim ref, the boot configuration, the claim's server ref, its
//     Bound status, the server's power On in its status)
//   - claim-writes/claim: the same plus the boot configuration and maintenance controllers:
//     the built-in boot provider adds its Ready status (1 per claim), which the IronCore
//     boot-operator writes instead where it runs (--external-boot-provider)
//   - writes/claim: API writes of all controllers per claim (the Server controller's too)
//   - bound/max-floor, on/max-floor: the time over the larger of the BMC floor and the API
//     write floor (phase), logged with both
//   - cpu-s/claim: CPU seconds of this process (controllers and the benchmark's own claim
//     creation and cache reads; the emulator runs in a child process, kube-apiserver and etcd
//     in their own) per claim, which should stay flat across fleet sizes.
//
// The fleet is set up on the fast path: Servers created directly with the durable state
// Available and a bmcRef (no discovery), then observed off by the Server controller.
//
// Run: KUBEBUILDER_ASSETS=... go test -run '^$' -bench Claims -benchtime 1x ./internal/controller/metal/bench/
// (BENCH_CLAIM_CONCURRENCY=n sets --claim-concurrency for experiments.)
func BenchmarkClaims(b *testing.B) {
	// The BMCs answer at METALHUB_BENCH_LATENCY (default fast: at once, one system each); a
	// preset with a chassis serves its number of systems per BMC.
	perBMC := max(benchLatency(b).SystemsPerBMC, 1)
	for _, n := range []int{250, 500, 1000} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			for range b.N {
				servers := n / perBMC * perBMC
				runClaims(b, servers, servers/2, perBMC)
			}
		})
	}
}

func runClaims(b *testing.B, servers, claims, perBMC int) {
	b.StopTimer()
	latency := benchLatency(b)
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	em := startFleet(b, fmt.Sprintf("%d,%d", servers/perBMC, perBMC))
	fleet := em.systems

	op := startOperator(b, env, nil)
	defer op.stop()
	ctx, mgr, counter, events := op.ctx, op.mgr, op.counter, op.events
	cache := mgr.GetCache()

	setupStart := time.Now()
	createFleet(b, env.Client, fleet)
	waitFor(b, 10*time.Minute, "fleet Available and off", func() (bool, string) {
		list := &metalv1alpha1.ServerList{}
		if err := cache.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range list.Items {
			s := &list.Items[i]
			if s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff {
				ready++
			}
		}
		return ready == servers, fmt.Sprintf("%d/%d", ready, servers)
	})
	setup := time.Since(setupStart)
	time.Sleep(2 * time.Second) // let the set-up's stragglers settle before measuring
	// The API write floor: the binding's writes at the API server's parallel rate, measured
	// now (shorter than BenchmarkScale's probe: this one runs at three sizes).
	like := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: fleetServerName(fleet[0])}, like); err != nil {
		b.Fatal(err)
	}
	rate := claimWriteRate(b, env.Client, apilimit.DefaultWritesInFlight, 1000, 5*time.Second, like)

	const ns = "bench"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	tl := newTimeline(b, ctx, cache, ns)
	counter.Written = tl.written(ns)

	req0 := apiWrites(b, env)
	closed0 := closedWatches(b, env)
	counter.Reset()
	passes0 := reconciles(b, "server")
	queues0 := sampleQueues(b)
	cpu0 := cpuSeconds()
	// METALHUB_BENCH_APISERVER_CPU names a file for the API server's CPU profile over the
	// first 8 s of the claims, to see what binding costs it.
	if path := os.Getenv("METALHUB_BENCH_APISERVER_CPU"); path != "" {
		env.ProfileAPIServer(b, 8*time.Second, path)
	}
	// METALHUB_BENCH_CPU names a file for this process's CPU profile from the first claim to
	// the last server On.
	stopProfile := profileCPU(b, os.Getenv("METALHUB_BENCH_CPU"))
	bmc0 := em.stats(b)
	b.StartTimer()
	start := time.Now()
	if err := testenv.Parallel(claims, 32, func(i int) error {
		return env.Client.Create(ctx, &metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%04d", i)},
			Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os-image:latest"},
		})
	}); err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	waitFor(b, 5*time.Minute, "claims Bound", func() (bool, string) {
		n := tl.count("claim Bound")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	toBound := time.Since(start)
	bmcBound := em.stats(b)
	waitFor(b, 5*time.Minute, "claimed servers On", func() (bool, string) {
		n := tl.count("server On")
		return n == claims, fmt.Sprintf("%d/%d", n, claims)
	})
	toOn := time.Since(start)
	b.StopTimer()
	stopProfile()
	bmcOn, writesOn := em.stats(b), apiWrites(b, env)
	cpu := cpuSeconds() - cpu0
	eventsLeft := events.Pending()
	waitFor(b, 5*time.Minute, "events written", func() (bool, string) {
		n := events.Pending()
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	req1 := apiWrites(b, env)
	closed := closedWatches(b, env) - closed0

	counts, writeTime := counter.Reset()
	serverPasses := reconciles(b, "server") - passes0
	queues := sampleQueues(b).since(queues0)

	total, family := 0, 0
	var names []string
	for name, n := range counts {
		total += n
		names = append(names, name)
		if name == "serverclaim" || name == "serverbootconfiguration" || name == "servermaintenance" {
			family += n
		}
	}
	sort.Strings(names)
	var breakdown []string
	for _, name := range names {
		breakdown = append(breakdown, fmt.Sprintf("%s %.2f", name, float64(counts[name])/float64(claims)))
	}
	checkBindings(b, ctx, cache, ns, claims)

	perClaim := func(v float64) float64 { return v / float64(claims) }
	b.ReportMetric(toBound.Seconds(), "s-to-bound")
	b.ReportMetric(toOn.Seconds(), "s-to-on")
	b.ReportMetric(perClaim(float64(counts["serverclaim"])), "claim-ctrl-writes/claim")
	b.ReportMetric(perClaim(float64(family)), "claim-writes/claim")
	b.ReportMetric(perClaim(float64(total)), "writes/claim")
	b.ReportMetric(perClaim(cpu), "cpu-s/claim")
	b.ReportMetric(perClaim(serverPasses), "server-passes/claim")
	bound := phase{name: "claims Bound", took: toBound, servers: claims, fleet: bmcBound.Since(bmc0),
		apiFloor: apiFloor(float64(claims*writesBeforeBound), rate)}
	on := phase{name: "claims On", took: toOn, servers: claims, fleet: bmcOn.Since(bmc0).Peaks(bmcBound),
		apiFloor: apiFloor(writesBetween(req0, writesOn), rate)}
	// Go shows ten log lines of a benchmark without -v: the figures first, the timeline last.
	b.Logf("%d servers Available and off in %s; %d claims: created in %s, all Bound after %s (target <= 5s), all On after %s (target <= 15s)",
		servers, setup.Round(time.Millisecond), claims, created.Round(time.Millisecond), toBound.Round(time.Millisecond), toOn.Round(time.Millisecond))
	b.ReportMetric(bound.report(b, latency, perBMC), "bound/max-floor")
	b.ReportMetric(on.report(b, latency, perBMC), "on/max-floor")
	b.Logf("API writes per claim by controller: %s; claim controller %.2f (target <= 5), with boot provider and maintenance %.2f, all %.2f",
		strings.Join(breakdown, ", "), perClaim(float64(counts["serverclaim"])), perClaim(float64(family)), perClaim(float64(total)))
	b.Logf("CPU %.2f s in all, %.4f s per claim; %d writes, %s on average (waiting for a write slot included); events still to write when all were On: %d; watches the API server closed as unresponsive: %.0f",
		cpu, perClaim(cpu), total, (writeTime / time.Duration(max(total, 1))).Round(100*time.Microsecond), eventsLeft, closed)
	// The controllers share the API server's throughput, which bounds the timings here.
	all, breakdownAPI := testenv.WritesPer(req0, req1, claims, nil)
	b.Logf("apiserver writes per claim (all clients, events included, counted once written): %.2f = %s", all, breakdownAPI)
	b.Logf("queues, mean wait and pass (passes): %s", queues)
	tl.report(b, start)
}

// operator is the manager the benchmarks measure, set up as the operator's (internal/manager).
type operator struct {
	ctx     context.Context
	mgr     ctrl.Manager
	counter *testenv.WriteCounter
	events  *eventsink.Provider
	// stop stops the manager (before the control plane).
	stop func()
}

// startOperator starts the metal controllers in this process against env; tune changes their
// options first. The caller stops it (stop) before the control plane.
func startOperator(b *testing.B, env *testenv.Env, tune func(*metal.Options)) *operator {
	b.Helper()
	counter := &testenv.WriteCounter{Controller: writerOf}
	// The manager's client as the operator's (internal/manager): writes in flight bounded.
	writeLimit := apilimit.DefaultWritesInFlight
	if v, err := strconv.Atoi(os.Getenv("BENCH_WRITES_IN_FLIGHT")); err == nil {
		writeLimit = v
	}
	slots := apilimit.NewSlots(writeLimit)
	counter.New = apilimit.NewClient(slots)
	// The manager's client rate limit is the operator's default (--kube-api-qps/-burst) unless
	// BENCH_KUBE_API_QPS sets one (burst twice that).
	cfg := rest.CopyConfig(env.Config)
	defaults := manager.DefaultOptions()
	cfg.QPS, cfg.Burst = float32(defaults.KubeAPIQPS), defaults.KubeAPIBurst
	if v, err := strconv.ParseFloat(os.Getenv("BENCH_KUBE_API_QPS"), 32); err == nil {
		cfg.QPS, cfg.Burst = float32(v), int(2*v)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme.New(),
		Logger:  logr.New(ctrlSink{}),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// One manager per fleet size in this process: the controllers' names repeat.
		Controller: config.Controller{SkipNameValidation: new(true)},
		// As the operator's cache (internal/manager): nothing reads managedFields.
		Cache:     crcache.Options{DefaultTransform: crcache.TransformStripManagedFields()},
		NewClient: counter.NewClient,
	})
	if err != nil {
		b.Fatal(err)
	}
	opts := metal.DefaultOptions()
	opts.RegistryBindAddress = "0"
	// The events are written at low priority, after the work: the benchmark waits for them
	// before it counts the API writes.
	events, err := eventsink.New(mgr, eventsink.Options{Yield: slots.Urgent})
	if err != nil {
		b.Fatal(err)
	}
	opts.Events = events
	// And telemetry's reads wait for the urgent writes, as the operator's (internal/manager).
	opts.TelemetryYield = slots.Busy
	if v, err := strconv.Atoi(os.Getenv("BENCH_CLAIM_CONCURRENCY")); err == nil {
		opts.Claims.Concurrency = v
	}
	// BENCH_METAL_CONCURRENCY is --metal-concurrency: a fleet of 10,000 wants more workers
	// than the default (docs/scale.md, knobs).
	if v, err := strconv.Atoi(os.Getenv("BENCH_METAL_CONCURRENCY")); err == nil {
		opts.Concurrency = v
	}
	if tune != nil {
		tune(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := metal.Setup(ctx, mgr, opts); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}
	return &operator{ctx: ctx, mgr: mgr, counter: counter, events: events, stop: func() { cancel(); <-done }}
}

// profileCPU starts a CPU profile into path, if one is named, and returns what stops it.
func profileCPU(b *testing.B, path string) func() {
	b.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// bmcName and fleetServerName name a system's BMC and Server in the benchmarks' fleet.
func bmcName(sys system) string { return fmt.Sprintf("bmc-%04d", sys.BMC) }

func fleetServerName(sys system) string { return bmccontroller.ServerName(bmcName(sys), sys.ID) }

// createFleet registers every emulated BMC (one shared secret) and creates its systems' Servers
// directly in Available — the fast path past discovery.
func createFleet(b *testing.B, c client.Client, fleet []system) {
	b.Helper()
	ctx := context.Background()
	user, pass := fleet[0].User, fleet[0].Pass
	if err := c.Create(ctx, &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		StringData: map[string]string{metalv1alpha1.BMCSecretUsernameKey: user, metalv1alpha1.BMCSecretPasswordKey: pass}}); err != nil {
		b.Fatal(err)
	}
	// Servers first, then their BMCs: a BMC's first pass finds its servers.
	if err := testenv.Parallel(len(fleet), 32, func(i int) error {
		sys := fleet[i]
		s := &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: fleetServerName(sys),
				Annotations: map[string]string{lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateAvailable)}},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(sys.UUID), SystemURI: "/redfish/v1/Systems/" + sys.ID,
				BMCRef: &corev1.LocalObjectReference{Name: bmcName(sys)}},
		}
		if err := c.Create(ctx, s); err != nil {
			return fmt.Errorf("creating server %s: %w", s.Name, err)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var bmcs []system
	for _, sys := range fleet {
		if len(bmcs) == 0 || bmcs[len(bmcs)-1].BMC != sys.BMC {
			bmcs = append(bmcs, sys)
		}
	}
	if err := testenv.Parallel(len(bmcs), 32, func(i int) error {
		sys := bmcs[i]
		u, err := url.Parse(sys.URL)
		if err != nil {
			return err
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil {
			return err
		}
		bm := &metalv1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: bmcName(sys)},
			Spec: metalv1alpha1.BMCSpec{
				Access:       &metalv1alpha1.InlineEndpoint{IP: u.Hostname()},
				BMCSecretRef: corev1.LocalObjectReference{Name: "bench"},
				Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(p), Scheme: metalv1alpha1.HTTPScheme},
			},
		}
		if err := c.Create(ctx, bm); err != nil {
			return fmt.Errorf("creating BMC %s: %w", bm.Name, err)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// checkBindings verifies the outcome the timing is worth nothing without: every claim holds a
// distinct server that points back at it.
func checkBindings(b *testing.B, ctx context.Context, r client.Reader, ns string, claims int) {
	b.Helper()
	list := &metalv1alpha1.ServerClaimList{}
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	seen := map[string]string{}
	for _, c := range list.Items {
		if c.Spec.ServerRef == nil {
			b.Errorf("claim %s bound without serverRef", c.Name)
			continue
		}
		if other, ok := seen[c.Spec.ServerRef.Name]; ok {
			b.Errorf("server %s bound by %s and %s", c.Spec.ServerRef.Name, other, c.Name)
		}
		seen[c.Spec.ServerRef.Name] = c.Name
		s := &metalv1alpha1.Server{}
		if err := r.Get(ctx, client.ObjectKey{Name: c.Spec.ServerRef.Name}, s); err != nil {
			b.Error(err)
			continue
		}
		if ref := s.Spec.ServerClaimRef; ref == nil || ref.Namespace != ns || ref.Name != c.Name {
			b.Errorf("claim %s bound to %s, which points at %+v", c.Name, s.Name, ref)
		}
	}
	if len(seen) != claims {
		b.Errorf("%d claims hold %d distinct servers", claims, len(seen))
	}
}

func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, string)) {
	b.Helper()
	testenv.Eventually(b, timeout, what, cond)
}
