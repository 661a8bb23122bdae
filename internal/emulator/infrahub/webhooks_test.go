package infrahub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/infrahub/webhook"
)

const testKey = "a-shared-key"

type received struct {
	path   string
	header http.Header
	body   []byte
}

// receiver is a webhook target that records what it gets and answers status(i) to the i-th
// request (0-based); nil answers 200.
type receiver struct {
	srv    *httptest.Server
	status func(i int) int

	mu       sync.Mutex
	got      []received
	inFlight int
	peak     int
}

func newReceiver(t *testing.T, status func(i int) int) *receiver {
	t.Helper()
	r := &receiver{status: status}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		i := len(r.got)
		r.got = append(r.got, received{path: req.URL.Path, header: req.Header.Clone(), body: body})
		r.inFlight++
		r.peak = max(r.peak, r.inFlight)
		r.mu.Unlock()
		defer func() { r.mu.Lock(); r.inFlight--; r.mu.Unlock() }()
		code := http.StatusOK
		if r.status != nil {
			code = r.status(i)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) peakInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// newEmulator returns an emulator closed (its senders stopped) before the receivers are.
func newEmulator(t *testing.T) *Emulator {
	e := New(Options{})
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func wait(t *testing.T, e *Emulator, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.WaitDeliveries(ctx, n); err != nil {
		ds, _ := e.WebhookDeliveries()
		t.Fatalf("%v; deliveries: %+v", err, ds)
	}
}

type sentEvent struct {
	Data struct {
		NodeID               string  `json:"node_id"`
		ArtifactDefinitionID string  `json:"artifact_definition_id"`
		TargetID             string  `json:"target_id"`
		TargetKind           string  `json:"target_kind"`
		Checksum             string  `json:"checksum"`
		ChecksumPrevious     *string `json:"checksum_previous"`
		StorageID            string  `json:"storage_id"`
		StorageIDPrevious    *string `json:"storage_id_previous"`
	} `json:"data"`
	ID        string  `json:"id"`
	Branch    string  `json:"branch"`
	AccountID *string `json:"account_id"`
	OccuredAt string  `json:"occured_at"`
	Event     string  `json:"event"`
}

func decodeEvent(t *testing.T, body []byte) sentEvent {
	t.Helper()
	var ev sentEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return ev
}

var (
	msgID  = regexp.MustCompile(`^msg_[0-9a-f]{32}$`)
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	isoRE  = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)
)

// A change's event reaches the target signed with the webhook's key, in Infrahub's body: its
// keys in Infrahub's order, compact, with nothing but the artifact's own values.
func TestWebhookSignedBodyAsInfrahubSendsIt(t *testing.T) {
	r := newReceiver(t, nil)
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: r.srv.URL + "/hook", SharedKey: testKey})
	a, err := e.AddArtifact("", "Webserver_Manifest", "", []byte("a: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, e, 1)
	got := r.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	req := got[0]
	if req.path != "/hook" || req.header.Get("Content-Type") != "application/json" || req.header.Get("Accept") != "application/json" {
		t.Errorf("path %s, headers %v", req.path, req.header)
	}
	if id := req.header.Get(webhook.HeaderID); !msgID.MatchString(id) {
		t.Errorf("webhook-id %q, want msg_ and 32 hex digits", id)
	}
	now := time.Now()
	if _, err := webhook.Verify(req.header, req.body, [][]byte{[]byte(testKey)}, now, time.Minute); err != nil {
		t.Errorf("verify with the shared key: %v", err)
	}
	if _, err := webhook.Verify(req.header, req.body, [][]byte{[]byte("another-key")}, now, time.Minute); !errors.Is(err, webhook.ErrBadSignature) {
		t.Errorf("verify with another key: %v, want ErrBadSignature", err)
	}

	ev := decodeEvent(t, req.body)
	if !uuidRE.MatchString(ev.ID) || !isoRE.MatchString(ev.OccuredAt) {
		t.Errorf("event id %q, occured_at %q", ev.ID, ev.OccuredAt)
	}
	if !uuidRE.MatchString(a.DefinitionID) || !uuidRE.MatchString(a.TargetID) || a.TargetKind != DefaultTargetKind {
		t.Errorf("artifact definition %q, target %q %q", a.DefinitionID, a.TargetID, a.TargetKind)
	}
	want := fmt.Sprintf(`{"data":{"node_id":%q,"artifact_definition_id":%q,"target_id":%q,"target_kind":%q,`+
		`"checksum":%q,"checksum_previous":null,"storage_id":%q,"storage_id_previous":null},`+
		`"id":%q,"branch":"main","account_id":null,"occured_at":%q,"event":"infrahub.artifact.created"}`,
		a.ID, a.DefinitionID, a.TargetID, a.TargetKind, a.Checksum, a.StorageID, ev.ID, ev.OccuredAt)
	if string(req.body) != want {
		t.Errorf("body:\n got %s\nwant %s", req.body, want)
	}
	if at, err := time.Parse("2006-01-02T15:04:05-07:00", ev.OccuredAt); err != nil || !at.Equal(a.UpdatedAt.Truncate(time.Microsecond)) {
		t.Errorf("occured_at %s (%v), want the change's time %s", ev.OccuredAt, err, a.UpdatedAt)
	}

	// Another artifact of the same name shares its definition, not its target.
	b, _ := e.AddArtifact("", "Webserver_Manifest", "", []byte("b: 1\n"))
	if b.DefinitionID != a.DefinitionID || b.TargetID == a.TargetID {
		t.Errorf("same name: definitions %s %s, targets %s %s", a.DefinitionID, b.DefinitionID, a.TargetID, b.TargetID)
	}
}

// The body is raw UTF-8 with no HTML escaping, as httpx sends it, and still verifies.
func TestWebhookBodyUnescaped(t *testing.T) {
	r := newReceiver(t, nil)
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
	kind := "Infra<Dévice>&\u2028\u2029\\u2028\"x"
	if _, err := e.Apply(Change{Name: "n", Content: []byte("x"), TargetKind: kind, TargetID: "t-1"}); err != nil {
		t.Fatal(err)
	}
	wait(t, e, 1)
	body := r.requests()[0].body
	if want := `"target_id":"t-1","target_kind":"Infra<Dévice>&` + "\u2028\u2029" + `\\u2028\"x"`; !bytes.Contains(body, []byte(want)) {
		t.Errorf("body %s\nwant it to contain %s", body, want)
	}
	if ev := decodeEvent(t, body); ev.Data.TargetKind != kind {
		t.Errorf("target_kind %q, want %q", ev.Data.TargetKind, kind)
	}
	if _, err := webhook.Verify(r.requests()[0].header, body, [][]byte{[]byte(testKey)}, time.Now(), time.Minute); err != nil {
		t.Errorf("verify: %v", err)
	}
}

// The first content of an artifact is created, a new checksum updated with the previous
// one, the same content nothing; each branch's changes are its own events.
func TestWebhookCreatedUpdatedAndPrevious(t *testing.T) {
	r := newReceiver(t, nil)
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
	v1, _ := e.AddArtifact("", "x", "", []byte("v1"))
	if _, err := e.UpdateArtifact("", v1.ID, []byte("v1")); err != nil { // same checksum: no event
		t.Fatal(err)
	}
	v2, _ := e.UpdateArtifact("", v1.ID, []byte("v2"))
	_ = e.AddBranch("dev")
	d1, _ := e.UpdateArtifact("dev", v1.ID, []byte("dev")) // the branch's own version of it
	if err := e.DeleteArtifact("", v1.ID); err != nil {    // no artifact event
		t.Fatal(err)
	}
	wait(t, e, 3)
	got := r.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	evs := make([]sentEvent, len(got))
	for i, g := range got {
		evs[i] = decodeEvent(t, g.body)
	}
	str := func(p *string) string {
		if p == nil {
			return "null"
		}
		return *p
	}
	want := []struct{ event, branch, checksum, previous, storagePrevious string }{
		{EventArtifactCreated, "main", v1.Checksum, "null", "null"},
		{EventArtifactUpdated, "main", v2.Checksum, v1.Checksum, v1.StorageID},
		{EventArtifactUpdated, "dev", d1.Checksum, v2.Checksum, v2.StorageID},
	}
	for i, w := range want {
		ev := evs[i]
		g := struct{ event, branch, checksum, previous, storagePrevious string }{
			ev.Event, ev.Branch, ev.Data.Checksum, str(ev.Data.ChecksumPrevious), str(ev.Data.StorageIDPrevious)}
		if g != w || ev.Data.NodeID != v1.ID {
			t.Errorf("event %d: %+v node %s, want %+v node %s", i, g, ev.Data.NodeID, w, v1.ID)
		}
	}
	if evs[0].ID == evs[1].ID || evs[1].ID == evs[2].ID {
		t.Errorf("events share ids: %s %s %s", evs[0].ID, evs[1].ID, evs[2].ID)
	}
	if total := countDeliveries(e); total != 3 {
		t.Errorf("%d deliveries, want 3", total)
	}
}

func countDeliveries(e *Emulator) int {
	_, total := e.WebhookDeliveries()
	return total
}

// Each webhook gets only the events its event type and branch scope select.
func TestWebhookFilters(t *testing.T) {
	r := newReceiver(t, nil)
	e := newEmulator(t)
	updated := e.AddWebhook(Webhook{URL: r.srv.URL + "/updated", SharedKey: testKey, EventType: EventArtifactUpdated})
	created := e.AddWebhook(Webhook{URL: r.srv.URL + "/created", SharedKey: testKey, EventType: EventArtifactCreated})
	onMain := e.AddWebhook(Webhook{URL: r.srv.URL + "/main", SharedKey: testKey, BranchScope: BranchScopeDefault})
	others := e.AddWebhook(Webhook{URL: r.srv.URL + "/others", SharedKey: testKey, BranchScope: BranchScopeOther})
	all := e.AddWebhook(Webhook{URL: r.srv.URL + "/all", SharedKey: testKey, EventType: EventTypeAll, BranchScope: BranchScopeAll})
	_ = e.AddBranch("dev")

	m1, _ := e.AddArtifact("", "m", "", []byte("m1"))     // created main
	m2, _ := e.UpdateArtifact("", m1.ID, []byte("m2"))    // updated main
	d1, _ := e.UpdateArtifact("dev", m1.ID, []byte("d1")) // updated dev
	n1, _ := e.AddArtifact("dev", "n", "", []byte("n1"))  // created dev
	// Each webhook's events leave in order, so when its last expected one has been delivered,
	// a wrong one before it would have been too.
	want := map[string][]string{
		updated: {m2.Checksum, d1.Checksum},
		created: {m1.Checksum, n1.Checksum},
		onMain:  {m1.Checksum, m2.Checksum},
		others:  {d1.Checksum, n1.Checksum},
		all:     {m1.Checksum, m2.Checksum, d1.Checksum, n1.Checksum},
	}
	wait(t, e, 12)
	ds, total := e.WebhookDeliveries()
	got := map[string][]string{}
	for _, d := range ds {
		got[d.WebhookID] = append(got[d.WebhookID], d.Checksum)
	}
	for id, w := range want {
		if fmt.Sprint(got[id]) != fmt.Sprint(w) {
			t.Errorf("webhook %s got %v, want %v", id, got[id], w)
		}
	}
	if total != 12 {
		t.Errorf("%d deliveries, want 12", total)
	}

	// A removed webhook gets nothing more.
	if !e.RemoveWebhook(all) || e.RemoveWebhook(all) {
		t.Error("RemoveWebhook: want true once, then false")
	}
	m3, _ := e.UpdateArtifact("", m1.ID, []byte("m3"))
	wait(t, e, 14) // updated and onMain
	for _, d := range deliveriesSince(e, 12) {
		if d.WebhookID == all || d.Checksum != m3.Checksum {
			t.Errorf("after removal: %+v", d)
		}
	}
}

func deliveriesSince(e *Emulator, n int) []WebhookDelivery {
	ds, total := e.WebhookDeliveries()
	return ds[len(ds)-(total-n):]
}

// Changes return while the target hangs; their events then leave in order.
func TestWebhookAsyncAndInOrder(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	r := newReceiver(t, func(int) int { <-release; return http.StatusOK })
	t.Cleanup(unblock) // before the receiver closes, which waits for its handlers
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
	a, _ := e.AddArtifact("", "x", "", []byte("0"))
	var sums []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sums = append(sums, a.Checksum)
		for i := 1; i < 20; i++ {
			u, err := e.UpdateArtifact("", a.ID, fmt.Appendf(nil, "%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			sums = append(sums, u.Checksum)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("changes blocked on a hanging webhook target")
	}
	if n := countDeliveries(e); n != 0 {
		t.Fatalf("%d deliveries finished while the target hangs", n)
	}
	unblock()
	wait(t, e, 20)
	got := r.requests()
	if len(got) != 20 {
		t.Fatalf("%d requests, want 20", len(got))
	}
	for i, g := range got {
		if c := decodeEvent(t, g.body).Data.Checksum; c != sums[i] {
			t.Fatalf("request %d carries checksum %s, want %s (out of order)", i, c, sums[i])
		}
	}
	if p := r.peakInFlight(); p != 1 {
		t.Errorf("%d requests at once to one webhook, want 1", p)
	}
}

// A failed send is retried, each attempt signed afresh, up to three retries.
func TestWebhookRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fails    int
		attempts int
		status   int
	}{
		{"two failures then success", 2, 3, http.StatusOK},
		{"always failing", 100, 4, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t, func(i int) int {
				if i < tc.fails {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			})
			e := newEmulator(t)
			hid := e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
			a, _ := e.AddArtifact("", "x", "", []byte("v"))
			wait(t, e, 1)
			ds, _ := e.WebhookDeliveries()
			d := ds[0]
			if d.Attempts != tc.attempts || d.Status != tc.status || d.WebhookID != hid || d.NodeID != a.ID || d.Checksum != a.Checksum || d.OK() != (tc.status == 200) {
				t.Errorf("delivery %+v, want %d attempts ending %d", d, tc.attempts, tc.status)
			}
			got := r.requests()
			if len(got) != tc.attempts {
				t.Fatalf("%d requests, want %d", len(got), tc.attempts)
			}
			ids := map[string]bool{}
			for _, g := range got {
				ids[g.header.Get(webhook.HeaderID)] = true
				if !bytes.Equal(g.body, got[0].body) {
					t.Errorf("a retry changed the body:\n%s\n%s", g.body, got[0].body)
				}
				if _, err := webhook.Verify(g.header, g.body, [][]byte{[]byte(testKey)}, time.Now(), time.Minute); err != nil {
					t.Errorf("retry does not verify: %v", err)
				}
			}
			if len(ids) != tc.attempts || d.MessageID != got[len(got)-1].header.Get(webhook.HeaderID) || d.EventID != decodeEvent(t, got[0].body).ID {
				t.Errorf("%d message ids over %d attempts; delivery %+v", len(ids), tc.attempts, d)
			}
		})
	}
}

