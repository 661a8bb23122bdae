package latest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prometheus is a Source for a view that runs apart from the operator (metalhub dashboard on a
// laptop): it reads the collector's gauges back from a Prometheus server that scrapes the
// operator, a few instant queries per refresh for the whole fleet. Latest never waits on the
// network: it answers from the last snapshot and starts a refresh when that is older than
// Refresh.
type Prometheus struct {
	// URL is the Prometheus server's base URL.
	URL string
	// Client defaults to one with a 10s timeout.
	Client *http.Client
	// Refresh is how old a snapshot may be (default 15s).
	Refresh time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time

	mu         sync.Mutex
	at         time.Time
	refreshing bool
	readings   map[string]Reading
	err        error
}

// Latest implements Source.
func (p *Prometheus) Latest(server string) (Reading, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refreshing && p.now().Sub(p.at) >= p.refresh() {
		p.refreshing = true
		go p.Update(context.Background())
	}
	r, ok := p.readings[server]
	return r, ok
}

// Err is the last refresh's failure (nil after a good one).
func (p *Prometheus) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Prometheus) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Prometheus) refresh() time.Duration {
	if p.Refresh > 0 {
		return p.Refresh
	}
	return 15 * time.Second
}

// Update reads a new snapshot; a failed one keeps the last.
func (p *Prometheus) Update(ctx context.Context) {
	readings, err := p.read(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refreshing, p.at, p.err = false, p.now(), err
	if err == nil {
		p.readings = readings
	}
}

// The queries a snapshot takes: each series names its server.
const (
	queryAt      = `metalhub_server_telemetry_timestamp_seconds`
	queryPower   = `metalhub_server_power_watts`
	queryHottest = `topk by (server) (1, metalhub_server_temperature_celsius)`
	queryPSUs    = `metalhub_server_psu_healthy == 0`
	queryFans    = `metalhub_server_fan_healthy == 0`
)

func (p *Prometheus) read(ctx context.Context) (map[string]Reading, error) {
	out := map[string]Reading{}
	get := func(server string) Reading { return out[server] }
	err := p.each(ctx, queryAt, func(l map[string]string, v float64) {
		r := get(l["server"])
		r.At = time.Unix(int64(v), 0)
		out[l["server"]] = r
	})
	if err == nil {
		err = p.each(ctx, queryPower, func(l map[string]string, v float64) {
			r := get(l["server"])
			r.PowerWatts = &v
			out[l["server"]] = r
		})
	}
	if err == nil {
		err = p.each(ctx, queryHottest, func(l map[string]string, v float64) {
			r := get(l["server"])
			r.HottestCelsius, r.HottestSensor = &v, l["sensor"]
			out[l["server"]] = r
		})
	}
	if err == nil {
		err = p.each(ctx, queryPSUs, func(l map[string]string, _ float64) {
			r := get(l["server"])
			r.FailedPSUs = append(r.FailedPSUs, l["psu"])
			sort.Strings(r.FailedPSUs)
			out[l["server"]] = r
		})
	}
	if err == nil {
		err = p.each(ctx, queryFans, func(l map[string]string, _ float64) {
			r := get(l["server"])
			r.FailedFans = append(r.FailedFans, l["fan"])
			sort.Strings(r.FailedFans)
			out[l["server"]] = r
		})
	}
	delete(out, "")
	return out, err
}

// each runs an instant query and calls fn with each sample's labels and value.
func (p *Prometheus) each(ctx context.Context, query string, fn func(map[string]string, float64)) error {
	c := p.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	u := strings.TrimRight(p.URL, "/") + "/api/v1/query?" + url.Values{"query": {query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("telemetry from Prometheus: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("telemetry from Prometheus: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("telemetry from Prometheus: %s: decoding the answer (HTTP %d): %w", query, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("telemetry from Prometheus: %s: %s (HTTP %d)", query, body.Error, resp.StatusCode)
	}
	for _, s := range body.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			continue
		}
		fn(s.Metric, v)
	}
	return nil
}
