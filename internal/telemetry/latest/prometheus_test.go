package latest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A stand-in for Prometheus's query API, answering the collector's series for two servers as a
// Prometheus scraping the operator would.
func promAPI(t *testing.T, answers map[string][]map[string]any) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		res, ok := answers[r.URL.Query().Get("query")]
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "error": "unexpected query " + r.URL.Query().Get("query")})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": res}})
	}))
	t.Cleanup(s.Close)
	return s
}

func sample(v string, labels ...string) map[string]any {
	m := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[labels[i]] = labels[i+1]
	}
	return map[string]any{"metric": m, "value": []any{1733560000.0, v}}
}

func TestPrometheusSource(t *testing.T) {
	api := promAPI(t, map[string][]map[string]any{
		queryAt:      {sample("1733559990", "server", "a"), sample("1733559980", "server", "b")},
		queryPower:   {sample("312.5", "server", "a")},
		queryHottest: {sample("61", "server", "a", "sensor", "cpu1_temp"), sample("40", "server", "b", "sensor", "inlet")},
		queryPSUs:    {sample("0", "server", "b", "psu", "psu2"), sample("0", "server", "b", "psu", "psu1")},
		queryFans:    {sample("0", "server", "b", "fan", "fan3")},
	})
	p := &Prometheus{URL: api.URL + "/"}
	p.Update(context.Background())
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	a, ok := p.Latest("a")
	if !ok || a.PowerWatts == nil || *a.PowerWatts != 312.5 || a.HottestCelsius == nil || *a.HottestCelsius != 61 || a.HottestSensor != "cpu1_temp" ||
		!a.At.Equal(time.Unix(1733559990, 0)) || len(a.FailedPSUs)+len(a.FailedFans) != 0 {
		t.Fatalf("a: %+v %v", a, ok)
	}
	b, ok := p.Latest("b")
	if !ok || b.PowerWatts != nil || len(b.FailedPSUs) != 2 || b.FailedPSUs[0] != "psu1" || len(b.FailedFans) != 1 || b.FailedFans[0] != "fan3" {
		t.Fatalf("b: %+v %v", b, ok)
	}
	if _, ok := p.Latest("c"); ok {
		t.Fatal("a reading for a server Prometheus has none of")
	}
}

// A failed refresh keeps the last snapshot and says why.
func TestPrometheusSourceKeepsTheLastSnapshot(t *testing.T) {
	good := promAPI(t, map[string][]map[string]any{
		queryAt: {sample("1733559990", "server", "a")}, queryPower: {sample("100", "server", "a")},
		queryHottest: {}, queryPSUs: {}, queryFans: {},
	})
	p := &Prometheus{URL: good.URL}
	p.Update(context.Background())
	p.URL = promAPI(t, map[string][]map[string]any{}).URL
	p.Update(context.Background())
	if p.Err() == nil {
		t.Fatal("no error from a Prometheus that refuses the queries")
	}
	if a, ok := p.Latest("a"); !ok || *a.PowerWatts != 100 {
		t.Fatalf("the last snapshot was lost: %+v %v", a, ok)
	}
}