// A target that cannot be reached is an error, retried like a failure.
func TestWebhookTransportError(t *testing.T) {
	r := newReceiver(t, nil)
	url := r.srv.URL
	r.srv.Close()
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: url, SharedKey: testKey})
	_, _ = e.AddArtifact("", "x", "", []byte("v"))
	wait(t, e, 1)
	ds, _ := e.WebhookDeliveries()
	if d := ds[0]; d.Attempts != 4 || d.Error == "" || d.Status != 0 || d.OK() {
		t.Errorf("delivery %+v, want 4 attempts ending in an error", d)
	}
}

// Redeliver sends the last event again and again, each copy its own signed delivery, through
// a few senders at once.
func TestRedeliver(t *testing.T) {
	// A slow target keeps every sender busy, so that more senders than the pool would show.
	r := newReceiver(t, func(int) int { time.Sleep(5 * time.Millisecond); return http.StatusOK })
	e := newEmulator(t)
	if _, err := e.Redeliver(1); !errors.Is(err, ErrNoEvent) {
		t.Errorf("Redeliver before any event: %v, want ErrNoEvent", err)
	}
	e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
	// The event is on main: a webhook for other branches gets no copy of it either.
	e.AddWebhook(Webhook{URL: r.srv.URL + "/other", SharedKey: testKey, BranchScope: BranchScopeOther})
	_, _ = e.AddArtifact("", "x", "", []byte("v"))
	wait(t, e, 1)
	n, err := e.Redeliver(100)
	if err != nil || n != 100 {
		t.Fatalf("Redeliver(100) = %d, %v", n, err)
	}
	wait(t, e, 101)
	got := r.requests()
	if len(got) != 101 {
		t.Fatalf("%d requests, want 101", len(got))
	}
	ids := map[string]bool{}
	for _, g := range got {
		ids[g.header.Get(webhook.HeaderID)] = true
		if g.path == "/other" {
			t.Fatal("a redelivery went to a webhook its event does not match")
		}
		if !bytes.Equal(g.body, got[0].body) {
			t.Fatalf("a redelivery is not the same event:\n%s\n%s", g.body, got[0].body)
		}
		if _, err := webhook.Verify(g.header, g.body, [][]byte{[]byte(testKey)}, time.Now(), time.Minute); err != nil {
			t.Fatalf("redelivery does not verify: %v", err)
		}
	}
	if len(ids) != 101 {
		t.Errorf("%d distinct message ids over 101 deliveries", len(ids))
	}
	redelivered := 0
	for _, d := range deliveriesSince(e, 1) {
		if d.Redelivery && d.OK() && d.Attempts == 1 {
			redelivered++
		}
	}
	if redelivered != 100 {
		t.Errorf("%d successful redeliveries recorded, want 100", redelivered)
	}
	if p := r.peakInFlight(); p > 8 || p < 2 { // a small pool: 8 at most, not one per copy
		t.Errorf("%d requests at once, want several, at most 8", p)
	}
}

