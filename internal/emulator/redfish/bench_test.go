package redfish_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// procStatusMiB reads a kB field (VmRSS, VmHWM) of /proc/self/status in MiB;
// 0 when unavailable.
func procStatusMiB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

type benchSpec struct {
	Targets []benchTarget
	N       int
	Warm    int // first Warm targets are fetched once before timing
}

type benchTarget struct{ URL, User, Pass string }

// BenchmarkEmulator1000Systems runs 1000 BMCs with one system each (1000
// listeners, one connection per BMC once warm) and has one sequential
// keep-alive client, in a child process so that only the emulator counts,
// GET system resources round robin across them.
//
// Reported: GETs/s (measured by the client), VmHWM-MiB (peak resident set
// of this process, i.e. emulator plus test harness, from /proc/self/status)
// and heap-inuse-MiB (runtime.MemStats.HeapInuse at the end).
// Budget: >= 2000 GETs/s and <= 100 MiB on a 2-core machine.
func BenchmarkEmulator1000Systems(b *testing.B) {
	const n = 1000
	e, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: -1, InitialPower: redfish.PowerOn})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()

	spec := benchSpec{N: b.N, Warm: n}
	for _, p := range []string{"", "/EthernetInterfaces", "/Memory", "/Processors"} {
		for _, bm := range e.BMCs() {
			u, pw := bm.Credentials()
			spec.Targets = append(spec.Targets, benchTarget{bm.URL() + "/redfish/v1/Systems/" + bm.SystemIDs()[0] + p, u, pw})
		}
	}
	raw, _ := json.Marshal(spec)
	specFile := filepath.Join(b.TempDir(), "spec.json")
	if err := os.WriteFile(specFile, raw, 0o600); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchmarkClientProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDFISH_BENCH_CLIENT="+specFile)
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("client process: %v\n%s", err, out)
	}
	var gets int
	var secs float64
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "RESULT %d %g", &gets, &secs); err == nil {
			break
		}
	}
	if gets == 0 || secs <= 0 {
		b.Fatalf("client process printed no result:\n%s", out)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	peak := procStatusMiB("VmHWM")
	b.ReportMetric(float64(gets)/secs, "GETs/s")
	b.ReportMetric(peak, "VmHWM-MiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
	if peak > 100 {
		b.Errorf("peak RSS %.1f MiB exceeds the 100 MiB budget for 1000 systems", peak)
	}
}

// TestBenchmarkClientProcess is the client half of
// BenchmarkEmulator1000Systems; it only runs as that benchmark's child.
func TestBenchmarkClientProcess(t *testing.T) {
	path := os.Getenv("REDFISH_BENCH_CLIENT")
	if path == "" {
		t.Skip("client process of BenchmarkEmulator1000Systems")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec benchSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxIdleConns: len(spec.Targets), IdleConnTimeout: time.Minute}}
	get := func(tg benchTarget) {
		req, _ := http.NewRequest(http.MethodGet, tg.URL, nil)
		req.SetBasicAuth(tg.User, tg.Pass)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", tg.URL, resp.StatusCode)
		}
	}
	for _, tg := range spec.Targets[:spec.Warm] {
		get(tg)
	}
	start := time.Now()
	for i := range spec.N {
		get(spec.Targets[i%len(spec.Targets)])
	}
	fmt.Printf("RESULT %d %g\n", spec.N, time.Since(start).Seconds())
}
