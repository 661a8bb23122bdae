package infrahub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseAtMimicsInfrahub(t *testing.T) {
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "", want: now},
		{in: "2025-04-09T00:00:00Z", want: time.Date(2025, 4, 9, 0, 0, 0, 0, time.UTC)},
		{in: "2025-04-09T02:00:00+02:00", want: time.Date(2025, 4, 9, 0, 0, 0, 0, time.UTC)},
		{in: "2025-04-09T00:00:00", want: time.Date(2025, 4, 9, 0, 0, 0, 0, time.UTC)},
		{in: "2025-04-09", want: time.Date(2025, 4, 9, 12, 0, 0, 0, time.UTC)}, // bare date = noon
		{in: "now-2h", want: now.Add(-2 * time.Hour)},
		{in: "now+2h", want: now.Add(-2 * time.Hour)}, // sign ignored
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "now-1h30m", want: now.Add(-90 * time.Minute)},
		{in: "now-1d2h", want: now.Add(-2 * time.Hour)}, // day part silently dropped
		{in: "now-10min", want: now.Add(-10 * time.Minute)},
		{in: "now-2d", wantErr: true},
		{in: "yesterday", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseAt(tc.in, now)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseAt(%q) = %v, want error", tc.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseAt(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestStoreHistoryAndBranches(t *testing.T) {
	e := New(Options{})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { tt, _ := time.Parse(time.RFC3339, s); return tt }
	main, _ := e.Artifacts("", time.Time{})
	if len(main) != 2 {
		t.Fatalf("main now: %d artifacts, want 2", len(main))
	}
	old, _ := e.Artifacts("main", at("2025-04-09T00:00:00Z"))
	if len(old) != 1 || !strings.Contains(string(old[0].Content), "v1") {
		t.Fatalf("main at 2025-04-09: %+v", old)
	}
	if old[0].StorageID != main[0].StorageID || old[0].Checksum == main[0].Checksum {
		t.Errorf("storage id must stay and checksum change: old %s/%s now %s/%s",
			old[0].StorageID, old[0].Checksum, main[0].StorageID, main[0].Checksum)
	}
	fx, _ := e.Artifacts(SampleBranch, time.Time{})
	if len(fx) != 2 || fx[0].Branch != SampleBranch || fx[1].Branch != MainBranch {
		t.Fatalf("feature-x: %+v", fx)
	}
	if err := e.DeleteArtifact(SampleBranch, fx[1].ID); err != nil {
		t.Fatal(err)
	}
	if fx, _ = e.Artifacts(SampleBranch, time.Time{}); len(fx) != 1 {
		t.Errorf("after branch delete: %d on branch", len(fx))
	}
	if main, _ = e.Artifacts("", time.Time{}); len(main) != 2 {
		t.Errorf("a branch delete must not touch main: %d", len(main))
	}
	if _, err := e.UpdateArtifact("", "nope", nil); err == nil {
		t.Error("update of unknown id succeeded")
	}
}

