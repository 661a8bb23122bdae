package infrahub_test

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// clock is shared by client and emulator so token expiry is deterministic.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// start serves an emulator with the sample data on 127.0.0.1.
func start(t *testing.T, o emu.Options) (*emu.Emulator, string) {
	t.Helper()
	e := emu.New(o)
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() { _ = e.Close(); srv.Close() })
	return e, srv.URL
}

func newClient(t *testing.T, cfg infrahub.Config) *infrahub.Client {
	t.Helper()
	if cfg.Username == "" && cfg.APIToken == "" {
		cfg.Username, cfg.Password = emu.DefaultUsername, emu.DefaultPassword
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := infrahub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func query(t *testing.T, c *infrahub.Client, tg infrahub.Target) []infrahub.Artifact {
	t.Helper()
	arts, err := c.QueryArtifacts(context.Background(), "", emu.SampleArtifactName, tg)
	if err != nil {
		t.Fatalf("QueryArtifacts(%+v): %v", tg, err)
	}
	return arts
}

func wantReason(t *testing.T, err error, kind error, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", reason)
	}
	if !errors.Is(err, kind) || infrahub.Reason(err) != reason {
		t.Fatalf("error %q: Reason=%q Is(%v)=%v; want %s", err, infrahub.Reason(err), kind, errors.Is(err, kind), reason)
	}
}

func TestTokenCachedAcrossManyQueries(t *testing.T) {
	e, url := start(t, emu.Options{})
	c := newClient(t, infrahub.Config{URL: url})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 { // concurrent first use must still log in once
		wg.Go(func() {
			_, err := c.QueryArtifacts(context.Background(), "", emu.SampleArtifactName, infrahub.Target{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		query(t, c, infrahub.Target{})
	}
	if got := e.Counters(); got.Logins != 1 || got.Queries != 30 || got.Unauthorized != 0 || got.Refreshes != 0 {
		t.Errorf("counters = %+v, want 1 login and 30 queries", got)
	}
}

func TestTokenRenewal(t *testing.T) {
	tests := []struct {
		name    string
		disrupt func(*emu.Emulator, *clock)
		want    emu.Counters // logins, refreshes, unauthorized after the second query
	}{
		{"refresh before expiry", func(_ *emu.Emulator, c *clock) { c.Advance(6 * time.Minute) },
			emu.Counters{Logins: 1, Refreshes: 1}},
		{"refresh on 401", func(e *emu.Emulator, _ *clock) { e.RevokeAccessTokens() },
			emu.Counters{Logins: 1, Refreshes: 1, Unauthorized: 1}},
		{"log in again when refresh is rejected", func(e *emu.Emulator, _ *clock) { e.RevokeSessions() },
			emu.Counters{Logins: 2, Refreshes: 1, Unauthorized: 2}},
		{"log in again when refresh token expired", func(_ *emu.Emulator, c *clock) { c.Advance(2 * time.Hour) },
			emu.Counters{Logins: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			e, url := start(t, emu.Options{Now: clk.Now, AccessTokenTTL: 5 * time.Minute, RefreshTokenTTL: time.Hour})
			c := newClient(t, infrahub.Config{URL: url, Now: clk.Now})
			query(t, c, infrahub.Target{})
			tc.disrupt(e, clk)
			query(t, c, infrahub.Target{})
			got := e.Counters()
			if got.Logins != tc.want.Logins || got.Refreshes != tc.want.Refreshes || got.Unauthorized != tc.want.Unauthorized {
				t.Errorf("logins/refreshes/401s = %d/%d/%d, want %d/%d/%d", got.Logins, got.Refreshes, got.Unauthorized,
					tc.want.Logins, tc.want.Refreshes, tc.want.Unauthorized)
			}
		})
	}
}

func TestBadCredentials(t *testing.T) {
	e, url := start(t, emu.Options{APITokens: []string{"good"}})
	tests := []struct {
		name   string
		cfg    infrahub.Config
		status int
	}{
		{"unknown user answers 404", infrahub.Config{Username: "ghost", Password: "x"}, http.StatusNotFound},
		{"wrong password answers 401", infrahub.Config{Username: "admin", Password: "wrong"}, http.StatusUnauthorized},
		{"wrong API token", infrahub.Config{APIToken: "wrong-api-token-xyz"}, http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = url
			c := newClient(t, tc.cfg)
			_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{})
			wantReason(t, err, infrahub.ErrBadCredentials, infrahub.ReasonAuthenticationFailed)
			var ie *infrahub.Error
			if !errors.As(err, &ie) || ie.StatusCode != tc.status {
				t.Errorf("status = %+v, want %d", ie, tc.status)
			}
			if (tc.cfg.Password != "" && strings.Contains(err.Error(), tc.cfg.Password+"\"")) || (tc.cfg.APIToken != "" && strings.Contains(err.Error(), tc.cfg.APIToken)) {
				t.Errorf("error leaks a secret: %q", err)
			}
		})
	}
	t.Run("user removed after login", func(t *testing.T) {
		c := newClient(t, infrahub.Config{URL: url})
		query(t, c, infrahub.Target{})
		e.RemoveUser(emu.DefaultUsername)
		defer e.SetUser(emu.DefaultUsername, emu.DefaultPassword)
		_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{})
		wantReason(t, err, infrahub.ErrBadCredentials, infrahub.ReasonAuthenticationFailed)
	})
}

func TestAPITokenNeedsNoLogin(t *testing.T) {
	e, url := start(t, emu.Options{APITokens: []string{"s3cr3t"}})
	c := newClient(t, infrahub.Config{URL: url, APIToken: "s3cr3t", Username: "admin", Password: "ignored"})
	if got := len(query(t, c, infrahub.Target{})); got != 2 {
		t.Fatalf("%d artifacts, want 2", got)
	}
	arts := query(t, c, infrahub.Target{})
	if _, err := c.DownloadArtifact(context.Background(), arts[0].ID, infrahub.Target{}); err != nil {
		t.Fatal(err)
	}
	if got := e.Counters(); got.Logins != 0 || got.Refreshes != 0 || got.Unauthorized != 0 {
		t.Errorf("counters = %+v, want no auth traffic", got)
	}
}

func TestQueryBranchAndTimeTravel(t *testing.T) {
	e, url := start(t, emu.Options{})
	c := newClient(t, infrahub.Config{URL: url})
	main := query(t, c, infrahub.Target{Branch: "main"})
	if len(main) != 2 {
		t.Fatalf("main: %+v", main)
	}
	for _, a := range main {
		if a.Name != emu.SampleArtifactName || a.ID == "" || a.StorageID == "" || a.Checksum == "" {
			t.Errorf("incomplete artifact %+v", a)
		}
	}
	old := query(t, c, infrahub.Target{At: "2025-04-09T00:00:00Z"})
	if len(old) != 1 || old[0].ID != main[0].ID {
		t.Fatalf("at 2025-04-09: %+v", old)
	}
	if old[0].StorageID != main[0].StorageID || old[0].Checksum == main[0].Checksum {
		t.Errorf("web-a v1 vs now: storage %s/%s checksum %s/%s", old[0].StorageID, main[0].StorageID, old[0].Checksum, main[0].Checksum)
	}
	v1, err := c.DownloadArtifact(context.Background(), old[0].ID, infrahub.Target{At: "2025-04-09T02:00:00+02:00"})
	if err != nil || !strings.Contains(string(v1.Data), `version: "v1"`) {
		t.Fatalf("download at: %v %q", err, v1)
	}
	if got := query(t, c, infrahub.Target{At: "now-1h"}); len(got) != 2 {
		t.Errorf("now-1h: %d artifacts", len(got))
	}
	fx := query(t, c, infrahub.Target{Branch: emu.SampleBranch})
	if len(fx) != 2 || fx[0].Checksum == main[0].Checksum || fx[1].Checksum != main[1].Checksum {
		t.Errorf("feature-x: %+v vs main %+v", fx, main)
	}
	_, err = c.QueryArtifacts(context.Background(), "", emu.SampleArtifactName, infrahub.Target{Branch: "nope"})
	wantReason(t, err, infrahub.ErrBranchNotFound, infrahub.ReasonBranchNotFound)
	if got := query(t, c, infrahub.Target{}); len(got) != 2 {
		t.Errorf("default target: %d", len(got))
	}
	none, err := c.QueryArtifacts(context.Background(), "", "Misspelt_Manifest", infrahub.Target{})
	if err != nil || len(none) != 0 {
		t.Errorf("unknown artifact name: %v %+v (want empty, no error)", err, none)
	}
	before := e.Counters().Total
	for _, bad := range []string{"now-2d", "now+2h", "2025-04-09"} {
		_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{At: bad})
		wantReason(t, err, infrahub.ErrInvalidTargetDate, infrahub.ReasonInvalidTargetDate)
		_, err = c.DownloadArtifact(context.Background(), main[0].ID, infrahub.Target{At: bad})
		wantReason(t, err, infrahub.ErrInvalidTargetDate, infrahub.ReasonInvalidTargetDate)
	}
	if e.Counters().Total != before {
		t.Error("an invalid target date reached the server")
	}
}

func TestChecksumChangeDetection(t *testing.T) {
	clk := newClock()
	e, url := start(t, emu.Options{Now: clk.Now})
	c := newClient(t, infrahub.Config{URL: url, Now: clk.Now})
	a, err := e.AddArtifact("", "App", "application/json", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	get := func() infrahub.Artifact {
		arts, err := c.QueryArtifacts(context.Background(), "", "App", infrahub.Target{})
		if err != nil || len(arts) != 1 {
			t.Fatalf("query: %v %+v", err, arts)
		}
		return arts[0]
	}
	first := get()
	before := clk.Now()
	clk.Advance(time.Minute)
	if _, err := e.UpdateArtifact("", a.ID, []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	second := get()
	if second.ID != first.ID || second.StorageID != first.StorageID {
		t.Errorf("id/storage id changed: %+v -> %+v", first, second)
	}
	if second.Checksum == first.Checksum {
		t.Error("checksum did not change with the content")
	}
	got, err := c.DownloadArtifact(context.Background(), a.ID, infrahub.Target{})
	if err != nil || string(got.Data) != `{"v":2}` || got.ContentType != "application/json" {
		t.Fatalf("download: %v %+v", err, got)
	}
	old, err := c.DownloadArtifact(context.Background(), a.ID, infrahub.Target{At: before.Format(time.RFC3339)})
	if err != nil || string(old.Data) != `{"v":1}` {
		t.Fatalf("download before the update: %v %+v", err, old)
	}
	clk.Advance(time.Minute)
	if err := e.DeleteArtifact("", a.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.DownloadArtifact(context.Background(), a.ID, infrahub.Target{})
	wantReason(t, err, infrahub.ErrArtifactNotFound, infrahub.ReasonArtifactNotFound)
}

func TestQueryErrors(t *testing.T) {
	e, url := start(t, emu.Options{})
	c := newClient(t, infrahub.Config{URL: url})
	ctx := context.Background()

	e.FailQuery(emu.DefaultQuery, "Cannot query field 'CoreArtefact'", "second problem")
	_, err := c.QueryArtifacts(ctx, "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrQueryFailed, infrahub.ReasonQueryFailed)
	if msgs := infrahub.Messages(err); !slices.Equal(msgs, []string{"Cannot query field 'CoreArtefact'", "second problem"}) {
		t.Errorf("messages = %q", msgs)
	}
	if !strings.Contains(err.Error(), "CoreArtefact") {
		t.Errorf("error text lacks the GraphQL message: %q", err)
	}
	e.FailQuery(emu.DefaultQuery)

	_, err = c.QueryArtifacts(ctx, "NoSuchQuery", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrQueryNotFound, infrahub.ReasonQueryNotFound)

	// A 502 without a GraphQL errors list is a proxy, not a query error.
	e.SetFault(emu.ClassQuery, emu.Fault{Kind: emu.FaultStatus, Status: http.StatusBadGateway, Times: 1})
	_, err = c.QueryArtifacts(ctx, "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrUnavailable, infrahub.ReasonUnavailable)

	e.AddQuery("Custom")
	if _, err := c.QueryArtifacts(ctx, "Custom", emu.SampleArtifactName, infrahub.Target{}); err != nil {
		t.Errorf("configured query: %v", err)
	}
}

func TestDownload(t *testing.T) {
	e, url := start(t, emu.Options{})
	ctx := context.Background()
	c := newClient(t, infrahub.Config{URL: url, MaxBodyBytes: 16})
	small, _ := e.AddArtifact("", "Small", "", []byte("0123456789abcdef")) // exactly the limit
	big, _ := e.AddArtifact("", "Big", "", []byte("0123456789abcdefX"))
	got, err := c.DownloadArtifact(ctx, small.ID, infrahub.Target{})
	if err != nil || string(got.Data) != "0123456789abcdef" || got.ContentType != emu.DefaultContentType {
		t.Fatalf("download at the limit: %v %+v", err, got)
	}
	_, err = c.DownloadArtifact(ctx, big.ID, infrahub.Target{})
	wantReason(t, err, infrahub.ErrTooLarge, infrahub.ReasonArtifactTooLarge)
	_, err = c.DownloadArtifact(ctx, "00000000-0000-4000-8000-000000000000", infrahub.Target{})
	wantReason(t, err, infrahub.ErrArtifactNotFound, infrahub.ReasonArtifactNotFound)
	_, err = c.DownloadArtifact(ctx, "../../api/auth/login", infrahub.Target{})
	wantReason(t, err, infrahub.ErrArtifactNotFound, infrahub.ReasonArtifactNotFound)

	fx := newClient(t, infrahub.Config{URL: url})
	arts := query(t, fx, infrahub.Target{Branch: emu.SampleBranch})
	body, err := fx.DownloadArtifact(ctx, arts[0].ID, infrahub.Target{Branch: emu.SampleBranch})
	if err != nil || !strings.Contains(string(body.Data), emu.SampleBranch) {
		t.Errorf("branch download: %v %q", err, body)
	}
	multi, err := fx.DownloadArtifact(ctx, arts[1].ID, infrahub.Target{})
	if err != nil || strings.Count(string(multi.Data), "\n---\n") != 1 {
		t.Errorf("multi-document artifact: %v %q", err, multi)
	}
}

func TestFaultsMapToTypedErrorsWithinTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		fault  emu.Fault
		class  emu.Class
		kind   error
		reason string
	}{
		{emu.Fault{Kind: emu.FaultLatency, Latency: 5 * time.Second}, emu.ClassQuery, infrahub.ErrTimeout, infrahub.ReasonTimeout},
		{emu.Fault{Kind: emu.FaultHang}, emu.ClassQuery, infrahub.ErrTimeout, infrahub.ReasonTimeout},
		{emu.Fault{Kind: emu.FaultHang}, emu.ClassAuth, infrahub.ErrTimeout, infrahub.ReasonTimeout},
		{emu.Fault{Kind: emu.FaultHang}, emu.ClassArtifact, infrahub.ErrTimeout, infrahub.ReasonTimeout},
		{emu.Fault{Kind: emu.FaultStatus, Status: 503}, emu.ClassQuery, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
		{emu.Fault{Kind: emu.FaultStatus, Status: 500}, emu.ClassAuth, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
		{emu.Fault{Kind: emu.FaultStatus, Status: 504}, emu.ClassArtifact, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
		{emu.Fault{Kind: emu.FaultDrop}, emu.ClassQuery, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
		{emu.Fault{Kind: emu.FaultDrop}, emu.ClassAll, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
		{emu.Fault{Kind: emu.FaultDrop}, emu.ClassArtifact, infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
	}
	for _, tc := range tests {
		t.Run(string(tc.fault.Kind)+"/"+string(tc.class), func(t *testing.T) {
			t.Parallel()
			e, url := start(t, emu.Options{})
			c := newClient(t, infrahub.Config{URL: url, Timeout: timeout})
			ctx := context.Background()
			arts := query(t, c, infrahub.Target{}) // logged in, id known
			if tc.class == emu.ClassAuth {
				e.RevokeSessions() // force a login through the faulted endpoint
			}
			e.SetFault(tc.class, tc.fault)
			begin := time.Now()
			var err error
			if tc.class == emu.ClassArtifact {
				_, err = c.DownloadArtifact(ctx, arts[0].ID, infrahub.Target{})
			} else {
				_, err = c.QueryArtifacts(ctx, "", emu.SampleArtifactName, infrahub.Target{})
			}
			elapsed := time.Since(begin)
			wantReason(t, err, tc.kind, tc.reason)
			// A 401 retry or the transport's one retry of an idempotent GET may
			// double it; it must never approach the fault's own length.
			if elapsed > 3*timeout+time.Second {
				t.Errorf("took %v with a %v timeout", elapsed, timeout)
			}
			e.ClearFaults()
			if _, err := c.QueryArtifacts(ctx, "", emu.SampleArtifactName, infrahub.Target{}); err != nil {
				t.Errorf("after clearing the fault: %v", err)
			}
		})
	}
}

func TestCallerCancellation(t *testing.T) {
	e, url := start(t, emu.Options{})
	c := newClient(t, infrahub.Config{URL: url, Timeout: 10 * time.Second})
	query(t, c, infrahub.Target{})
	e.SetFault(emu.ClassAll, emu.Fault{Kind: emu.FaultHang})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.QueryArtifacts(ctx, "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrCanceled, infrahub.ReasonCanceled)

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.QueryArtifacts(ctx, "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrTimeout, infrahub.ReasonTimeout)
}

func TestUnavailableWhenNothingListens(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := newClient(t, infrahub.Config{URL: url})
	_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrUnavailable, infrahub.ReasonUnavailable)
}

func TestTLS(t *testing.T) {
	e := emu.New(emu.Options{})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshake is expected
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	c := newClient(t, infrahub.Config{URL: srv.URL, CABundle: caPEM})
	if got := len(query(t, c, infrahub.Target{})); got != 2 {
		t.Errorf("with CA bundle: %d artifacts", got)
	}
	c = newClient(t, infrahub.Config{URL: srv.URL})
	_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{})
	wantReason(t, err, infrahub.ErrTLS, infrahub.ReasonTLSError)

	c = newClient(t, infrahub.Config{URL: srv.URL, Insecure: true})
	if got := len(query(t, c, infrahub.Target{})); got != 2 {
		t.Errorf("insecure: %d artifacts", got)
	}
	_, err = infrahub.New(infrahub.Config{URL: srv.URL, APIToken: "x", CABundle: []byte("not PEM")})
	wantReason(t, err, infrahub.ErrInvalidConfig, infrahub.ReasonInvalidConfig)
}

func TestBaseURLWithPathPrefix(t *testing.T) {
	e := emu.New(emu.Options{})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/infrahub", e))
	defer srv.Close()
	c := newClient(t, infrahub.Config{URL: srv.URL + "/infrahub/"})
	if got := len(query(t, c, infrahub.Target{})); got != 2 {
		t.Errorf("%d artifacts", got)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  infrahub.Config
	}{
		{"no URL", infrahub.Config{APIToken: "x"}},
		{"relative URL", infrahub.Config{URL: "infrahub.local", APIToken: "x"}},
		{"ftp URL", infrahub.Config{URL: "ftp://infrahub.local", APIToken: "x"}},
		{"no credentials", infrahub.Config{URL: "http://infrahub.local"}},
		{"password only", infrahub.Config{URL: "http://infrahub.local", Password: "p"}},
	}
	for _, tc := range tests {
		_, err := infrahub.New(tc.cfg)
		if infrahub.Reason(err) != infrahub.ReasonInvalidConfig {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	s := infrahub.Config{URL: "http://x", Username: "u", Password: "hunter2", APIToken: "tok123"}.String()
	if strings.Contains(s, "hunter2") || strings.Contains(s, "tok123") {
		t.Errorf("Config.String leaks secrets: %s", s)
	}
}

func TestCache(t *testing.T) {
	var cache infrahub.Cache
	cfg := infrahub.Config{URL: "http://infrahub.local", Username: "admin", Password: "a"}
	c1, err := cache.Get(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := cache.Get(cfg); c2 != c1 {
		t.Error("same config: different client")
	}
	cfg.Password = "rotated"
	c3, _ := cache.Get(cfg)
	if c3 == c1 || cache.Len() != 1 {
		t.Errorf("rotated password: reused=%v len=%d", c3 == c1, cache.Len())
	}
	if _, err := cache.Get(infrahub.Config{URL: "http://infrahub.local", APIToken: "t"}); err != nil || cache.Len() != 2 {
		t.Errorf("token identity: %v len=%d", err, cache.Len())
	}
}

func TestReasonHelpers(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("x"), infrahub.ReasonUnknown},
		{context.DeadlineExceeded, infrahub.ReasonTimeout},
		{&infrahub.Error{Kind: infrahub.ErrQueryFailed}, infrahub.ReasonQueryFailed},
		{errors.Join(errors.New("ctx"), &infrahub.Error{Kind: infrahub.ErrBadCredentials}), infrahub.ReasonAuthenticationFailed},
		{infrahub.ErrUnavailable, infrahub.ReasonUnavailable},
	}
	for _, tc := range tests {
		if got := infrahub.Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// #16 scenario 8, credentials: a redirect to another host is refused before anything is sent
// there (net/http would strip Authorization, not X-INFRAHUB-KEY, and a 307/308 sends the login
// body again); a redirect within the configured host is followed.
func TestCredentialsNeverFollowARedirectToAnotherHost(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" key="+r.Header.Get("X-INFRAHUB-KEY")+" body="+string(body))
		mu.Unlock()
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	t.Cleanup(evil.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	for _, cfg := range []infrahub.Config{
		{URL: redirector.URL, APIToken: "s3cr3t"},
		{URL: redirector.URL, Username: "admin", Password: "pa55word"},
	} {
		c := newClient(t, cfg)
		_, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{})
		wantReason(t, err, infrahub.ErrRedirectRefused, infrahub.ReasonRedirectRefused)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Fatalf("requests reached the other host: %q", seen)
	}

	// Within the host: /moved/... -> /... on the same server.
	e := emu.New(emu.Options{})
	mux := http.NewServeMux()
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.TrimPrefix(r.URL.Path, "/moved"), http.StatusPermanentRedirect)
	})
	mux.Handle("/", e)
	same := httptest.NewServer(mux)
	t.Cleanup(same.Close)
	c := newClient(t, infrahub.Config{URL: same.URL + "/moved", Username: emu.DefaultUsername, Password: emu.DefaultPassword})
	if _, err := c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{}); err != nil {
		t.Fatalf("same-host redirect: %v", err)
	}
}

// An answer whose count disagrees with its edges is refused, whatever the edges hold: a short
// answer must not look like artifacts that were deleted.
func TestQueryCountMustMatchEdges(t *testing.T) {
	e, url := start(t, emu.Options{})
	c := newClient(t, infrahub.Config{URL: url})
	if got := query(t, c, infrahub.Target{}); len(got) != 2 {
		t.Fatalf("complete answer: %d artifacts", len(got))
	}
	for _, drop := range []int{1, 2} {
		e.DropEdges(drop)
		arts, err := c.QueryArtifacts(context.Background(), "", emu.SampleArtifactName, infrahub.Target{})
		wantReason(t, err, infrahub.ErrIncompleteResult, infrahub.ReasonIncompleteResult)
		if arts != nil || !strings.Contains(err.Error(), "count 2") {
			t.Errorf("drop %d: %+v, %v", drop, arts, err)
		}
	}
}
