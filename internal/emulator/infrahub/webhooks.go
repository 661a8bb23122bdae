package infrahub

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/infrahub/webhook"
)

// Artifact events, as Infrahub names them.
const (
	EventArtifactCreated = "infrahub.artifact.created" // an artifact generated for the first time
	EventArtifactUpdated = "infrahub.artifact.updated" // its checksum changed
)

// A StandardWebhook's event_type and branch_scope values.
const (
	EventTypeAll       = "all"
	BranchScopeAll     = "all_branches"
	BranchScopeDefault = "default_branch"
	BranchScopeOther   = "other_branches"
)

const (
	// webhookAttempts is one send and the three retries of Infrahub's webhook-send task
	// (retries=3, no delay between them).
	webhookAttempts = 4
	// webhookTimeout frees a sender from a target that never answers.
	webhookTimeout = 10 * time.Second
	// redeliverSenders and redeliverQueue bound what a burst costs the emulator: a few
	// connections and a short queue, however many deliveries were asked for.
	redeliverSenders = 8
	redeliverQueue   = 64
	// maxRedeliver bounds one Redeliver call over HTTP.
	maxRedeliver = 1_000_000
)

// Webhook is a CoreStandardWebhook: where and how Infrahub posts its events.
type Webhook struct {
	URL       string `json:"url"`
	SharedKey string `json:"shared_key"`
	// EventType is EventTypeAll ("" means it) or one event name, e.g. EventArtifactUpdated.
	EventType string `json:"event_type,omitempty"`
	// BranchScope is BranchScopeAll ("" means it), BranchScopeDefault or BranchScopeOther.
	BranchScope string `json:"branch_scope,omitempty"`
	// ValidateCertificates checks an https target's certificate; false skips the check, as
	// Infrahub does when the attribute is unset.
	ValidateCertificates bool `json:"validate_certificates,omitempty"`
}

func (w *Webhook) normalize() error {
	if w.EventType == "" {
		w.EventType = EventTypeAll
	}
	if w.BranchScope == "" {
		w.BranchScope = BranchScopeAll
	}
	switch w.BranchScope {
	case BranchScopeAll, BranchScopeDefault, BranchScopeOther:
	default:
		return fmt.Errorf("unknown branch_scope %q (%s, %s, %s)", w.BranchScope, BranchScopeAll, BranchScopeDefault, BranchScopeOther)
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook url %q is not an http(s) URL", w.URL)
	}
	return nil
}

func (w Webhook) matches(ev *artifactEvent) bool {
	if w.EventType != EventTypeAll && w.EventType != ev.name {
		return false
	}
	switch w.BranchScope {
	case BranchScopeDefault:
		return ev.branch == MainBranch
	case BranchScopeOther:
		return ev.branch != MainBranch
	}
	return true
}

// WebhookDelivery is the outcome of one event sent to one webhook, retries included.
type WebhookDelivery struct {
	WebhookID string `json:"webhook_id"`
	EventID   string `json:"event_id"`
	// MessageID is the webhook-id header of the last attempt: Infrahub signs each attempt
	// afresh, with a new message id and timestamp.
	MessageID string `json:"message_id"`
	Event     string `json:"event"`
	NodeID    string `json:"node_id"`
	Checksum  string `json:"checksum"`
	Status    int    `json:"status,omitempty"` // of the last attempt that got an answer
	Error     string `json:"error,omitempty"`  // of the last attempt, when it got none
	Attempts  int    `json:"attempts"`
	// Redelivery marks a copy sent by Redeliver.
	Redelivery bool `json:"redelivery,omitempty"`
}

// OK reports whether the target accepted the delivery.
func (d WebhookDelivery) OK() bool { return d.Error == "" && d.Status/100 == 2 }

// artifactEvent is one event, rendered once for every webhook it goes to.
type artifactEvent struct {
	id, name, branch, nodeID, checksum string
	body                               []byte
}

// The body in Infrahub's key order: the event's data, then its context.
type eventBody struct {
	Data      eventData `json:"data"`
	ID        string    `json:"id"`
	Branch    string    `json:"branch"`
	AccountID *string   `json:"account_id"`
	OccuredAt string    `json:"occured_at"` // sic, as Infrahub spells it
	Event     string    `json:"event"`
}

type eventData struct {
	NodeID               string  `json:"node_id"`
	ArtifactDefinitionID string  `json:"artifact_definition_id"`
	TargetID             string  `json:"target_id"`
	TargetKind           string  `json:"target_kind"`
	Checksum             string  `json:"checksum"`
	ChecksumPrevious     *string `json:"checksum_previous"`
	StorageID            string  `json:"storage_id"`
	StorageIDPrevious    *string `json:"storage_id_previous"`
}

