package redfish

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// RequestSpan is one request a BMC served (or dropped): when it arrived and when its handler
// returned, and who sent it. A test reads them to order requests of different senders, such as
// two replicas handing a BMC over.
type RequestSpan struct {
	Start, End   time.Time
	Method, Path string
	UserAgent    string
}

// requestJournal records spans while on; off by default, as a fleet's steady state would grow it
// without bound.
type requestJournal struct {
	on    atomic.Bool
	mu    sync.Mutex
	spans []RequestSpan
}

func (j *requestJournal) add(r *http.Request, start time.Time) {
	s := RequestSpan{Start: start, End: time.Now(), Method: r.Method, Path: r.URL.Path, UserAgent: r.UserAgent()}
	j.mu.Lock()
	j.spans = append(j.spans, s)
	j.mu.Unlock()
}

// JournalRequests starts (or stops) recording the spans of the requests this BMC serves.
func (b *BMC) JournalRequests(on bool) { b.journal.on.Store(on) }

// RequestSpans are the spans recorded so far, in the order the requests ended.
func (b *BMC) RequestSpans() []RequestSpan {
	b.journal.mu.Lock()
	defer b.journal.mu.Unlock()
	return slices.Clone(b.journal.spans)
}
