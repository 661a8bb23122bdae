package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func decodeBatch(t testing.TB, msg []byte) Batch {
	t.Helper()
	var b Batch
	if err := json.Unmarshal(msg, &b); err != nil {
		t.Fatalf("batch %s: %v", msg, err)
	}
	return b
}

func names(raws []json.RawMessage) []string {
	var out []string
	for _, r := range raws {
		var s struct{ Name string }
		_ = json.Unmarshal(r, &s)
		out = append(out, s.Name)
	}
	return out
}

// Changes between two flushes reach a subscriber as one batch: repeated writes of a key
// coalesce, an unchanged value sends nothing, and a deletion is a key.
func TestHubBatching(t *testing.T) {
	h := newHub(time.Hour)
	_ = h.set(collServers, "a", Summary{Name: "a", State: "Initial"})
	snap, sub := h.subscribe()
	if got := names(snap.Items[collServers]); fmt.Sprint(got) != "[a]" {
		t.Fatalf("snapshot servers %v", got)
	}
	if b, _ := h.flush(); b == nil || fmt.Sprint(names(b.Changes[collServers].Upsert)) != "[a]" {
		t.Fatalf("first flush repeats the change a snapshot already holds (harmless): %+v", b)
	}
	<-sub.ch

	_ = h.set(collServers, "a", Summary{Name: "a", State: "Initial"}) // unchanged
	if b, _ := h.flush(); b != nil {
		t.Fatalf("an unchanged value made a batch: %+v", b)
	}
	_ = h.set(collServers, "a", Summary{Name: "a", State: "Discovery"})
	_ = h.set(collServers, "a", Summary{Name: "a", State: "Available"})
	_ = h.set(collServers, "b", Summary{Name: "b", State: "Initial"})
	_ = h.set(collClaims, "ns/c", ClaimItem{Namespace: "ns", Name: "c"})
	h.del(collServers, "gone") // never there: nothing
	h.flush()
	b := decodeBatch(t, <-sub.ch)
	if got := names(b.Changes[collServers].Upsert); fmt.Sprint(got) != "[a b]" {
		t.Errorf("upserts %v, want [a b]", got)
	}
	var a Summary
	_ = json.Unmarshal(b.Changes[collServers].Upsert[0], &a)
	if a.State != "Available" {
		t.Errorf("a coalesced to %s, want its last state Available", a.State)
	}
	if b.Changes[collClaims] == nil || len(b.Changes[collClaims].Upsert) != 1 {
		t.Errorf("claims change missing: %+v", b.Changes)
	}
	h.del(collServers, "b")
	h.setAccess(kindClaims, "forbidden")
	h.flush()
	b = decodeBatch(t, <-sub.ch)
	if fmt.Sprint(b.Changes[collServers].Delete) != "[b]" || b.Access[kindClaims] != "forbidden" {
		t.Errorf("delete/access batch %+v", b)
	}
	if b.Seq <= snap.Seq {
		t.Errorf("seq %d not after the snapshot's %d", b.Seq, snap.Seq)
	}
}

// A subscriber that does not read is dropped once its buffer is full (its page reconnects and
// starts again from a snapshot) instead of holding the others back.
func TestHubDropsSlowSubscriber(t *testing.T) {
	h := newHub(time.Hour)
	h.buffer = 2
	_, slow := h.subscribe()
	_, fast := h.subscribe()
	for i := range 3 {
		_ = h.set(collServers, "a", Summary{Name: "a", State: fmt.Sprint(i)})
		h.flush()
		<-fast.ch
	}
	n := 0
	for range slow.ch {
		n++
	}
	if n != 2 {
		t.Errorf("slow subscriber got %d batches before being dropped, want its buffer of 2", n)
	}
	_ = h.set(collServers, "a", Summary{Name: "a", State: "last"})
	h.flush()
	if _, ok := <-fast.ch; !ok {
		t.Error("the reading subscriber was dropped too")
	}
}

// The run loop sends a burst as few batches, never two within the interval, and ends the
// subscriptions when its context ends.
func TestHubRunPaces(t *testing.T) {
	h := newHub(100 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.run(ctx); close(done) }()
	_, sub := h.subscribe()
	stop := time.Now().Add(550 * time.Millisecond)
	for i := 0; time.Now().Before(stop); i++ {
		_ = h.set(collServers, fmt.Sprint(i%50), Summary{Name: fmt.Sprint(i % 50), State: fmt.Sprint(i)})
		time.Sleep(time.Millisecond) // a steady stream of changes, not synchronisation
	}
	cancel()
	<-done
	var times []time.Time
	for range sub.ch {
		times = append(times, time.Now())
	}
	if len(times) < 3 || len(times) > 7 {
		t.Errorf("%d batches in ~550ms at one per 100ms", len(times))
	}
}
