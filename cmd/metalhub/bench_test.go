package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// apiserverWrites reads the API server's own request counter: writes (POST/PUT/PATCH/DELETE) in
// total and to servers (including status).
func apiserverWrites(b *testing.B) (total, servers float64) {
	b.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		b.Fatal(err)
	}
	fam := families["apiserver_request_total"]
	if fam == nil {
		b.Fatal("no apiserver_request_total")
	}
	for _, m := range fam.Metric {
		l := labels(m)
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		default:
			continue
		}
		total += m.GetCounter().GetValue()
		if l["resource"] == "servers" {
			servers += m.GetCounter().GetValue()
		}
	}
	return total, servers
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
	// The steady-state window covers a full resync period of both the servers (one Redfish
	// request each) and the BMCs (four), so every periodic look is counted once.
	// METALHUB_BENCH_STEADY shortens it for a quick look (and then undercounts).
	serverResync, bmcResync := 2*time.Minute, 15*time.Minute
	steady := bmcResync + time.Minute
	if v := os.Getenv("METALHUB_BENCH_STEADY"); v != "" {
		steady, _ = time.ParseDuration(v)
	}
	bin, err := buildBinary()
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

		nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", MaxConcurrent: 16, ProbeInterval: time.Second, Logger: logr.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		fleet, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: -1, OnBoot: nb.OnBoot, MaxSessions: 4})
		if err != nil {
			b.Fatal(err)
		}
		reg := freePort(b)
		mgr := &managerProcess{bin: bin, logPath: filepath.Join(b.TempDir(), "manager.log"), args: []string{
			"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--zap-log-level", "error",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--registry-bind-address", fmt.Sprintf("127.0.0.1:%d", reg), "--registry-url", fmt.Sprintf("http://127.0.0.1:%d", reg),
			"--discovery-namespace", "default", "--kube-api-qps", "500", "--kube-api-burst", "1000", "--metal-concurrency", "32",
			"--server-resync", serverResync.String(), "--bmc-resync", bmcResync.String(),
		}}
		writes0, serverWrites0 := apiserverWrites(b)
		b.ResetTimer()
		start = time.Now()
		mgr.start(b)
		registerFleet(b, fleet, "bench")
		deadline := time.Now().Add(10 * time.Minute)
		available := 0
		for available < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d/%d Available after 10m", available, n)
			}
			time.Sleep(500 * time.Millisecond)
			list := &metalv1alpha1.ServerList{}
			if err := env.Client.List(ctx, list); err != nil {
				b.Fatal(err)
			}
			available = 0
			for _, s := range list.Items {
				if s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateAvailable) && s.Status.PowerState == metalv1alpha1.PowerStateOff {
					available++
				}
			}
		}
		wall := time.Since(start)
		b.StopTimer()
		writes1, serverWrites1 := apiserverWrites(b)

		// Steady state: Redfish requests per server per minute once everything has settled.
		time.Sleep(10 * time.Second)
		var r0 int64
		for _, bm := range fleet.BMCs() {
			r0 += bm.Stats().Requests
		}
		time.Sleep(steady)
		var r1 int64
		for _, bm := range fleet.BMCs() {
			r1 += bm.Stats().Requests
		}
		rss := peakRSSMiB(mgr.pid())

		// The benchmark's own creates (a BMCSecret and a BMC per server) are not the operator's.
		perServer := (writes1 - writes0 - float64(2*n)) / float64(n)
		b.ReportMetric(wall.Seconds(), "s-to-all-available")
		b.ReportMetric(perServer, "api-writes/server")
		b.ReportMetric((serverWrites1-serverWrites0)/float64(n), "server-object-writes/server")
		b.ReportMetric(float64(r1-r0)/float64(n)/steady.Minutes(), "redfish-req/server/min")
		b.ReportMetric(rss, "manager-peak-MiB")
		b.ReportMetric(seqRate, "apiserver-seq-writes/s")
		fmt.Printf("fleet of %d: all Available in %s; %.1f API writes per server (%.1f to the Server object); steady state %.2f Redfish requests per server per minute; manager peak RSS %.0f MiB; API server sequential write rate %.0f/s\n",
			n, wall.Round(100*time.Millisecond), perServer, (serverWrites1-serverWrites0)/float64(n), float64(r1-r0)/float64(n)/steady.Minutes(), rss, seqRate)

		mgr.kill()
		nb.Close()
		_ = fleet.Close()
		_ = env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("default"))
	}
}
