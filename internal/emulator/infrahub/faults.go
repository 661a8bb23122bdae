package infrahub

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"
)

// Class groups endpoints for fault injection and the request log.
type Class string

const (
	ClassAll      Class = "all"      // as a fault target: every API endpoint
	ClassAuth     Class = "auth"     // login and refresh
	ClassQuery    Class = "query"    // stored queries
	ClassArtifact Class = "artifact" // artifact downloads
	ClassGraphQL  Class = "graphql"  // POST /graphql (proposed changes and their comments)
	ClassOther    Class = "other"    // any other path (404)
	classControl  Class = "control"  // /emulator/*: never logged or faulted
)

func classify(path string) Class {
	switch {
	case strings.HasPrefix(path, "/emulator/"):
		return classControl
	case strings.HasPrefix(path, "/api/auth/"):
		return ClassAuth
	case strings.HasPrefix(path, "/api/query/"):
		return ClassQuery
	case strings.HasPrefix(path, "/api/artifact/"):
		return ClassArtifact
	case path == "/graphql" || strings.HasPrefix(path, "/graphql/"):
		return ClassGraphQL
	}
	return ClassOther
}

// FaultKind is what an injected fault does to a request.
type FaultKind string

const (
	FaultLatency FaultKind = "latency" // wait Latency, then answer normally
	FaultStatus  FaultKind = "status"  // answer Status (default 503) with a plain-text body
	FaultHang    FaultKind = "hang"    // never answer (until the client gives up or Close)
	FaultDrop    FaultKind = "drop"    // close the connection without an answer
)

// Fault is injected into requests of one class until cleared, or for the
// next Times requests when Times > 0.
type Fault struct {
	Kind    FaultKind     `json:"kind"`
	Latency time.Duration `json:"latency,omitempty"`
	Status  int           `json:"status,omitempty"`
	Times   int           `json:"times,omitempty"`
}

// SetFault injects f into requests of class c (ClassAll for every endpoint).
// A class's own fault takes precedence over the ClassAll one.
func (e *Emulator) SetFault(c Class, f Fault) {
	if f.Kind == FaultStatus && f.Status == 0 {
		f.Status = http.StatusServiceUnavailable
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults[c] = &f
}

// ClearFault removes the fault of class c.
func (e *Emulator) ClearFault(c Class) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.faults, c)
}

// ClearFaults removes every fault.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = map[Class]*Fault{}
}

// takeFault returns the fault to apply to one request of class c, counting
// it against Times.
func (e *Emulator) takeFault(c Class) *Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := c
	f := e.faults[c]
	if f == nil {
		key, f = ClassAll, e.faults[ClassAll]
	}
	if f == nil {
		return nil
	}
	out := *f
	if f.Times > 0 {
		f.Times--
		if f.Times == 0 {
			delete(e.faults, key)
		}
	}
	return &out
}

// inject applies f; it reports whether the request should still be served.
func (e *Emulator) inject(w http.ResponseWriter, r *http.Request, f *Fault) bool {
	if f.Kind == FaultLatency || f.Kind == FaultHang {
		// net/http notices a client that went away (and cancels r's context) only once the
		// body is read: without this a hanging request outlives its client.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	switch f.Kind {
	case FaultLatency:
		t := time.NewTimer(f.Latency)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-r.Context().Done():
		case <-e.done:
		}
		return false
	case FaultStatus:
		http.Error(w, http.StatusText(f.Status)+" (injected fault)", f.Status)
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-e.done:
		}
	case FaultDrop:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return false
		}
		// Not hijackable (HTTP/2, or wrapped): abort the stream instead.
		panic(http.ErrAbortHandler)
	default:
		return true
	}
	return false
}
