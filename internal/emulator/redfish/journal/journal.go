// Package journal records the spans of the requests an emulated BMC serves, while on, for tests
// that order requests of different senders. It must not import the emulator package.
package journal

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
	// Host is the address the request was sent to (its Host header): the BMC's own, or another
	// address that reaches it (a second listener, an address handed over).
	Host string
}

// Journal records spans while on; off by default, as a fleet's steady state would grow it
// without bound.
type Journal struct {
	On    atomic.Bool
	mu    sync.Mutex
	spans []RequestSpan
}

// Add records r, which started at start and ends now.
func (j *Journal) Add(r *http.Request, start time.Time) {
	s := RequestSpan{Start: start, End: time.Now(), Method: r.Method, Path: r.URL.Path, UserAgent: r.UserAgent(), Host: r.Host}
	j.mu.Lock()
	j.spans = append(j.spans, s)
	j.mu.Unlock()
}

// Spans are the spans recorded so far, in the order the requests ended.
func (j *Journal) Spans() []RequestSpan {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.spans)
}
