package sel

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

// MaxRecords is the SEL's MaxNumberOfRecords; it wraps when full (the oldest go), as iDRAC's.
const MaxRecords = 1024

// ID is the Id of every system's log service.
const ID = "SEL"

// Entry is one entry of a system's System Event Log (SEL).
type Entry struct {
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

// Log is a system's SEL and the health it drives.
type Log struct {
	mu      sync.Mutex
	next    int
	entries []Entry
	// health is the system's Status.Health and HealthRollup ("" reads OK).
	health string
}

// Seed logs what a booted system's SEL holds.
func (l *Log) Seed(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range []Entry{
		{Message: "System AC power applied.", SensorType: "Power Unit", EntryCode: EntryAssert},
		{Message: "System boot.", SensorType: "System Event", EntryCode: EntryAssert},
	} {
		e.Created = now.UTC().Truncate(time.Second)
		l.appendLocked(e)
	}
}

func (l *Log) appendLocked(e Entry) Entry {
	l.next++
	e.ID = strconv.Itoa(l.next)
	if e.Severity == "" {
		e.Severity = SeverityOK
	}
	if e.MessageID == "" {
		e.MessageID = "ResourceEvent.1.0.ResourceStatusChanged" + e.Severity
	}
	if len(l.entries) >= MaxRecords {
		l.entries = slices.Delete(l.entries, 0, len(l.entries)-MaxRecords+1)
	}
	l.entries = append(l.entries, e)
	return e
}

// Status is the system's Status object, its health from the log.
func (l *Log) Status() rfhttp.Obj {
	h := l.Health()
	return rfhttp.Obj{"State": "Enabled", "Health": h, "HealthRollup": h}
}

// Health is the system's Status.Health as its SEL leaves it: OK, Warning or Critical.
func (l *Log) Health() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.health == "" {
		return SeverityOK
	}
	return l.health
}

// NormalizeSeverity spells a severity as Redfish does, "" when it is none of OK, Warning and
// Critical.
func NormalizeSeverity(s string) string {
	for _, v := range []string{SeverityOK, SeverityWarning, SeverityCritical} {
		if strings.EqualFold(s, v) {
			return v
		}
	}
	return ""
}

// Add logs e as the BMC would: Id assigned, Severity OK unless set (Created is the caller's).
// The system's health follows the log, simply: a Critical entry makes it Critical, a Warning
// one Warning (unless already Critical), a Deassert entry of any severity makes it OK again
// (the condition went away), OK entries leave it. It returns the entry as stored and whether
// the health changed.
func (l *Log) Add(e Entry) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e = l.appendLocked(e)
	before := l.health
	switch {
	case e.EntryCode == EntryDeassert:
		l.health = ""
	case e.Severity == SeverityCritical:
		l.health = SeverityCritical
	case e.Severity == SeverityWarning && l.health != SeverityCritical:
		l.health = SeverityWarning
	}
	return e, l.health != before
}

// Entries returns the log, oldest first.
func (l *Log) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// Clear empties the log (Ids continue), sets the health back to OK and says whether it changed.
func (l *Log) Clear() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = nil
	changed := l.health != ""
	l.health = ""
	return changed
}

// EntryBody is the LogEntry resource of e at path.
func EntryBody(e Entry, path string) rfhttp.Obj {
	body := rfhttp.Obj{
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
	links := rfhttp.Obj{}
	if e.Origin != "" {
		links["OriginOfCondition"] = rfhttp.Link(e.Origin)
	}
	body["Links"] = links
	return body
}

// Serve serves a system's LogServices at base: the SEL, its entries (at most pageSize a page,
// 0 for all) and ClearLog, which calls clear.
func (l *Log) Serve(w http.ResponseWriter, r *http.Request, base string, rest []string, pageSize int, clear func()) {
	lp := base + "/" + ID
	switch {
	case len(rest) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base, "LogServiceCollection", "Log Service Collection", []string{lp}))
		}
	case rest[0] != ID:
		rfhttp.NotFound(w, r)
	case len(rest) == 1:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			now := time.Now().UTC()
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#LogService.v1_2_0.LogService", "@odata.id": lp, "Id": ID, "Name": "System Event Log Service",
				"Description": "System Event Log", "ServiceEnabled": true, "MaxNumberOfRecords": MaxRecords,
				"OverWritePolicy": "WrapsWhenFull", "LogEntryType": "SEL",
				"DateTime": now.Format(time.RFC3339), "DateTimeLocalOffset": "+00:00",
				"Entries": rfhttp.Link(lp + "/Entries"), "Status": rfhttp.Status("Enabled"),
				"Actions": rfhttp.Obj{"#LogService.ClearLog": rfhttp.Obj{"target": lp + "/Actions/LogService.ClearLog"}},
			})
		}
	case len(rest) == 3 && rest[1] == "Actions" && rest[2] == "LogService.ClearLog":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			clear()
			w.WriteHeader(http.StatusNoContent)
		}
	case rest[1] == "Entries" && len(rest) == 2:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			l.serveEntries(w, r, lp+"/Entries", pageSize)
		}
	case rest[1] == "Entries" && len(rest) == 3:
		if !rfhttp.MethodIs(w, r, http.MethodGet) {
			return
		}
		for _, e := range l.Entries() {
			if e.ID == rest[2] {
				rfhttp.WriteJSON(w, http.StatusOK, EntryBody(e, lp+"/Entries/"+e.ID))
				return
			}
		}
		rfhttp.NotFound(w, r)
	default:
		rfhttp.NotFound(w, r)
	}
}

// serveEntries answers the Entries collection with its members inline, as most BMCs serve
// Entry collections, honouring $skip and $top and paging (pageSize).
func (l *Log) serveEntries(w http.ResponseWriter, r *http.Request, path string, pageSize int) {
	entries := l.Entries()
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
	if ps := pageSize; ps > 0 {
		top = min(top, ps)
	}
	skip = min(skip, len(entries))
	end := min(skip+top, len(entries))
	members := make([]rfhttp.Obj, 0, end-skip)
	for _, e := range entries[skip:end] {
		members = append(members, EntryBody(e, path+"/"+e.ID))
	}
	body := rfhttp.Obj{
		"@odata.type": "#LogEntryCollection.LogEntryCollection", "@odata.id": path, "Name": "System Event Log Entries",
		"Members": members, "Members@odata.count": len(entries),
	}
	if end < len(entries) {
		body["Members@odata.nextLink"] = path + "?$skip=" + strconv.Itoa(end)
	}
	rfhttp.WriteJSON(w, http.StatusOK, body)
}

// DecodeEntry reads an Entry to inject (control API), strictly: a typo in a field name
// must not inject an OK entry silently.
func DecodeEntry(r *http.Request) (Entry, error) {
	var e Entry
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, err
	}
	if e.Severity != "" && NormalizeSeverity(e.Severity) == "" {
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