func newArtifactEvent(a Artifact, prev *Artifact) *artifactEvent {
	b := eventBody{
		Data: eventData{
			NodeID:               a.ID,
			ArtifactDefinitionID: a.DefinitionID,
			TargetID:             a.TargetID,
			TargetKind:           a.TargetKind,
			Checksum:             a.Checksum,
			StorageID:            a.StorageID,
		},
		ID:        newUUID(),
		Branch:    a.Branch,
		OccuredAt: pythonISO(a.UpdatedAt),
		Event:     EventArtifactCreated,
	}
	if prev != nil {
		b.Event = EventArtifactUpdated
		b.Data.ChecksumPrevious, b.Data.StorageIDPrevious = &prev.Checksum, &prev.StorageID
	}
	return &artifactEvent{id: b.ID, name: b.Event, branch: b.Branch, nodeID: a.ID, checksum: a.Checksum, body: httpxJSON(b)}
}

// httpxJSON encodes v as httpx sends a json= body: compact, UTF-8 unescaped, no HTML escaping.
func httpxJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("infrahub emulator: encoding an event: %v", err)) // plain structs of strings cannot fail
	}
	return unescapeLineSeparators(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// unescapeLineSeparators undoes the one escape Go's encoder makes that Python's
// ensure_ascii=False does not: U+2028 and U+2029 go raw.
func unescapeLineSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if esc := string(b[i:min(i+6, len(b))]); esc == `\u2028` || esc == `\u2029` {
			out = append(out, string(rune(0x2028+int(esc[5]-'8')))...)
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1]) // an escape is two bytes at least: never split one
		i++
	}
	return out
}

// pythonISO formats t as Python's datetime.isoformat() of an aware UTC time: microseconds,
// dropped when zero, and +00:00.
func pythonISO(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// hook is a registered webhook and its live events not yet sent.
type hook struct {
	id      string
	w       Webhook
	queue   []*artifactEvent
	sending bool // a goroutine drains queue; one at a time keeps events in order
}

type redelivery struct {
	id string
	w  Webhook
	ev *artifactEvent
}

// webhooks sends artifact events. Live events go out one at a time per webhook, in order;
// redeliveries go through a fixed pool of senders fed from a bounded queue.
type webhooks struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// verify and insecure are shared by every sender, so a burst reuses connections.
	verify, insecure *http.Client

	jobs chan redelivery
	pool sync.Once

	mu      sync.Mutex
	closed  bool
	hooks   map[string]*hook
	last    *artifactEvent // what Redeliver sends
	log     []WebhookDelivery
	max     int
	total   int
	changed chan struct{} // closed and replaced on every delivery, for WaitDeliveries
}

func newWebhooks(maxLog int) *webhooks {
	ctx, cancel := context.WithCancel(context.Background())
	client := func(skipVerify bool) *http.Client {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = redeliverSenders * 2
		if skipVerify {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the webhook asked not to validate
		}
		return &http.Client{
			Transport: t,
			Timeout:   webhookTimeout,
			// httpx follows no redirect and raise_for_status fails a 3xx.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &webhooks{
		ctx:      ctx,
		cancel:   cancel,
		verify:   client(false),
		insecure: client(true),
		jobs:     make(chan redelivery, redeliverQueue),
		hooks:    map[string]*hook{},
		max:      maxLog,
		changed:  make(chan struct{}),
	}
}

// close stops every sender, aborting requests in flight, and waits for them.
func (h *webhooks) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	h.verify.CloseIdleConnections()
	h.insecure.CloseIdleConnections()
}

// artifactChanged queues the event of a created or updated artifact for every matching webhook.
func (h *webhooks) artifactChanged(a Artifact, prev *Artifact) {
	ev := newArtifactEvent(a, prev)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = ev
	if h.closed {
		return
	}
	for _, k := range h.hooks {
		if !k.w.matches(ev) {
			continue
		}
		k.queue = append(k.queue, ev)
		if !k.sending {
			k.sending = true
			h.wg.Add(1)
			go h.drain(k)
		}
	}
}

func (h *webhooks) drain(k *hook) {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		if len(k.queue) == 0 || h.ctx.Err() != nil {
			k.sending = false
			h.mu.Unlock()
			return
		}
		ev := k.queue[0]
		k.queue[0] = nil
		k.queue = k.queue[1:]
		h.mu.Unlock()
		h.send(k.id, k.w, ev, false)
	}
}

func (h *webhooks) startPool() {
	h.pool.Do(func() {
		for range redeliverSenders {
			h.wg.Go(func() {
				for {
					select {
					case j := <-h.jobs:
						h.send(j.id, j.w, j.ev, true)
					case <-h.ctx.Done():
						return
					}
				}
			})
		}
	})
}

