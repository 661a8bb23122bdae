package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// apiWrites reads the API server's write counters (testenv.Env.APIWrites).
func apiWrites(b *testing.B) map[string]float64 {
	b.Helper()
	w, err := env.APIWrites()
	if err != nil {
		b.Fatal(err)
	}
	return w
}

func apiReads(b *testing.B) map[string]float64 {
	b.Helper()
	r, err := env.APIReads()
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// toServers keeps the writes to the Server object, status included.
func toServers(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	return res == "servers" || strings.HasPrefix(res, "servers/")
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, p := range m.Label {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

func peakRSSMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// BenchmarkFleetToAvailable: 1000 emulated servers (instant power) from BMC creation to all
// Available through the real discovery path (netboot runs the probe against the manager's
// registry), then a steady-state window of a full resync period. Targets on a 2-core machine: <= 60 s, <= 8 API writes
// per server Initial -> Available, <= 1 Redfish request per server per minute at steady state,
// manager RSS <= 200 MiB.
func BenchmarkFleetToAvailable(b *testing.B) {
	n := 1000
	if v := os.Getenv("METALHUB_BENCH_SERVERS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	// METALHUB_BENCH_SYSTEMS_PER_BMC serves several systems per emulated BMC, as chassis
	// managers do: ten thousand BMCs of one system each would take more file descriptors than
	// a test process may hold.
	// METALHUB_BENCH_LATENCY (fast, typical, slow; default fast) is how the BMCs answer; a
	// preset with a chassis serves its systems per BMC unless METALHUB_BENCH_SYSTEMS_PER_BMC
	// says otherwise.
	latency, err := redfish.Preset(os.Getenv("METALHUB_BENCH_LATENCY"))
	if err != nil {
		b.Fatalf("METALHUB_BENCH_LATENCY: %v", err)
	}
	k := max(latency.SystemsPerBMC, 1)
	if v, err := strconv.Atoi(os.Getenv("METALHUB_BENCH_SYSTEMS_PER_BMC")); err == nil && v > 0 {
		k = v
	}
	n -= n % k
	// The steady-state window covers a full resync period of both the servers (one Redfish
	// request each) and the BMCs (four), so every periodic look is counted once.
	// METALHUB_BENCH_STEADY shortens it for a quick look (and then undercounts).
	serverResync, bmcResync := 2*time.Minute, 15*time.Minute
	steady := bmcResync + time.Minute
	if v := os.Getenv("METALHUB_BENCH_STEADY"); v != "" {
		steady, _ = time.ParseDuration(v)
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range b.N {
		purgeMetal(b)
		// The API server's sequential write rate on this machine, for scale.
		start := time.Now()
		const seq = 200
		for i := range seq {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bench-seq-%d", i)}}
			if err := env.Client.Create(ctx, cm); err != nil {
				b.Fatal(err)
			}
		}
		seqRate := seq / time.Since(start).Seconds()
		// And its parallel rate, with as many writers as the manager has writes in flight: for
		// reference, the cheapest writes there are (the floor itself is measured after the run,
		// on copies of the discovery's own kinds).
		parRate := parallelCreates(b, 16, 2000)

		// Real machines each run their own probe; the emulated ones share this process, whose
		// cap keeps a burst of boots from starving the rest. It grows with the fleet so that at
		// 10,000 the harness's probes are not what bounds the bring-up. They read their boot
		// configurations unthrottled (through the benchmark's rate-limited client, 2,115 of
		// 10,000 boots waited on it past their lookup timeout and never reported) and from a
		// cache indexed by UUID, as a boot server keeps one (label-selected lists of 10,000
		// boot configurations, one per waiting boot every 250 ms, were a good part of the API
		// server's CPU).
		failed := &bootFailures{}
		nbCtx, nbStop := context.WithCancel(ctx)
		unthrottled := rest.CopyConfig(env.Config)
		unthrottled.QPS, unthrottled.Burst = -1, 0
		nbClient, err := netboot.IndexedClient(nbCtx, unthrottled, env.Client.Scheme(), "default")
		if err != nil {
			b.Fatal(err)
		}
		nb, err := netboot.New(netboot.Options{Client: nbClient, Indexed: true, Namespace: "default", MaxConcurrent: max(16, n/64),
			ProbeInterval: time.Second, ReportBackoff: time.Second, ReportMaxBackoff: 30 * time.Second, // metalprobe's
			Logger: logr.Discard(), OnResult: failed.add})
		if err != nil {
			b.Fatal(err)
		}
		fleet, err := redfish.Start(redfish.Options{BMCs: n / k, SystemsPerBMC: k, PowerDelay: -1, OnBoot: nb.OnBoot, MaxSessions: 4, Latency: latency})
		if err != nil {
			b.Fatal(err)
		}
		mgr := &managerProcess{bin: bin, logPath: filepath.Join(b.TempDir(), "manager.log"), args: []string{
			"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--zap-log-level", "error",
			"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0", "--registry-bind-address", "127.0.0.1:0",
			"--discovery-namespace", "default", "--kube-api-qps", "500", "--kube-api-burst", "1000",
			"--pprof-bind-address", "127.0.0.1:0",
			"--server-resync", serverResync.String(), "--bmc-resync", bmcResync.String(),
		}}
		mgr.args = append(mgr.args, "--registry-url", registryFront(b, mgr))
		// METALHUB_BENCH_MANAGER_ARGS adds (or overrides) the manager's flags: a large fleet's
		// settings, such as its workers and its API request rate (docs/scale.md).
		if extra := strings.Fields(os.Getenv("METALHUB_BENCH_MANAGER_ARGS")); len(extra) > 0 {
			mgr.args = append(mgr.args, extra...)
			fmt.Printf("manager flags added: %s\n", strings.Join(extra, " "))
		}
		writes0, reads0 := apiWrites(b), apiReads(b)
		bmc0 := fleet.TotalStats()
		b.ResetTimer()
		start = time.Now()
		mgr.start(b)
		metricsAddr, pprofAddr := mgr.addresses().Metrics, mgr.addresses().Pprof
		cpu0 := sampleCPU(mgr.pid())
		// METALHUB_BENCH_APISERVER_CPU names a file for 30 s of the API server's CPU profile
		// taken from the start of the run, to see what the fleet costs it.
		if path := os.Getenv("METALHUB_BENCH_APISERVER_CPU"); path != "" {
			env.ProfileAPIServer(b, 30*time.Second, path)
		}
		registerFleet(b, fleet, "bench")
		b.Logf("%d BMCs of %d systems each and their secrets registered in %s", n/k, k, time.Since(start).Round(100*time.Millisecond))
		limit := time.Duration(max(1, n/1000)) * 10 * time.Minute
		deadline := time.Now().Add(limit)
		available := 0
		var lastProgress time.Time
		tookGoroutines := false
		goroutinesAt := 25 * time.Second
		if v, err := time.ParseDuration(os.Getenv("METALHUB_BENCH_GOROUTINES_AT")); err == nil && v > 0 {
			goroutinesAt = v
		}
		for available < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d/%d Available after %s; emulated boots without a report: %s", available, n, limit, failed)
			}
			// The poll shares the machine with what it measures: metadata only (the state is an
			// annotation), from the API server's watch cache, once a second per 2,000 servers
			// (at 10,000 a poll a second took an eighth of the API server's CPU); the power
			// state is checked once all say Available, from the watch cache too and as a table
			// of the printer columns: a list of whole Servers read from etcd at each poll (some
			// 100 MB at 10,000) took the API server's cores in the very tail it measures.
			time.Sleep(time.Duration(max(1, n/2000)) * time.Second)
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(metalv1alpha1.GroupVersion.WithKind("ServerList"))
			if err := env.Client.List(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
				b.Fatal(err)
			}
			available = 0
			states := map[string]int{}
			for _, s := range list.Items {
				st := s.Annotations[lifecycle.StateAnnotation]
				states[st]++
				if st == string(metalv1alpha1.ServerStateAvailable) {
					available++
				}
			}
			if available == n {
				off, err := serversOff(ctx)
				if err != nil {
					b.Fatal(err)
				}
				available = off
			}
			// METALHUB_BENCH_GOROUTINES names a file for the manager's goroutines 25 s into the
			// run (METALHUB_BENCH_GOROUTINES_AT another time, e.g. in the tail), to see what its
			// workers wait on.
			if path := os.Getenv("METALHUB_BENCH_GOROUTINES"); path != "" && !tookGoroutines && time.Since(start) > goroutinesAt {
				tookGoroutines = true
				saveProfile(b, "http://"+pprofAddr+"/debug/pprof/goroutine?debug=1", path)
			}
			// The shape of the run over time tells which step is the bottleneck.
			if testing.Verbose() && time.Since(lastProgress) >= 5*time.Second {
				lastProgress = time.Now()
				b.Logf("%5.1fs: %d servers %v queues %s; boots without a report: %s", time.Since(start).Seconds(), len(list.Items), states, queueDepths(metricsAddr), failed)
			}
		}
		wall := time.Since(start)
		b.StopTimer()
		bmcUp := fleet.TotalStats().Since(bmc0)
		cpu := sampleCPU(mgr.pid()).since(cpu0)
		summary := managerSummary(metricsAddr, n)
		// METALHUB_BENCH_HEAP names a file for the manager's heap profile at this point.
		if path := os.Getenv("METALHUB_BENCH_HEAP"); path != "" {
			saveProfile(b, "http://"+pprofAddr+"/debug/pprof/heap", path)
		}
		writes1, reads1 := apiWrites(b), apiReads(b)
		all, breakdown := testenv.WritesPer(writes0, writes1, n, nil)
		toServer, _ := testenv.WritesPer(writes0, writes1, n, toServers)

		// The floors: the busiest BMC's (the requests a server needed, at the median answer
		// time, for each system of a BMC, its slots all busy) and the API server's (every
		// client's writes at its parallel rate).
		perServer := float64(bmcUp.Requests) / float64(n)
		bmcFloor := latency.Floor(perServer, k)
		writesUp := 0.0
		for key, v := range writes1 {
			writesUp += v - writes0[key]
		}
		// The API server's floor prices the run's writes as a discovery's own writes cost it:
		// 16 writers (as the manager has writes in flight) write a discovery after another on
		// copies of a discovered server, once right after the run and once more with the
		// manager and the fleet stopped; the faster of the two is the floor's rate (one probe's
		// rate moved by a quarter between runs). At the ConfigMap rate for reference, which no
		// operator of custom resources reaches.
		like := &metalv1alpha1.ServerList{}
		if err := env.Client.List(ctx, like, client.Limit(1)); err != nil || len(like.Items) == 0 {
			b.Fatalf("a discovered server to model the write probe on: %v", err)
		}
		rateUp, perRound := discoveryWriteRate(b, env.Client, 16, 15*time.Second, &like.Items[0])

		// Steady state: Redfish requests per server per minute once everything has settled.
		time.Sleep(10 * time.Second)
		steady0 := fleet.TotalStats()
		time.Sleep(steady)
		steadyBMC := fleet.TotalStats().Since(steady0)
		rss := peakRSSMiB(mgr.pid())
		mgr.kill()
		nb.Close()
		nbStop()
		_ = fleet.Close()

		rateStopped, _ := discoveryWriteRate(b, env.Client, 16, 15*time.Second, &like.Items[0])
		discoveryRate := max(rateUp, rateStopped)
		apiFloor := time.Duration(writesUp / discoveryRate * float64(time.Second))
		cmFloor := time.Duration(writesUp / parRate * float64(time.Second))
		ratio := wall.Seconds() / max(bmcFloor, apiFloor, time.Nanosecond).Seconds()

		// The benchmark's own creates (a BMCSecret and a BMC per server) are not the operator's.
		writesPerServer := all - 2/float64(k) // the benchmark's own BMCSecret and BMC
		b.ReportMetric(wall.Seconds(), "s-to-all-available")
		b.ReportMetric(writesPerServer, "api-writes/server")
		b.ReportMetric(ratio, "available/max-floor")
		b.ReportMetric(wall.Seconds()/max(cmFloor, bmcFloor, time.Nanosecond).Seconds(), "available/configmap-floor")
		b.ReportMetric(toServer, "server-object-writes/server")
		b.ReportMetric(float64(steadyBMC.Requests)/float64(n)/steady.Minutes(), "redfish-req/server/min")
		b.ReportMetric(rss, "manager-peak-MiB")
		b.ReportMetric(seqRate, "apiserver-seq-writes/s")
		fmt.Printf("fleet of %d: all Available in %s; %.1f API writes per server (%.1f to the Server object); steady state %.2f Redfish requests per server per minute; manager peak RSS %.0f MiB; API server sequential write rate %.0f/s\n",
			n, wall.Round(100*time.Millisecond), writesPerServer, toServer, float64(steadyBMC.Requests)/float64(n)/steady.Minutes(), rss, seqRate)

		fmt.Printf("BMC creation to all Available: %s; BMC floor %s (%.1f requests per server x median %s x %d systems per BMC / %d at once, latency %s), API write floor %s (%.0f writes at %.0f/s, the discovery's %d writes on copies, 16 writers: the faster of %.0f/s right after the run and %.0f/s with the manager stopped); %.2f x the larger floor; at the ConfigMap-create rate (%.0f/s) the writes would take %s (%.2f x); BMC queue: %s\n",
			wall.Round(100*time.Millisecond), bmcFloor.Round(time.Millisecond), perServer, latency.Median, k, latency.Concurrency, latency,
			apiFloor.Round(time.Millisecond), writesUp, discoveryRate, perRound, rateUp, rateStopped, ratio, parRate, cmFloor.Round(time.Millisecond),
			wall.Seconds()/max(cmFloor, bmcFloor, time.Nanosecond).Seconds(), bmcUp.QueueSummary())
		busy := latency.Busy(steadyBMC.Requests, n/k, steady)
		fmt.Printf("steady state: the BMCs' slots %.2f%% busy at the median answer time; BMC queue: %s\n", 100*busy, steadyBMC.QueueSummary())
		fmt.Printf("manager to all Available: %s\n", summary)
		fmt.Printf("emulated boots without a report: %s\n", failed)
		fmt.Printf("API writes per server by resource and verb (the benchmark's own included): %s\n", breakdown)
		readsPer, readBreakdown := testenv.WritesPer(reads0, reads1, n, nil)
		fmt.Printf("API reads per server (every client's, the benchmark's polls included): %.1f: %s\n", readsPer, readBreakdown)
		fmt.Printf("CPU seconds to all Available (2 cores, %.0f s of wall time): %s\n", wall.Seconds(), cpu)
		// METALHUB_AUDIT_LOG has the API server log every write: what each one changed, and the
		// events by reason.
		if env.AuditLog != "" {
			report, err := env.AuditWrites(start, start.Add(wall), n)
			if err != nil {
				b.Logf("audit: %v", err)
			}
			fmt.Print(report)
		}
		_ = env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("default"))
	}
}

// serversOff counts the Servers whose status says power Off, read from the API server's watch
// cache as a table of their printer columns (includeObject=None): a row of a few cells each,
// where a list would carry every Server whole.
func serversOff(ctx context.Context) (int, error) {
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return 0, err
	}
	url := strings.TrimRight(env.Config.Host, "/") + "/apis/" + metalv1alpha1.GroupVersion.String() + "/servers?resourceVersion=0&includeObject=None"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("servers as a table: %s: %s", resp.Status, body)
	}
	var t metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return 0, fmt.Errorf("decoding the servers' table: %w", err)
	}
	col := slices.IndexFunc(t.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Power" })
	if col < 0 {
		return 0, errors.New("the servers' table has no Power column")
	}
	off := 0
	for _, row := range t.Rows {
		if col < len(row.Cells) && row.Cells[col] == string(metalv1alpha1.PowerStateOff) {
			off++
		}
	}
	return off, nil
}

