package redfish

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// Severities of log entries and events, as Redfish spells them.
const (
	SeverityOK       = "OK"
	SeverityWarning  = "Warning"
	SeverityCritical = "Critical"
)

// Entry codes of SEL entries: a condition appears (Assert) or goes away (Deassert).
const (
	EntryAssert   = "Assert"
	EntryDeassert = "Deassert"
)

// ActionClearLog is a LogService.ClearLog of a system's SEL.
const ActionClearLog = "ClearLog"

// maxLogRecords is the SEL's MaxNumberOfRecords; it wraps when full (the oldest go), as iDRAC's.
const maxLogRecords = 1024

// selID is the Id of every system's log service.
const selID = "SEL"

// LogEntry is one entry of a system's System Event Log (SEL).
type LogEntry struct {
	// ID is assigned on injection: a growing integer that a ClearLog does not restart.
	ID string `json:"id,omitempty"`
	// Created is when it was logged (now when zero on injection).
	Created time.Time `json:"created"`
	// Severity is OK (default), Warning or Critical.
	Severity string `json:"severity,omitempty"`
	Message  string `json:"message"`
	// MessageID defaults to a ResourceEvent message of the severity.
	MessageID string `json:"messageId,omitempty"`
	// SensorType is the IPMI sensor type: "Memory", "Power Supply / Converter", "Fan",
	// "Processor", "Temperature", "Add-in Card" (GPUs and other PCIe cards), ...
	SensorType string `json:"sensorType,omitempty"`
	// EntryCode is Assert or Deassert ("" says neither).
	EntryCode string `json:"entryCode,omitempty"`
	// Origin is the @odata.id of the component at fault (a DIMM, a PSU), "" for none.
	Origin string `json:"origin,omitempty"`
}

// selLog is a system's SEL and the health it drives.
type selLog struct {
	mu      sync.Mutex
	next    int
	entries []LogEntry
	// health is the system's Status.Health and HealthRollup ("" reads OK).
	health string
}

// seed logs what a booted system's SEL holds.
func (l *selLog) seed(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range []LogEntry{
		{Message: "System AC power applied.", SensorType: "Power Unit", EntryCode: EntryAssert},
		{Message: "System boot.", SensorType: "System Event", EntryCode: EntryAssert},
	} {
		e.Created = now.UTC().Truncate(time.Second)
		l.appendLocked(e)
	}
}

func (l *selLog) appendLocked(e LogEntry) LogEntry {
	l.next++
	e.ID = strconv.Itoa(l.next)
	if e.Severity == "" {
		e.Severity = SeverityOK
	}
	if e.MessageID == "" {
		e.MessageID = "ResourceEvent.1.0.ResourceStatusChanged" + e.Severity
	}
	if len(l.entries) >= maxLogRecords {
		l.entries = slices.Delete(l.entries, 0, len(l.entries)-maxLogRecords+1)
	}
	l.entries = append(l.entries, e)
	return e
}

// status is the system's Status object, its health from the log.
func (l *selLog) status() obj {
	h := l.Health()
	return obj{"State": "Enabled", "Health": h, "HealthRollup": h}
}

// Health is the system's Status.Health as its SEL leaves it: OK, Warning or Critical.
func (l *selLog) Health() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.health == "" {
		return SeverityOK
	}
	return l.health
}

