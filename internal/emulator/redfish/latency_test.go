package redfish_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestLatencyPresets(t *testing.T) {
	for _, name := range append(redfish.LatencyPresets(), "") {
		m, err := redfish.Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if name == "" && m != (redfish.LatencyModel{Name: redfish.LatencyFast}) {
			t.Errorf("Preset(\"\") = %+v, want fast", m)
		}
	}
	if _, err := redfish.Preset("sluggish"); err == nil {
		t.Error("Preset(sluggish): no error")
	}
	fast, _ := redfish.Preset(redfish.LatencyFast)
	if fast.Median != 0 || fast.Concurrency != 0 || fast.ResetSilence != 0 || fast.SystemsPerBMC != 0 {
		t.Errorf("fast adds something: %+v", fast)
	}
}

// Every answer time lies within the model's bounds, about half below its median and about 95%
// below its p95, and the same seed and stream draw the same times. The draws are deterministic,
// so the proportions checked are the same on every run.
func TestLatencyDistribution(t *testing.T) {
	for _, name := range []string{redfish.LatencyTypical, redfish.LatencySlow} {
		t.Run(name, func(t *testing.T) {
			m, _ := redfish.Preset(name)
			const n = 20000
			draw := func(seed, stream uint64) []time.Duration {
				s := m.NewSampler(seed, stream)
				out := make([]time.Duration, n)
				for i := range out {
					out[i] = s.Next()
				}
				return out
			}
			ds := draw(7, 3)
			var belowMedian, belowP95 int
			for _, d := range ds {
				if d < m.Min || d > m.Max {
					t.Fatalf("answer time %s outside [%s, %s]", d, m.Min, m.Max)
				}
				if d < m.Median {
					belowMedian++
				}
				if d <= m.P95 {
					belowP95++
				}
			}
			if f := float64(belowMedian) / n; f < 0.47 || f > 0.53 {
				t.Errorf("%.3f of the answers below the median %s, want about half", f, m.Median)
			}
			if f := float64(belowP95) / n; f < 0.93 || f > 0.97 {
				t.Errorf("%.3f of the answers within the p95 %s, want about 0.95", f, m.P95)
			}
			if !slices.Equal(ds, draw(7, 3)) {
				t.Error("the same seed and stream drew different answer times")
			}
			if slices.Equal(ds, draw(8, 3)) || slices.Equal(ds, draw(7, 4)) {
				t.Error("another seed or stream drew the same answer times")
			}
		})
	}
	// A model without a p95 answers in its median; the zero model adds nothing.
	if d := (redfish.LatencyModel{Median: time.Second}).NewSampler(1, 1).Next(); d != time.Second {
		t.Errorf("median-only model drew %s, want 1s", d)
	}
	if d := (redfish.LatencyModel{}).NewSampler(1, 1).Next(); d != 0 {
		t.Errorf("zero model drew %s, want 0", d)
	}
}

// get asks for the service root (no credentials needed) with ctx.
func get(ctx context.Context, b *redfish.BMC) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL()+"/redfish/v1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitUntil polls cond until it holds, failing after a generous deadline: a condition to wait
// for, not a timing to assert.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With every slot held (hanging requests), the others wait in the queue: exactly Concurrency
// are served at once; once the slots come free the queued requests are served, in full.
func TestConcurrencyCap(t *testing.T) {
	const limit, extra = 3, 7
	e := start(t, redfish.Options{Latency: redfish.LatencyModel{Concurrency: limit}})
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{Hang: true})
	hung, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range limit {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = get(hung, b) }()
	}
	waitUntil(t, "the slots taken", func() bool { return b.Stats().InFlight == limit })
	codes := make(chan int, extra)
	for range extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := get(context.Background(), b)
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	waitUntil(t, "the others queued", func() bool { return b.Stats().Queued == extra })
	if st := b.Stats(); st.InFlight != limit {
		t.Fatalf("%d in flight with %d queued, want the cap %d", st.InFlight, st.Queued, limit)
	}
	// The hang applies to requests as they are served: the queued ones are answered once the
	// hanging ones' clients give up and free their slots.
	b.ClearFaults()
	cancel()
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a queued request answered %d, want 200", code)
		}
	}
	st := b.Stats()
	if st.MaxInFlight != limit || st.MaxQueued != extra || st.Waited != extra {
		t.Errorf("max in flight %d, max queued %d, waited %d; want %d, %d, %d", st.MaxInFlight, st.MaxQueued, st.Waited, limit, extra, extra)
	}
	if st.QueueWait <= 0 || st.MaxQueueWait <= 0 || st.MaxQueueWait > st.QueueWait {
		t.Errorf("queue wait %s in all, %s at most", st.QueueWait, st.MaxQueueWait)
	}

	// Many parallel requests with answer times: every one answered, never more than the cap
	// at once, and some had to wait.
	e2 := start(t, redfish.Options{Latency: redfish.LatencyModel{Median: 2 * time.Millisecond, P95: 5 * time.Millisecond, Concurrency: 2}})
	b2 := e2.BMC(0)
	const parallel = 40
	errs := make(chan error, parallel)
	var wg2 sync.WaitGroup
	for range parallel {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if code, err := get(context.Background(), b2); err != nil || code != http.StatusOK {
				errs <- err
			}
		}()
	}
	wg2.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request not answered 200: %v", err)
	}
	st2 := b2.Stats()
	if st2.MaxInFlight > 2 || st2.Requests != parallel {
		t.Errorf("max in flight %d (cap 2), requests %d (want %d)", st2.MaxInFlight, st2.Requests, parallel)
	}
	if st2.Waited > 0 && st2.QueueWait <= 0 {
		t.Errorf("%d requests waited, for %s in all", st2.Waited, st2.QueueWait)
	}
}