// bootFailures counts the emulated boots that ended without the registry confirming their
// report, by error: a server whose probe gave up waits in Discovery for the discovery timeout,
// which the progress line alone cannot tell from a slow operator.
type bootFailures struct {
	mu      sync.Mutex
	reasons map[string]int
}

func (f *bootFailures) add(r netboot.Result) {
	if r.Err == nil {
		return
	}
	// The error names the server or the object it missed; the reason is what is left.
	reason := r.Err.Error()
	if i := strings.LastIndex(reason, ": "); i >= 0 {
		reason = reason[i+2:]
	}
	f.mu.Lock()
	if f.reasons == nil {
		f.reasons = map[string]int{}
	}
	f.reasons[reason]++
	f.mu.Unlock()
}

func (f *bootFailures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reasons) == 0 {
		return "none"
	}
	out := make([]string, 0, len(f.reasons))
	for r, c := range f.reasons {
		out = append(out, fmt.Sprintf("%d %q", c, r))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// parallelCreates is the API server's rate of ConfigMap creates from writers in parallel, each
// creating as soon as its last returned, n in all.
func parallelCreates(b *testing.B, writers, n int) float64 {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if err := testenv.Parallel(n, writers, func(i int) error {
		return env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bench-par-%d", i)}})
	}); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// queueDepths reads the manager's workqueue depths, for the progress log.
func queueDepths(metricsAddr string) string {
	families, err := testenv.Scrape(http.DefaultClient, "http://"+metricsAddr+"/metrics")
	if err != nil {
		return err.Error()
	}
	var out []string
	if fam := families["workqueue_depth"]; fam != nil {
		for _, m := range fam.Metric {
			if d := m.GetGauge().GetValue(); d > 0 {
				out = append(out, fmt.Sprintf("%s=%.0f", labels(m)["name"], d))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// cpuSeconds is a process's user+system CPU time so far (clock ticks of 1/100 s, as on Linux).
func cpuSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// childByName finds a direct child of this test process by command name (the control plane's
// kube-apiserver and etcd), or 0.
func childByName(name string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+2:])
		if s[open+1:end] == name && len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	return 0
}

// cpuShares samples the CPU seconds of the processes that share the machine during a run.
type cpuShares map[string]float64

func sampleCPU(manager int) cpuShares {
	return cpuShares{
		"manager":        cpuSeconds(manager),
		"kube-apiserver": cpuSeconds(childByName("kube-apiserver")),
		"etcd":           cpuSeconds(childByName("etcd")),
		"test+emulators": cpuSeconds(os.Getpid()),
	}
}

func (c cpuShares) since(before cpuShares) string {
	keys := slices.Sorted(maps.Keys(c))
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.1fs", k, c[k]-before[k]))
	}
	return strings.Join(out, ", ")
}

// managerSummary condenses the manager's own metrics into one line: reconciles and mean pass
// time per controller, and its Redfish requests with their mean latency.
func managerSummary(metricsAddr string, servers int) string {
	families, err := testenv.Scrape(http.DefaultClient, "http://"+metricsAddr+"/metrics")
	if err != nil {
		return err.Error()
	}
	passes := map[string]float64{}
	if fam := families["controller_runtime_reconcile_total"]; fam != nil {
		for _, m := range fam.Metric {
			passes[labels(m)["controller"]] += m.GetCounter().GetValue()
		}
	}
	var out []string
	if fam := families["controller_runtime_reconcile_time_seconds"]; fam != nil {
		for _, m := range fam.Metric {
			c, h := labels(m)["controller"], m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			out = append(out, fmt.Sprintf("%s %.0f passes (%.1f/server, mean %.0f ms)", c, passes[c], passes[c]/float64(servers),
				1000*h.GetSampleSum()/float64(h.GetSampleCount())))
		}
	}
	sort.Strings(out)
	for _, g := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes"} {
		if fam := families[g]; fam != nil && len(fam.Metric) > 0 {
			v := fam.Metric[0].GetGauge().GetValue()
			if strings.HasSuffix(g, "_bytes") {
				out = append(out, fmt.Sprintf("%s %.0f MiB", strings.TrimPrefix(g, "go_memstats_"), v/(1<<20)))
			} else {
				out = append(out, fmt.Sprintf("%s %.0f", g, v))
			}
		}
	}
	// Reports refused (a round not recorded or not yet cached) cost the probes a back-off each.
	if fam := families["metalhub_discovery_reports_total"]; fam != nil {
		var parts []string
		for _, m := range fam.Metric {
			if v := m.GetCounter().GetValue(); v > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", labels(m)["result"], v/float64(servers)))
			}
		}
		sort.Strings(parts)
		out = append(out, "reports per server: "+strings.Join(parts, ", "))
	}
	if fam := families["metalhub_events_dropped_total"]; fam != nil && len(fam.Metric) > 0 {
		out = append(out, fmt.Sprintf("events dropped %.0f", fam.Metric[0].GetCounter().GetValue()))
	}
	if fam := families["metalhub_bmc_request_duration_seconds"]; fam != nil {
		var n, sum float64
		for _, m := range fam.Metric {
			n += float64(m.GetHistogram().GetSampleCount())
			sum += m.GetHistogram().GetSampleSum()
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("Redfish %.1f requests/server (mean %.0f ms)", n/float64(servers), 1000*sum/n))
		}
	}
	for _, name := range []string{"rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds"} {
		fam := families[name]
		if fam == nil {
			continue
		}
		byVerb := map[string][2]float64{}
		for _, m := range fam.Metric {
			v := byVerb[labels(m)["verb"]]
			v[0] += float64(m.GetHistogram().GetSampleCount())
			v[1] += m.GetHistogram().GetSampleSum()
			byVerb[labels(m)["verb"]] = v
		}
		var parts []string
		for verb, v := range byVerb {
			if v[0] > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f x %.0f ms", verb, v[0], 1000*v[1]/v[0]))
			}
		}
		sort.Strings(parts)
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(name, "rest_client_"), "_seconds")+": "+strings.Join(parts, ", "))
	}
	return strings.Join(out, "; ")
}

func saveProfile(b *testing.B, url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		b.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, raw, 0o644)
	}
	if err != nil {
		b.Logf("profile: %v", err)
	}
}

func TestBootFailuresTally(t *testing.T) {
	f := &bootFailures{}
	if got := f.String(); got != "none" {
		t.Errorf("empty tally = %q, want none", got)
	}
	f.add(netboot.Result{UUID: "a"})
	f.add(netboot.Result{UUID: "b", Err: fmt.Errorf("no ServerBootConfiguration default/x: %w", context.DeadlineExceeded)})
	f.add(netboot.Result{UUID: "c", Err: fmt.Errorf("no ServerBootConfiguration default/y: %w", context.DeadlineExceeded)})
	f.add(netboot.Result{UUID: "d", Err: errors.New("metalprobe: registry refused")})
	if got, want := f.String(), `1 "registry refused", 2 "context deadline exceeded"`; got != want {
		t.Errorf("tally = %q, want %q", got, want)
	}
}