func TestHTTPAuthAndQuery(t *testing.T) {
	e := New(Options{APITokens: []string{"tok"}})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()

	post := func(path, body string, h map[string]string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	if r, _ := post("/api/auth/login", `{"username":"ghost","password":"x"}`, nil); r.StatusCode != 404 {
		t.Errorf("unknown user: %d, want 404", r.StatusCode)
	}
	if r, _ := post("/api/auth/login", `{"username":"admin","password":"x"}`, nil); r.StatusCode != 401 {
		t.Errorf("wrong password: %d, want 401", r.StatusCode)
	}
	r, b := post("/api/auth/login", `{"username":"admin","password":"infrahub"}`, nil)
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	_ = json.Unmarshal(b, &tok)
	if r.StatusCode != 200 || tok.AccessToken == "" || tok.RefreshToken == "" {
		t.Fatalf("login: %d %s", r.StatusCode, b)
	}
	q := `{"variables":{"artifactname":"Webserver_Manifest"}}`
	if r, _ := post("/api/query/ArtifactIDs", q, nil); r.StatusCode != 401 {
		t.Errorf("no auth: %d", r.StatusCode)
	}
	r, b = post("/api/query/ArtifactIDs?branch=main&at=2025-04-09T00:00:00Z&update_group=false", q,
		map[string]string{"Authorization": "Bearer " + tok.AccessToken})
	if r.StatusCode != 200 || strings.Count(string(b), `"node"`) != 1 {
		t.Errorf("query at: %d %s", r.StatusCode, b)
	}
	r, b = post("/api/query/ArtifactIDs", q, map[string]string{"X-INFRAHUB-KEY": "tok"})
	if r.StatusCode != 200 || strings.Count(string(b), `"node"`) != 2 {
		t.Errorf("query with API token: %d %s", r.StatusCode, b)
	}
	if r, _ := post("/api/query/Nope", q, map[string]string{"X-INFRAHUB-KEY": "tok"}); r.StatusCode != 404 {
		t.Errorf("unknown query: %d", r.StatusCode)
	}
	if r, _ := post("/api/query/ArtifactIDs?branch=nope", q, map[string]string{"X-INFRAHUB-KEY": "tok"}); r.StatusCode != 400 {
		t.Errorf("unknown branch: %d", r.StatusCode)
	}
	e.FailQuery("ArtifactIDs", "boom")
	if r, b := post("/api/query/ArtifactIDs", q, map[string]string{"X-INFRAHUB-KEY": "tok"}); r.StatusCode != 502 || !strings.Contains(string(b), "boom") {
		t.Errorf("failing query: %d %s", r.StatusCode, b)
	}
	e.RevokeAccessTokens()
	if r, _ := post("/api/auth/refresh", "", map[string]string{"Authorization": "Bearer " + tok.AccessToken}); r.StatusCode != 401 {
		t.Errorf("access token used as refresh token: %d", r.StatusCode)
	}
	if r, b := post("/api/auth/refresh", "", map[string]string{"Authorization": "Bearer " + tok.RefreshToken}); r.StatusCode != 200 || !strings.Contains(string(b), "access_token") {
		t.Errorf("refresh: %d %s", r.StatusCode, b)
	}

	c := e.Counters()
	if c.Logins != 3 || c.Queries != 6 || c.Refreshes != 2 || c.Unauthorized != 3 {
		t.Errorf("counters: %+v", c)
	}
	resp, err := http.Get(srv.URL + "/emulator/requests")
	if err != nil {
		t.Fatal(err)
	}
	var log struct {
		Requests []Request
		Counters Counters
	}
	_ = json.NewDecoder(resp.Body).Decode(&log)
	resp.Body.Close()
	if len(log.Requests) != c.Total || log.Counters != c {
		t.Errorf("HTTP log: %d entries, counters %+v; want %d, %+v", len(log.Requests), log.Counters, c.Total, c)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/emulator/requests", nil)
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if c := e.Counters(); c.Total != 0 || len(e.Requests()) != 0 {
		t.Errorf("after reset: %+v", c)
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	e := New(Options{AllowAnonymousRead: true})
	a, _ := e.AddArtifact("", "x", "", []byte("hello"))
	srv := httptest.NewServer(e)
	defer srv.Close()
	defer e.Close()
	get := func() (int, error) {
		c := &http.Client{Timeout: 300 * time.Millisecond}
		resp, err := c.Get(srv.URL + "/api/artifact/" + a.ID)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, nil
	}
	if s, err := get(); s != 200 || err != nil {
		t.Fatalf("anonymous GET: %d %v", s, err)
	}
	put := func(class, body string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/emulator/faults/"+class, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("set fault: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	put("artifact", `{"kind":"status","status":500,"times":1}`)
	if s, _ := get(); s != 500 {
		t.Errorf("status fault: %d", s)
	}
	if s, _ := get(); s != 200 {
		t.Errorf("fault with times=1 not cleared: %d", s)
	}
	put("all", `{"kind":"drop"}`)
	if _, err := get(); err == nil {
		t.Error("drop fault: no error")
	}
	e.SetFault(ClassArtifact, Fault{Kind: FaultHang})
	start := time.Now()
	if _, err := get(); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("hang fault: %v after %v", err, time.Since(start))
	}
	e.SetFault(ClassArtifact, Fault{Kind: FaultLatency, Latency: 50 * time.Millisecond})
	if s, _ := get(); s != 200 {
		t.Errorf("latency fault: %d", s)
	}
	e.ClearFaults()
	if s, _ := get(); s != 200 {
		t.Errorf("after clear: %d", s)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Web.yaml", "a: 1\n")
	write("Web--two.yml", "a: 2\n")
	write("Cfg.json", `{"a":3}`)
	write("README.md", "ignored")
	write("dev/Web.yaml", "a: dev\n")
	e := New(Options{})
	if err := e.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	main, _ := e.Artifacts("", time.Time{})
	if len(main) != 3 {
		t.Fatalf("main: %+v", main)
	}
	dev, err := e.Artifacts("dev", time.Time{})
	if err != nil || len(dev) != 3 {
		t.Fatalf("dev: %v %+v", err, dev)
	}
	for _, a := range dev {
		if a.Name == "Cfg" && a.ContentType != "application/json" {
			t.Errorf("json content type: %s", a.ContentType)
		}
		if a.Branch == "dev" && string(a.Content) != "a: dev\n" {
			t.Errorf("dev override: %q", a.Content)
		}
	}
}

// InFlight and PeakInFlight count requests while they are served, a hanging one until its
// client gives up.
func TestInFlightAndPeak(t *testing.T) {
	e := New(Options{})
	srv := httptest.NewServer(e)
	defer srv.Close()
	e.SetFault(ClassQuery, Fault{Kind: FaultHang})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	for range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/query/ArtifactIDs", strings.NewReader("{}"))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.InFlight(ClassQuery) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d, want 3 hanging queries", e.InFlight(ClassQuery))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for range 3 {
		<-done
	}
	for e.InFlight(ClassQuery) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d after the clients gave up, want 0", e.InFlight(ClassQuery))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p := e.PeakInFlight(ClassQuery); p != 3 {
		t.Fatalf("peak %d, want 3", p)
	}
	if p := e.PeakInFlight(ClassArtifact); p != 0 {
		t.Fatalf("artifact peak %d, want 0", p)
	}
	e.ResetRequests()
	if p := e.PeakInFlight(ClassQuery); p != 0 {
		t.Fatalf("peak %d after a reset with nothing in flight, want 0", p)
	}
}