// A flood of 10,000 deliveries goes out quickly and the log keeps its latest entries.
func TestRedeliverFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 10,000 requests")
	}
	r := newReceiver(t, nil)
	e := New(Options{MaxLogEntries: 1000})
	t.Cleanup(func() { _ = e.Close() })
	e.AddWebhook(Webhook{URL: r.srv.URL, SharedKey: testKey})
	_, _ = e.AddArtifact("", "x", "", []byte("v"))
	start := time.Now()
	if _, err := e.Redeliver(10_000); err != nil {
		t.Fatal(err)
	}
	wait(t, e, 10_001)
	t.Logf("10,001 deliveries in %v", time.Since(start))
	ds, total := e.WebhookDeliveries()
	if total != 10_001 || len(ds) != 1000 || len(r.requests()) != 10_001 {
		t.Errorf("total %d, log %d, requests %d", total, len(ds), len(r.requests()))
	}
	for _, d := range ds {
		if !d.OK() || !d.Redelivery {
			t.Fatalf("delivery %+v", d)
		}
	}
}

// Close stops the senders even while a target hangs.
func TestCloseStopsWebhookSenders(t *testing.T) {
	first := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // lets the server see the client hang up
		select {
		case first <- struct{}{}:
		default:
		}
		<-r.Context().Done() // hangs until the emulator gives up
	}))
	defer srv.Close()
	e := New(Options{})
	e.AddWebhook(Webhook{URL: srv.URL, SharedKey: testKey})
	_, _ = e.AddArtifact("", "x", "", []byte("v"))
	if _, err := e.Redeliver(50); err != nil {
		t.Fatal(err)
	}
	<-first
	done := make(chan struct{})
	go func() { _ = e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits on a hanging webhook target")
	}
	if err := e.WaitDeliveries(context.Background(), 1000); err == nil {
		t.Error("WaitDeliveries after Close: no error")
	}
	if _, err := e.Redeliver(1); err == nil {
		t.Error("Redeliver after Close: no error")
	}
}

// A redirect is a failure, as httpx follows none and raise_for_status refuses a 3xx.
func TestWebhookRedirectIsAFailure(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	e := newEmulator(t)
	e.AddWebhook(Webhook{URL: srv.URL + "/hook", SharedKey: testKey})
	_, _ = e.AddArtifact("", "x", "", []byte("v"))
	wait(t, e, 1)
	ds, _ := e.WebhookDeliveries()
	mu.Lock()
	defer mu.Unlock()
	if d := ds[0]; d.Attempts != 4 || d.Status != http.StatusTemporaryRedirect || paths["/elsewhere"] != 0 || paths["/hook"] != 4 {
		t.Errorf("delivery %+v, requests %v; want 4 attempts ending 307, none followed", d, paths)
	}
}
