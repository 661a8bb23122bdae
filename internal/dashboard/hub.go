package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"
)

// Collections of the snapshot and the batches, keyed as the informers' stores are: a name, or
// "<namespace>/<name>" for namespaced kinds (claims, maintenances).
const (
	collServers      = "servers"
	collClaims       = "claims"
	collMaintenances = "maintenances"
	collSyncs        = "syncs"
)

var collections = []string{collServers, collClaims, collMaintenances, collSyncs}

// Delta is one collection's changes in a batch: items to add or replace, keys removed.
type Delta struct {
	Upsert []json.RawMessage `json:"upsert,omitempty"`
	Delete []string          `json:"delete,omitempty"`
}

// Batch is one stream message after the snapshot.
type Batch struct {
	Seq     uint64            `json:"seq"`
	Changes map[string]*Delta `json:"changes,omitempty"`
	// Access is every kind's access, sent whole when one changed.
	Access map[string]string `json:"access,omitempty"`
}

// Snapshot is the whole view: the first stream message and GET /api/snapshot.
type Snapshot struct {
	Seq   uint64                       `json:"seq"`
	Items map[string][]json.RawMessage `json:"items"`
	// Access per watched kind: "loading", "ok", "forbidden" (the user may not list it) or
	// "error".
	Access     map[string]string `json:"access"`
	Actions    bool              `json:"actions"`
	PowerVerbs []string          `json:"powerVerbs,omitempty"`
	// Auth, when actions need a bearer token, is what the page asks the user for once.
	Auth string `json:"auth,omitempty"`
}

// hub holds the current items as JSON and fans their changes out to subscribers in batches: a
// change marks its key; a flush sends each marked key's current value (or its deletion). So a
// subscriber whose snapshot already holds a change gets it again, harmlessly, and none is lost.
type hub struct {
	interval time.Duration
	// buffer is how many batches a subscriber may lag before it is dropped (it reconnects and
	// starts again from a snapshot).
	buffer int

	mu          sync.Mutex
	seq         uint64
	items       map[string]map[string]json.RawMessage
	pending     map[string]map[string]struct{}
	access      map[string]string
	accessDirty bool
	subs        map[*subscriber]struct{}
	closed      bool
	wake        chan struct{}
}

type subscriber struct {
	ch chan []byte // closed when dropped or the hub stops
}

func newHub(interval time.Duration) *hub {
	h := &hub{interval: interval, buffer: 64, items: map[string]map[string]json.RawMessage{},
		pending: map[string]map[string]struct{}{}, access: map[string]string{},
		subs: map[*subscriber]struct{}{}, wake: make(chan struct{}, 1)}
	for _, c := range collections {
		h.items[c] = map[string]json.RawMessage{}
		h.pending[c] = map[string]struct{}{}
	}
	return h
}

func (h *hub) mark(coll, key string) {
	h.pending[coll][key] = struct{}{}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// set stores an item; an unchanged one sends nothing.
func (h *hub) set(coll, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.items[coll][key]; ok && bytes.Equal(old, raw) {
		return nil
	}
	h.items[coll][key] = raw
	h.mark(coll, key)
	return nil
}

func (h *hub) del(coll, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.items[coll][key]; !ok {
		return
	}
	delete(h.items[coll], key)
	h.mark(coll, key)
}

func (h *hub) get(coll, key string) (json.RawMessage, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	raw, ok := h.items[coll][key]
	return raw, ok
}

func (h *hub) setAccess(kind, state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.access[kind] == state {
		return
	}
	h.access[kind] = state
	h.accessDirty = true
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hub) accessOf(kind string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.access[kind]
}

// snapshotLocked returns every item, sorted by key.
func (h *hub) snapshotLocked() Snapshot {
	s := Snapshot{Seq: h.seq, Items: map[string][]json.RawMessage{}, Access: maps.Clone(h.access)}
	for _, c := range collections {
		keys := slices.Sorted(maps.Keys(h.items[c]))
		list := make([]json.RawMessage, 0, len(keys))
		for _, k := range keys {
			list = append(list, h.items[c][k])
		}
		s.Items[c] = list
	}
	return s
}

func (h *hub) snapshot() Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshotLocked()
}

// subscribe returns the current snapshot and a subscriber that gets every batch after it.
func (h *hub) subscribe() (Snapshot, *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sub := &subscriber{ch: make(chan []byte, h.buffer)}
	if h.closed {
		close(sub.ch)
	} else {
		h.subs[sub] = struct{}{}
	}
	return h.snapshotLocked(), sub
}

func (h *hub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		close(sub.ch)
	}
}

// takeBatch collects the pending changes; nil when there are none.
func (h *hub) takeBatch() *Batch {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &Batch{Changes: map[string]*Delta{}}
	for _, c := range collections {
		if len(h.pending[c]) == 0 {
			continue
		}
		d := &Delta{}
		for _, k := range slices.Sorted(maps.Keys(h.pending[c])) {
			if raw, ok := h.items[c][k]; ok {
				d.Upsert = append(d.Upsert, raw)
			} else {
				d.Delete = append(d.Delete, k)
			}
		}
		b.Changes[c] = d
		h.pending[c] = map[string]struct{}{}
	}
	if h.accessDirty {
		b.Access = maps.Clone(h.access)
		h.accessDirty = false
	}
	if len(b.Changes) == 0 && b.Access == nil {
		return nil
	}
	h.seq++
	b.Seq = h.seq
	return b
}

// flush sends the pending changes to every subscriber, dropping those that lag a whole buffer
// behind rather than letting one slow page hold the others.
func (h *hub) flush() (*Batch, int) {
	b := h.takeBatch()
	if b == nil {
		return nil, 0
	}
	msg, err := json.Marshal(b)
	if err != nil { // only RawMessages and strings: cannot happen
		return nil, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		select {
		case sub.ch <- msg:
		default:
			delete(h.subs, sub)
			close(sub.ch)
		}
	}
	return b, len(msg)
}

// run flushes at most once per interval until ctx ends, then ends every subscription.
func (h *hub) run(ctx context.Context) {
	defer func() {
		h.mu.Lock()
		h.closed = true
		for sub := range h.subs {
			delete(h.subs, sub)
			close(sub.ch)
		}
		h.mu.Unlock()
	}()
	pause := time.NewTimer(h.interval)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		}
		h.flush()
		pause.Reset(h.interval)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}
