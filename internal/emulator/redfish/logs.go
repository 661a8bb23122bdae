package redfish

import (
	"net/http"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/sel"
)

// Severities of log entries and events, as Redfish spells them.
const (
	SeverityOK       = sel.SeverityOK
	SeverityWarning  = sel.SeverityWarning
	SeverityCritical = sel.SeverityCritical
)

// Entry codes of SEL entries: a condition appears (Assert) or goes away (Deassert).
const (
	EntryAssert   = sel.EntryAssert
	EntryDeassert = sel.EntryDeassert
)

// ActionClearLog is a LogService.ClearLog of a system's SEL.
const ActionClearLog = "ClearLog"

// LogEntry is one entry of a system's System Event Log (SEL).
type LogEntry = sel.Entry

// InjectLogEntry logs e in the system's SEL as the BMC would: Id assigned, Created now unless
// set, Severity OK unless set, and delivered to every event subscription (asynchronously). It
// returns the entry as stored.
//
// The system's health follows the log, simply: a Critical entry makes it Critical, a Warning
// one Warning (unless already Critical), a Deassert entry of any severity makes it OK again
// (the condition went away), OK entries leave it. ClearLog makes it OK too.
func (s *System) InjectLogEntry(e LogEntry) LogEntry {
	if n := sel.NormalizeSeverity(e.Severity); n != "" {
		e.Severity = n
	}
	if e.Created.IsZero() {
		e.Created = time.Now()
	}
	e.Created = e.Created.UTC().Truncate(time.Second)
	e, changed := s.sel.Add(e)
	if changed {
		s.bumpETag()
	}
	s.bmc.publish(s, e)
	return e
}

// LogEntries returns the system's SEL, oldest first.
func (s *System) LogEntries() []LogEntry { return s.sel.Entries() }

// ClearLog empties the system's SEL (Ids continue) and sets its health back to OK.
func (s *System) ClearLog() {
	if s.sel.Clear() {
		s.bumpETag()
	}
}

// Health is the system's Status.Health: OK, Warning or Critical (see InjectLogEntry).
func (s *System) Health() string { return s.sel.Health() }

// bumpETag marks a change of the system's representation (its health).
func (s *System) bumpETag() {
	s.mu.Lock()
	s.etag++
	s.mu.Unlock()
}

// SetLogPageSize makes the systems' SEL Entries collections answer at most n members at a time,
// with Members@odata.nextLink to the rest ($skip), as BMCs page long logs; 0 answers them all.
func (b *BMC) SetLogPageSize(n int) { b.logPageSize.Store(int64(max(n, 0))) }

// serveLogServices serves a system's LogServices: the SEL, its entries and ClearLog.
func (b *BMC) serveLogServices(w http.ResponseWriter, r *http.Request, s *System, base string, rest []string) {
	s.sel.Serve(w, r, base, rest, int(b.logPageSize.Load()), func() {
		s.ClearLog()
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionClearLog})
	})
}
