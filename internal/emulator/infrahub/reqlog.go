package infrahub

import (
	"sync"
	"time"
)

// Request is one entry of the request log. Status 0 means no answer was
// sent (hang, drop, or the client went away first).
type Request struct {
	Time     time.Time     `json:"time"`
	Method   string        `json:"method"`
	Path     string        `json:"path"`
	Query    string        `json:"query,omitempty"`
	Class    Class         `json:"class"`
	Status   int           `json:"status"`
	Duration time.Duration `json:"duration_ns"`
	Fault    FaultKind     `json:"fault,omitempty"`
}

// Counters summarise the request log since the last reset. Each counts
// requests to that endpoint whatever their outcome.
type Counters struct {
	Logins       int `json:"logins"`
	Refreshes    int `json:"refreshes"`
	Queries      int `json:"queries"`
	Downloads    int `json:"downloads"`
	GraphQL      int `json:"graphql"`      // requests to /graphql
	Unauthorized int `json:"unauthorized"` // answers with status 401
	Faulted      int `json:"faulted"`      // requests a fault was injected into
	Total        int `json:"total"`
}

type requestLog struct {
	mu       sync.Mutex
	max      int
	entries  []Request
	counters Counters
	inFlight map[Class]int // requests being served now
	peak     map[Class]int // the most served at once since the last reset
}

func newRequestLog(max int) *requestLog {
	return &requestLog{max: max, inFlight: map[Class]int{}, peak: map[Class]int{}}
}

// begin counts a request of class c being served until end.
func (l *requestLog) begin(c Class) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight[c]++
	l.peak[c] = max(l.peak[c], l.inFlight[c])
}

func (l *requestLog) end(c Class) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight[c]--
}

func (l *requestLog) add(r Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) >= l.max {
		// Drop the oldest half at once to keep appends amortised O(1).
		l.entries = append(l.entries[:0], l.entries[len(l.entries)-l.max/2:]...)
	}
	l.entries = append(l.entries, r)
	c := &l.counters
	c.Total++
	switch {
	case r.Path == "/api/auth/login":
		c.Logins++
	case r.Path == "/api/auth/refresh":
		c.Refreshes++
	case r.Class == ClassQuery:
		c.Queries++
	case r.Class == ClassArtifact:
		c.Downloads++
	case r.Class == ClassGraphQL:
		c.GraphQL++
	}
	if r.Status == 401 {
		c.Unauthorized++
	}
	if r.Fault != "" {
		c.Faulted++
	}
}

// Requests returns a copy of the request log, oldest first.
func (e *Emulator) Requests() []Request {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return append([]Request(nil), e.log.entries...)
}

// Counters returns the counters since the last reset.
func (e *Emulator) Counters() Counters {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return e.log.counters
}

// InFlight is how many requests of class c are being served now (a hanging one counts until
// its client gives up).
func (e *Emulator) InFlight(c Class) int {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return e.log.inFlight[c]
}

// PeakInFlight is the most requests of class c served at once since the last reset.
func (e *Emulator) PeakInFlight(c Class) int {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return e.log.peak[c]
}

// ResetRequests clears the request log and counters (and the peaks).
func (e *Emulator) ResetRequests() {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	e.log.entries = nil
	e.log.counters = Counters{}
	for c, n := range e.log.inFlight {
		e.log.peak[c] = n
	}
}