// send posts ev to w as Infrahub does, retrying a failure, and records the outcome.
func (h *webhooks) send(id string, w Webhook, ev *artifactEvent, redelivered bool) {
	d := WebhookDelivery{WebhookID: id, EventID: ev.id, Event: ev.name, NodeID: ev.nodeID, Checksum: ev.checksum, Redelivery: redelivered}
	client := h.verify
	if !w.ValidateCertificates {
		client = h.insecure
	}
	for d.Attempts < webhookAttempts && h.ctx.Err() == nil {
		d.Attempts++
		d.MessageID = "msg_" + hex.EncodeToString(uuid4())
		d.Status, d.Error = 0, ""
		req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, w.URL, bytes.NewReader(ev.body))
		if err != nil {
			d.Error = err.Error()
			continue
		}
		if err := webhook.SignAsInfrahub(req.Header, []byte(w.SharedKey), d.MessageID, time.Now(), ev.body); err != nil {
			d.Error = err.Error()
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			d.Error = err.Error()
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
		_ = resp.Body.Close()
		d.Status = resp.StatusCode
		if d.Status/100 == 2 {
			break
		}
	}
	if d.Attempts == 0 {
		d.Error = "emulator closed before the first attempt"
	}
	h.record(d)
}

func (h *webhooks) record(d WebhookDelivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A ring: a flood of redeliveries keeps the latest max and costs no copying.
	if len(h.log) < h.max {
		h.log = append(h.log, d)
	} else {
		h.log[h.total%h.max] = d
	}
	h.total++
	close(h.changed)
	h.changed = make(chan struct{})
}

// ---- Go API: webhooks ----

// ErrNoEvent is returned by Redeliver before any artifact event happened.
var ErrNoEvent = errors.New("no artifact event yet")

// AddWebhook registers a standard webhook and returns its id. Artifact events from now on
// that match its event type and branch scope are posted to it in the background. It panics
// on an unknown branch scope or a URL that is not http(s), as a test's mistake.
func (e *Emulator) AddWebhook(w Webhook) (id string) {
	if err := w.normalize(); err != nil {
		panic("infrahub emulator: AddWebhook: " + err.Error())
	}
	return e.hooks.add(w)
}

func (h *webhooks) add(w Webhook) string {
	id := newUUID()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hooks[id] = &hook{id: id, w: w}
	return id
}

// RemoveWebhook unregisters a webhook and reports whether it existed. Events already queued
// for it are still sent, as flows Infrahub already triggered still run.
func (e *Emulator) RemoveWebhook(id string) bool {
	h := e.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.hooks[id]
	delete(h.hooks, id)
	return ok
}

// WebhookDeliveries lists the latest deliveries (at most Options.MaxLogEntries), oldest first,
// and how many were made since the emulator started.
func (e *Emulator) WebhookDeliveries() ([]WebhookDelivery, int) {
	h := e.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]WebhookDelivery, 0, len(h.log))
	if h.total > len(h.log) { // the ring has wrapped: its oldest entry is the next to write
		i := h.total % h.max
		out = append(out, h.log[i:]...)
		return append(out, h.log[:i]...), h.total
	}
	return append(out, h.log...), h.total
}

// WaitDeliveries waits until n deliveries have finished (counted since the emulator started; a
// delivery counts once, when its last attempt is done), or ctx ends, or the emulator is closed.
func (e *Emulator) WaitDeliveries(ctx context.Context, n int) error {
	h := e.hooks
	for {
		h.mu.Lock()
		total, changed := h.total, h.changed
		h.mu.Unlock()
		if total >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d webhook deliveries: %w", total, n, ctx.Err())
		case <-h.ctx.Done():
			return fmt.Errorf("%d of %d webhook deliveries: emulator closed", total, n)
		}
	}
}

// Redeliver sends the most recent artifact event n more times to every webhook it matches,
// each time as a delivery of its own with a fresh message id and timestamp: a flood such as
// Infrahub regenerating the same artifacts many times. It returns at once with the number of
// deliveries queued; WaitDeliveries waits for them.
func (e *Emulator) Redeliver(n int) (int, error) {
	h := e.hooks
	h.mu.Lock()
	defer h.mu.Unlock() // held while starting senders, so that none starts after close
	if h.closed {
		return 0, errors.New("emulator closed")
	}
	ev := h.last
	if ev == nil {
		return 0, ErrNoEvent
	}
	var to []redelivery
	for _, k := range h.hooks {
		if k.w.matches(ev) {
			to = append(to, redelivery{id: k.id, w: k.w, ev: ev})
		}
	}
	if n <= 0 || len(to) == 0 {
		return 0, nil
	}
	h.startPool()
	// The queue is bounded, so the copies are made as senders free up, not all at once.
	h.wg.Go(func() {
		for range n {
			for _, j := range to {
				select {
				case h.jobs <- j:
				case <-h.ctx.Done():
					return
				}
			}
		}
	})
	return n * len(to), nil
}

// uuid4 returns a random (version 4) UUID's 16 bytes.
func uuid4() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

func newUUID() string {
	x := hex.EncodeToString(uuid4())
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