// normalizeSeverity spells a severity as Redfish does, "" when it is none of OK, Warning and
// Critical.
func normalizeSeverity(s string) string {
	for _, v := range []string{SeverityOK, SeverityWarning, SeverityCritical} {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	return ""
}

// InjectLogEntry logs e in the system's SEL as the BMC would: Id assigned, Created now unless
// set, Severity OK unless set, and delivered to every event subscription (asynchronously). It
// returns the entry as stored.
//
// The system's health follows the log, simply: a Critical entry makes it Critical, a Warning
// one Warning (unless already Critical), a Deassert entry of any severity makes it OK again
// (the condition went away), OK entries leave it. ClearLog makes it OK too.
func (s *System) InjectLogEntry(e LogEntry) LogEntry {
	if n := normalizeSeverity(e.Severity); n != "" {
		e.Severity = n
	}
	if e.Created.IsZero() {
		e.Created = time.Now()
	}
	e.Created = e.Created.UTC().Truncate(time.Second)
	s.sel.mu.Lock()
	e = s.sel.appendLocked(e)
	before := s.sel.health
	switch {
	case e.EntryCode == EntryDeassert:
		s.sel.health = ""
	case e.Severity == SeverityCritical:
		s.sel.health = SeverityCritical
	case e.Severity == SeverityWarning && s.sel.health != SeverityCritical:
		s.sel.health = SeverityWarning
	}
	changed := s.sel.health != before
	s.sel.mu.Unlock()
	if changed {
		s.bumpETag()
	}
	s.bmc.publish(s, e)
	return e
}

// LogEntries returns the system's SEL, oldest first.
func (s *System) LogEntries() []LogEntry {
	s.sel.mu.Lock()
	defer s.sel.mu.Unlock()
	return slices.Clone(s.sel.entries)
}

// ClearLog empties the system's SEL (Ids continue) and sets its health back to OK.
func (s *System) ClearLog() {
	s.sel.mu.Lock()
	s.sel.entries = nil
	changed := s.sel.health != ""
	s.sel.health = ""
	s.sel.mu.Unlock()
	if changed {
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
func (b *BMC) SetLogPageSize(n int) { b.ev.logPageSize.Store(int64(max(n, 0))) }

func logEntryBody(e LogEntry, path string) obj {
	body := obj{
		"@odata.type": "#LogEntry.v1_9_0.LogEntry", "@odata.id": path, "Id": e.ID, "Name": "Log Entry " + e.ID,
		"Created": e.Created.Format(time.RFC3339), "EntryType": "SEL", "Severity": e.Severity,
		"Message": e.Message, "MessageId": e.MessageID, "MessageArgs": []string{},
	}
	if e.SensorType != "" {
		body["SensorType"] = e.SensorType
	}
	if e.EntryCode != "" {
		body["EntryCode"] = e.EntryCode
	}
	links := obj{}
	if e.Origin != "" {
		links["OriginOfCondition"] = rfhttp.Link(e.Origin)
	}
	body["Links"] = links
	return body
}

// serveLogServices serves a system's LogServices: the SEL, its entries and ClearLog.
func (b *BMC) serveLogServices(w http.ResponseWriter, r *http.Request, s *System, base string, rest []string) {
	lp := base + "/" + selID
	switch {
	case len(rest) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base, "LogServiceCollection", "Log Service Collection", []string{lp}))
		}
	case rest[0] != selID:
		rfhttp.NotFound(w, r)
	case len(rest) == 1:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			now := time.Now().UTC()
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#LogService.v1_2_0.LogService", "@odata.id": lp, "Id": selID, "Name": "System Event Log Service",
				"Description": "System Event Log", "ServiceEnabled": true, "MaxNumberOfRecords": maxLogRecords,
				"OverWritePolicy": "WrapsWhenFull", "LogEntryType": "SEL",
				"DateTime": now.Format(time.RFC3339), "DateTimeLocalOffset": "+00:00",
				"Entries": rfhttp.Link(lp + "/Entries"), "Status": rfhttp.Status("Enabled"),
				"Actions": obj{"#LogService.ClearLog": obj{"target": lp + "/Actions/LogService.ClearLog"}},
			})
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "LogService.ClearLog":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			s.ClearLog()
			b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionClearLog})
			w.WriteHeader(http.StatusNoContent)
		}
	case rest[1] == "Entries" && len(rest) == 2:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			b.serveLogEntries(w, r, s, lp+"/Entries")
		}
	case rest[1] == "Entries" && len(rest) == 3:
		if !rfhttp.MethodIs(w, r, http.MethodGet) {
			return
		}
		for _, e := range s.LogEntries() {
			if e.ID == rest[2] {
				rfhttp.WriteJSON(w, http.StatusOK, logEntryBody(e, lp+"/Entries/"+e.ID))
				return
			}
		}
		rfhttp.NotFound(w, r)
	default:
		rfhttp.NotFound(w, r)
	}
}

// serveLogEntries answers the Entries collection with its members inline, as most BMCs serve
// LogEntry collections, honouring $skip and $top and paging (SetLogPageSize).
func (b *BMC) serveLogEntries(w http.ResponseWriter, r *http.Request, s *System, path string) {
	entries := s.LogEntries()
	q := r.URL.Query()
	skip, top := 0, len(entries)
	for name, dst := range map[string]*int{"$skip": &skip, "$top": &top} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				rfhttp.WriteError(w, http.StatusBadRequest, "QueryParameterValueTypeError", "The value "+v+" for the query parameter "+name+" is of a different type than the parameter can accept.")
				return
			}
			*dst = n
		}
	}
	if ps := int(b.ev.logPageSize.Load()); ps > 0 {
		top = min(top, ps)
	}
	skip = min(skip, len(entries))
	end := min(skip+top, len(entries))
	members := make([]obj, 0, end-skip)
	for _, e := range entries[skip:end] {
		members = append(members, logEntryBody(e, path+"/"+e.ID))
	}
	body := obj{
		"@odata.type": "#LogEntryCollection.LogEntryCollection", "@odata.id": path, "Name": "System Event Log Entries",
		"Members": members, "Members@odata.count": len(entries),
	}
	if end < len(entries) {
		body["Members@odata.nextLink"] = path + "?$skip=" + strconv.Itoa(end)
	}
	rfhttp.WriteJSON(w, http.StatusOK, body)
}

// decodeLogEntry reads a LogEntry to inject (control API), strictly: a typo in a field name
// must not inject an OK entry silently.
func decodeLogEntry(r *http.Request) (LogEntry, error) {
	var e LogEntry
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, err
	}
	if e.Severity != "" && normalizeSeverity(e.Severity) == "" {
		return e, errBadSeverity
	}
	if e.EntryCode != "" && e.EntryCode != EntryAssert && e.EntryCode != EntryDeassert {
		return e, errBadEntryCode
	}
	return e, nil
}

type controlError string

func (e controlError) Error() string { return string(e) }

const (
	errBadSeverity  controlError = "severity must be OK, Warning or Critical"
	errBadEntryCode controlError = "entryCode must be Assert or Deassert"
)