// After a manager reset the BMC answers nothing for ResetSilence, then answers again.
func TestResetSilence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		silence time.Duration
	}{{"long", time.Hour}, {"short", 200 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, redfish.Options{Latency: redfish.LatencyModel{ResetSilence: tc.silence}})
			b := e.BMC(0)
			_, mgrs := do(t, b, call{method: "GET", path: "/redfish/v1/Managers", basic: true})
			mp := mgrs["Members"].([]any)[0].(map[string]any)["@odata.id"].(string)
			reset := time.Now()
			if resp, _ := do(t, b, call{method: "POST", path: mp + "/Actions/Manager.Reset", basic: true, body: map[string]string{"ResetType": "GracefulRestart"}}); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("Manager.Reset: %d", resp.StatusCode)
			}
			if tc.silence == time.Hour {
				for range 3 {
					if code, err := get(context.Background(), b); err == nil {
						t.Fatalf("answered %d while resetting", code)
					}
				}
				return
			}
			waitUntil(t, "an answer after the reset", func() bool {
				code, err := get(context.Background(), b)
				return err == nil && code == http.StatusOK
			})
			if since := time.Since(reset); since < tc.silence {
				t.Errorf("answered %s after the reset, within its silence of %s", since, tc.silence)
			}
		})
	}
}

func TestLatencyFloor(t *testing.T) {
	typical, _ := redfish.Preset(redfish.LatencyTypical)
	fast, _ := redfish.Preset(redfish.LatencyFast)
	for _, tc := range []struct {
		m       redfish.LatencyModel
		perServ float64
		perBMC  int
		want    time.Duration
	}{
		// 10 requests for each of 8 systems at 250 ms, 4 at a time.
		{typical, 10, 8, 5 * time.Second},
		{typical, 0, 8, 0},
		{fast, 10, 8, 0},
		{redfish.LatencyModel{Median: time.Second}, 10, 8, 0}, // no cap: no floor
	} {
		if got := tc.m.Floor(tc.perServ, tc.perBMC); got != tc.want {
			t.Errorf("%s.Floor(%v, %d) = %s, want %s", tc.m, tc.perServ, tc.perBMC, got, tc.want)
		}
	}
}

func TestLatencyBusy(t *testing.T) {
	typical, _ := redfish.Preset(redfish.LatencyTypical)
	fast, _ := redfish.Preset(redfish.LatencyFast)
	for _, tc := range []struct {
		m        redfish.LatencyModel
		requests int64
		bmcs     int
		window   time.Duration
		want     float64
	}{
		// 160 requests at 250 ms over 10 s on 2 BMCs of 4 slots: 40 s of 80 slot-seconds.
		{typical, 160, 2, 10 * time.Second, 0.5},
		{typical, 0, 2, 10 * time.Second, 0},
		{typical, 160, 0, 10 * time.Second, 0},
		{fast, 160, 2, 10 * time.Second, 0},
	} {
		if got := tc.m.Busy(tc.requests, tc.bmcs, tc.window); got != tc.want {
			t.Errorf("%s.Busy(%d, %d, %s) = %v, want %v", tc.m, tc.requests, tc.bmcs, tc.window, got, tc.want)
		}
	}
}

func TestStatsArithmetic(t *testing.T) {
	a := redfish.Stats{Requests: 10, Waited: 2, QueueWait: 3 * time.Second, MaxInFlight: 4, MaxQueued: 1, MaxQueueWait: 2 * time.Second}
	b := redfish.Stats{Requests: 5, Waited: 1, QueueWait: time.Second, MaxInFlight: 2, MaxQueued: 3, MaxQueueWait: time.Second}
	sum := a.Add(b)
	if want := (redfish.Stats{Requests: 15, Waited: 3, QueueWait: 4 * time.Second, MaxInFlight: 4, MaxQueued: 3, MaxQueueWait: 2 * time.Second}); sum != want {
		t.Errorf("Add = %+v, want %+v", sum, want)
	}
	later := redfish.Stats{Requests: 25, Waited: 3, QueueWait: 5 * time.Second, MaxInFlight: 1, MaxQueued: 0, MaxQueueWait: 0}
	if got, want := later.Since(sum), (redfish.Stats{Requests: 10, QueueWait: time.Second, MaxInFlight: 1}); got != want {
		t.Errorf("Since = %+v, want %+v", got, want)
	}
	if got, want := later.Peaks(sum), (redfish.Stats{Requests: 25, Waited: 3, QueueWait: 5 * time.Second, MaxInFlight: 4, MaxQueued: 3, MaxQueueWait: 2 * time.Second}); got != want {
		t.Errorf("Peaks = %+v, want %+v", got, want)
	}
	if got, want := sum.QueueSummary(), "3 of 15 requests waited for a slot (mean 1.333s, max 2s), at most 4 served and 3 queued at once at one BMC"; got != want {
		t.Errorf("QueueSummary = %q, want %q", got, want)
	}
}
