package bmc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

const (
	// maxLogEntries bounds what one LogEntries call returns: the newest ones. A first read of
	// a full SEL (iDRAC keeps 1024) must not turn into a thousand member reads.
	maxLogEntries = 64
	// maxLogPages bounds the pages of a paged Entries collection one call reads.
	maxLogPages = 4
	// maxLogServices bounds the log services read to tell them apart when their Ids say nothing.
	maxLogServices = 8
	// proofTTL is how old a proof of the system's identity LogEntries takes instead of reading
	// the system again: polled for every server, it would otherwise cost two requests, while
	// the controller reads the system (System, proven) on its own polls anyway. A log is only
	// read, never acted on: at worst, after an address swap, another box's log is read for that
	// long, and nothing is sent to it. 0 would prove every call, at a request more each.
	proofTTL = 2 * time.Minute
)

// LogEntry is one entry of a system's hardware event log.
type LogEntry struct {
	// ID is the entry's Id: on most BMCs a number that grows with every entry.
	ID string `json:"id"`
	// Created is when the BMC logged it (zero when it did not say or said nonsense). Entries
	// logged before the BMC's clock was set carry 1970 or 2000.
	Created time.Time `json:"created"`
	// Severity is OK, Warning or Critical.
	Severity   string `json:"severity,omitempty"`
	Message    string `json:"message,omitempty"`
	MessageID  string `json:"messageID,omitempty"`
	SensorType string `json:"sensorType,omitempty"`
	// EntryType is SEL, Event or Oem (HPE's IML).
	EntryType string `json:"entryType,omitempty"`
	// EntryCode is Assert, Deassert or another IPMI code, "" when unsaid.
	EntryCode string `json:"entryCode,omitempty"`
	// Origin is the OriginOfCondition's @odata.id: the component at fault, where said.
	Origin string `json:"origin,omitempty"`
}

// logCache remembers, per system URI, where its log's entries are, and who last answered at the
// system's address (any read of it), so that a steady-state LogEntries is one GET.
type logCache struct {
	mu    sync.Mutex
	where map[string]string
	seen  map[string]seenSystem
}

type seenSystem struct {
	id    Identity
	sysID string
	at    time.Time
}

func (l *logCache) saw(uri string, sys *schemas.ComputerSystem, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]seenSystem{}
	}
	l.seen[uri] = seenSystem{id: Identity{UUID: sys.UUID, SerialNumber: sys.SerialNumber}, sysID: sys.ID, at: now}
}

// proven says whether the system at uri was read as want less than proofTTL ago.
func (l *logCache) proven(uri string, want Identity, now time.Time) bool {
	l.mu.Lock()
	s, ok := l.seen[uri]
	l.mu.Unlock()
	return ok && now.Sub(s.at) < proofTTL && !now.Before(s.at) && isSystem(want, s.id, s.sysID)
}

func (l *logCache) entries(uri string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.where[uri]
	return e, ok
}

func (l *logCache) remember(uri, entries string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.where == nil {
		l.where = map[string]string{}
	}
	l.where[uri] = entries
}

func (l *logCache) forget(uri string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.where, uri)
}

// LogEntries implements BMC.
func (c *conn) LogEntries(ctx context.Context, systemID, after string) ([]LogEntry, error) {
	var out []LogEntry
	err := c.onLog(ctx, systemID, "read event log of "+systemID, func(api *gofish.APIClient, uri string) (err error) {
		out, err = c.readLog(api, uri, after)
		return err
	})
	return out, err
}

// LogCursor implements BMC.
func (c *conn) LogCursor(ctx context.Context, systemID string) (string, error) {
	var id string
	err := c.onLog(ctx, systemID, "read event log cursor of "+systemID, func(api *gofish.APIClient, uri string) (err error) {
		id, err = c.newestLogID(api, uri)
		return err
	})
	return id, err
}

// onLog runs read on the Entries collection of the system's event log, found once per system
// and remembered; the system is proven first unless a proof of it is recent (recentlyProven).
func (c *conn) onLog(ctx context.Context, systemID, op string, read func(api *gofish.APIClient, uri string) error) error {
	if strings.TrimSpace(systemID) == "" {
		return wire.New(ReasonInvalidConfig, op, "system ID is empty")
	}
	api, err := c.client(ctx)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for attempt := 0; ; attempt++ {
		uri, _, err := c.resolveSystem(api, systemID)
		if err != nil {
			return wire.Wrap(op, err)
		}
		entries, known := c.logs.entries(uri)
		if !known || !c.recentlyProven(ctx, uri) {
			sys, err := c.getSystem(ctx, systemID)
			if err != nil {
				return wire.Wrap(op, err)
			}
			if !known {
				if entries, err = c.findLog(api, sys); err != nil {
					return wire.Wrap(op, err)
				}
				// getSystem may have resolved the system anew.
				if uri, _, err = c.resolveSystem(api, systemID); err != nil {
					return wire.Wrap(op, err)
				}
				c.logs.remember(uri, entries)
				c.log.V(1).Info("found event log", "system", systemID, "entries", entries)
			}
		}
		if err = read(api, entries); err == nil {
			return nil
		}
		if !known || attempt > 0 || ReasonOf(err) != ReasonNotFound {
			return wire.Wrap(op, err)
		}
		// The log moved (a firmware update): look for it again, once.
		c.logs.forget(uri)
	}
}

// recentlyProven says whether ctx asks for no identity (Expect) or the system at uri was read
// as the one it asks for a moment ago.
func (c *conn) recentlyProven(ctx context.Context, uri string) bool {
	want, ok := ctx.Value(expectKey{}).(Identity)
	return !ok || c.logs.proven(uri, want, c.opts.Now())
}

// findLog finds the Entries collection of sys's hardware event log: among the system's own
// LogServices (where HPE serves its IML, Supermicro its Log1, OpenBMC its EventLog, newer
// iDRAC their Sel), else among its manager's (older iDRAC's Sel) when that manager manages this
// system alone: a manager shared by several systems logs for all of them.
func (c *conn) findLog(api *gofish.APIClient, sys *schemas.ComputerSystem) (string, error) {
	var links struct {
		LogServices wire.Link
		Links       struct{ ManagedBy []wire.Link }
	}
	_ = json.Unmarshal(sys.RawData, &links)
	if links.LogServices.ID != "" {
		entries, err := c.pickLog(api, links.LogServices.ID)
		if err != nil && !absent(err) {
			return "", err
		}
		if entries != "" {
			return entries, nil
		}
	}
	none := wire.New(ReasonUnsupported, "find event log", "system %s has no event log service", sys.ID)
	if len(links.Links.ManagedBy) != 1 || links.Links.ManagedBy[0].ID == "" {
		return "", none
	}
	var mgr struct {
		LogServices wire.Link
		Links       struct{ ManagerForServers []wire.Link }
	}
	if err := wire.GetJSON(api, links.Links.ManagedBy[0].ID, &mgr); err != nil {
		if absent(err) {
			return "", none
		}
		return "", err
	}
	if mgr.LogServices.ID == "" {
		return "", none
	}
	switch n := len(mgr.Links.ManagerForServers); {
	case n > 1:
		return "", none
	case n == 0:
		// A manager that does not say whom it manages is the system's only where the BMC has
		// one system.
		if c.root.Systems.ID == "" {
			return "", none
		}
		coll, err := schemas.GetCollection(api, c.root.Systems.ID)
		if err != nil {
			return "", err
		}
		if len(coll.ItemLinks) != 1 {
			return "", none
		}
	}
	entries, err := c.pickLog(api, mgr.LogServices.ID)
	if err != nil && !absent(err) {
		return "", err
	}
	if entries == "" {
		return "", none
	}
	return entries, nil
}

// absent says a linked resource is not there after all (404) or not served (501, 405):
// something to look past, unlike a BMC that fails.
func absent(err error) bool {
	r := ReasonOf(err)
	return r == ReasonNotFound || r == ReasonUnsupported
}

type logServiceBody struct {
	ID           string `json:"Id"`
	Name         string
	LogEntryType string
	Entries      wire.Link
}

// Ranks of log services: the higher, the likelier the hardware event log.
const (
	rankExcluded = -1
	rankOther    = 1 // some other log (Lifecycle, active alerts)
	rankEvent    = 2 // an event log (OpenBMC EventLog, Supermicro Log1, Lenovo PlatformLog)
	rankIML      = 3 // HPE's Integrated Management Log
	rankSEL      = 4 // the IPMI System Event Log
)

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

// logRank ranks a log service by its Id or Name. How the log is chosen: the service whose Id or
// Name says SEL (or "System Event Log"), else IML, else an event log (EventLog, Event, Log1,
// PlatformLog), else any other log; never a dump, POST codes, the BMC's journal or its own
// audit, security or iLO event logs, which say nothing of the hardware.
func logRank(s string) int {
	l := strings.ToLower(strings.TrimSpace(s))
	if l == "" {
		return 0
	}
	words := strings.Fields(nonAlnum.ReplaceAllString(l, " "))
	compact := strings.Join(words, "")
	for _, x := range []string{"dump", "crash", "postcode", "journal", "hostlogger", "audit", "security", "diag", "iloeventlog"} {
		if strings.Contains(compact, x) {
			return rankExcluded
		}
	}
	switch {
	case compact == "iel" || compact == "sl":
		return rankExcluded
	case slices.Contains(words, "sel") || strings.Contains(compact, "systemeventlog"):
		return rankSEL
	case slices.Contains(words, "iml") || strings.Contains(compact, "integratedmanagementlog"):
		return rankIML
	case slices.Contains([]string{"event", "eventlog", "log", "log1", "platformlog", "systemlog"}, compact) || strings.Contains(compact, "eventlog"):
		return rankEvent
	case strings.Contains(compact, "log"):
		return rankOther
	}
	return 0
}

func entryTypeRank(t string) int {
	switch strings.ToUpper(t) {
	case "SEL":
		return rankSEL
	case "EVENT":
		return rankEvent
	}
	return 0
}

// pickLog chooses the hardware event log among a LogServices collection (logRank; the only
// service when none says what it is) and returns its Entries URI, "" when none fits.
func (c *conn) pickLog(api *gofish.APIClient, collURI string) (string, error) {
	var coll struct{ Members []wire.Link }
	if err := wire.GetJSON(api, collURI, &coll); err != nil {
		return "", err
	}
	type candidate struct {
		uri  string
		rank int
		svc  *logServiceBody
	}
	var cands []candidate
	for _, m := range coll.Members {
		if m.ID != "" {
			cands = append(cands, candidate{uri: m.ID, rank: logRank(wire.LastSegment(m.ID))})
		}
	}
	best := func() int {
		b := -1
		for i, cd := range cands {
			if cd.rank > 0 && (b < 0 || cd.rank > cands[b].rank) {
				b = i
			}
		}
		return b
	}
	b := best()
	if (b < 0 || cands[b].rank < rankEvent) && len(cands) > 1 {
		// The Ids say too little ("1", "2"): the services' Names and entry types say more.
		for i := range cands[:min(len(cands), maxLogServices)] {
			var s logServiceBody
			if err := wire.GetJSON(api, cands[i].uri, &s); err != nil {
				if absent(err) {
					continue
				}
				return "", err
			}
			cands[i].svc = &s
			ranks := []int{cands[i].rank, logRank(s.ID), logRank(s.Name), entryTypeRank(s.LogEntryType)}
			if slices.Contains(ranks, rankExcluded) {
				cands[i].rank = rankExcluded
			} else {
				cands[i].rank = slices.Max(ranks)
			}
		}
		b = best()
	}
	if b < 0 {
		if len(cands) != 1 || cands[0].rank == rankExcluded {
			return "", nil
		}
		b = 0 // the only one
	}
	svc := cands[b].svc
	if svc == nil {
		svc = &logServiceBody{}
		if err := wire.GetJSON(api, cands[b].uri, svc); err != nil {
			return "", err
		}
	}
	if svc.Entries.ID != "" {
		return svc.Entries.ID, nil
	}
	return strings.TrimRight(cands[b].uri, "/") + "/Entries", nil
}

// flexString reads a JSON string or number: some BMCs write Ids as numbers.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("neither a string nor a number: %s", b)
	}
	*f = flexString(n.String())
	return nil
}

type rawLogEntry struct {
	ODataID         string     `json:"@odata.id"`
	ID              flexString `json:"Id"`
	Created         string
	Severity        string
	MessageSeverity string
	Message         string
	MessageID       string `json:"MessageId"`
	SensorType      string
	EntryType       string
	EntryCode       string
	Links           struct{ OriginOfCondition wire.Link }
}

// inline says the member is a full entry, not a bare link.
func (r *rawLogEntry) inline() bool { return r.ID != "" || r.Created != "" || r.Message != "" }

func (r *rawLogEntry) entry() LogEntry {
	id := string(r.ID)
	if id == "" {
		id = wire.LastSegment(r.ODataID)
	}
	return LogEntry{
		ID: id, Created: parseTime(r.Created), Severity: normalizeSeverity(firstNonEmpty(r.Severity, r.MessageSeverity)),
		Message: strings.TrimSpace(r.Message), MessageID: r.MessageID, SensorType: r.SensorType,
		EntryType: r.EntryType, EntryCode: r.EntryCode, Origin: r.Links.OriginOfCondition.ID,
	}
}

type entriesPage struct {
	Members  []rawLogEntry
	Count    int    `json:"Members@odata.count"`
	NextLink string `json:"Members@odata.nextLink"`
}

var skipParam = regexp.MustCompile(`([?&]\$skip=)(\d+)`)

// readLog reads the entries newer than after from an Entries collection: one GET when the
// collection holds its entries (most BMCs), plus one per new entry where it holds bare links
// (iLO), plus pages where it is paged (iDRAC: 50 a page, newest first, so the first page is
// enough in steady state).
func (c *conn) readLog(api *gofish.APIClient, uri, after string) ([]LogEntry, error) {
	var page entriesPage
	if err := wire.GetJSON(api, uri, &page); err != nil {
		return nil, err
	}
	members, count, next := page.Members, page.Count, page.NextLink
	for pages := 1; next != "" && pages < maxLogPages; pages++ {
		newest := newestFirst(members)
		if newest && (len(members) >= maxLogEntries || reaches(members, after)) {
			break
		}
		if !newest && pages == 1 && count > len(members) {
			// Oldest first: the new entries are on the last pages. Skip to where the pages
			// left to read end at the last entry.
			want := min(maxLogEntries, (maxLogPages-1)*len(members))
			if m := skipParam.FindStringSubmatch(next); m != nil {
				if at, _ := strconv.Atoi(m[2]); count-want > at {
					next = skipParam.ReplaceAllString(next, "${1}"+strconv.Itoa(count-want))
				}
			}
		}
		var p entriesPage
		if err := wire.GetJSON(api, pathOf(next), &p); err != nil {
			return nil, err
		}
		members, next = append(members, p.Members...), p.NextLink
	}

	var entries []LogEntry
	var links []string
	for i := range members {
		if members[i].inline() {
			entries = append(entries, members[i].entry())
		} else if members[i].ODataID != "" {
			links = append(links, members[i].ODataID)
		}
	}
	if len(links) > 0 {
		fetched, err := c.fetchEntries(api, links, after)
		if err != nil {
			return nil, err
		}
		entries = append(entries, fetched...)
	}
	return newerThan(entries, after, maxLogEntries), nil
}

// newestLogID is the Id of the newest entry of an Entries collection, read as cheaply as the
// collection allows: its first page when newest first, its last when oldest first; entries'
// bodies only where bare links with Ids that say nothing leave the ends to be read. "" for an
// empty log.
func (c *conn) newestLogID(api *gofish.APIClient, uri string) (string, error) {
	var page entriesPage
	if err := wire.GetJSON(api, uri, &page); err != nil {
		return "", err
	}
	members := page.Members
	if page.NextLink != "" && !newestFirst(members) && page.Count > len(members) && len(members) > 0 {
		if m := skipParam.FindStringSubmatch(page.NextLink); m != nil {
			var last entriesPage
			next := skipParam.ReplaceAllString(page.NextLink, "${1}"+strconv.Itoa(page.Count-len(members)))
			if err := wire.GetJSON(api, pathOf(next), &last); err != nil {
				return "", err
			}
			members = append(members, last.Members...)
		}
	}
	var entries, links []LogEntry
	for i := range members {
		switch {
		case members[i].inline():
			entries = append(entries, members[i].entry())
		case members[i].ODataID != "":
			links = append(links, LogEntry{ID: wire.LastSegment(members[i].ODataID), Origin: members[i].ODataID})
		}
	}
	if len(links) > 0 {
		if !allNumeric(links) {
			// Read the two ends: the later one is the newest.
			ends := []string{links[0].Origin}
			if len(links) > 1 {
				ends = append(ends, links[len(links)-1].Origin)
			}
			links = nil
			for _, l := range ends {
				var r rawLogEntry
				if err := wire.GetJSON(api, l, &r); err != nil {
					return "", err
				}
				entries = append(entries, r.entry())
			}
		}
		entries = append(entries, links...)
	}
	if len(entries) == 0 {
		return "", nil
	}
	sortEntries(entries)
	return entries[len(entries)-1].ID, nil
}

// fetchEntries reads, one by one, the entries of a collection of bare links that can be newer
// than after, oldest first. Numeric Ids (iLO) say which without reading; otherwise the ends of
// the collection tell its order. An entry gone meanwhile is skipped; a read that fails ends the
// batch with the entries before it, so that the caller's next after stops short of it.
func (c *conn) fetchEntries(api *gofish.APIClient, links []string, after string) ([]LogEntry, error) {
	read := func(uri string) (LogEntry, error) {
		var r rawLogEntry
		if err := wire.GetJSON(api, uri, &r); err != nil {
			return LogEntry{}, err
		}
		if r.ODataID == "" {
			r.ODataID = uri
		}
		return r.entry(), nil
	}
	ids := make([]LogEntry, len(links))
	for i, l := range links {
		ids[i] = LogEntry{ID: wire.LastSegment(l), Origin: l} // Origin carries the link until read
	}
	var todo []LogEntry
	var known []LogEntry
	if allNumeric(ids) {
		todo = newerThan(ids, after, maxLogEntries)
	} else {
		// Order unknown: read both ends to learn it.
		first, err := read(links[0])
		if err != nil {
			return nil, err
		}
		known = append(known, first)
		oldestFirst := true
		if len(links) > 1 {
			last, err := read(links[len(links)-1])
			if err != nil {
				return nil, err
			}
			known = append(known, last)
			oldestFirst = !last.Created.Before(first.Created)
		}
		ordered := slices.Clone(ids)
		if !oldestFirst {
			slices.Reverse(ordered)
		}
		if i := slices.IndexFunc(ordered, func(e LogEntry) bool { return e.ID == after }); i >= 0 {
			ordered = ordered[i+1:]
		}
		todo = ordered[max(0, len(ordered)-maxLogEntries):]
	}
	out := make([]LogEntry, 0, len(todo))
	for _, t := range todo {
		if i := slices.IndexFunc(known, func(e LogEntry) bool { return e.ID == t.ID }); i >= 0 {
			out = append(out, known[i])
			continue
		}
		e, err := read(t.Origin)
		switch {
		case err == nil:
			out = append(out, e)
		case ReasonOf(err) == ReasonNotFound:
			continue // overwritten since the listing
		case len(out) > 0:
			c.log.V(1).Info("stopped reading log entries", "entry", t.Origin, "error", err.Error())
			return out, nil
		default:
			return nil, err
		}
	}
	return out, nil
}

// newestFirst says whether a collection lists its newest entry first (iDRAC), by Ids where
// numeric, else by Created.
func newestFirst(ms []rawLogEntry) bool {
	if len(ms) < 2 {
		return false
	}
	a, b := ms[0].entry(), ms[len(ms)-1].entry()
	if x, ok := numericID(a.ID); ok {
		if y, ok := numericID(b.ID); ok {
			return x > y
		}
	}
	return a.Created.After(b.Created)
}

// reaches says whether a newest-first listing has come down to after: the rest is older.
func reaches(ms []rawLogEntry, after string) bool {
	if after == "" {
		return false
	}
	an, numeric := numericID(after)
	for i := range ms {
		id := ms[i].entry().ID
		if id == after {
			return true
		}
		if n, ok := numericID(id); ok && numeric && n < an {
			return true
		}
	}
	return false
}

func numericID(id string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
	return n, err == nil
}

func allNumeric(es []LogEntry) bool {
	for _, e := range es {
		if _, ok := numericID(e.ID); !ok {
			return false
		}
	}
	return true
}

// sortEntries puts entries oldest first: by Id where every Id is a number (SEL record Ids grow
// with every entry, even while the BMC's clock is wrong: entries logged before it is set carry
// 1970 or 2000), else by Created, then Id.
func sortEntries(es []LogEntry) {
	if allNumeric(es) {
		slices.SortStableFunc(es, func(a, b LogEntry) int {
			x, _ := numericID(a.ID)
			y, _ := numericID(b.ID)
			return cmp.Compare(x, y)
		})
		return
	}
	slices.SortStableFunc(es, func(a, b LogEntry) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		x, xok := numericID(a.ID)
		y, yok := numericID(b.ID)
		if xok && yok {
			return cmp.Compare(x, y)
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// newerThan sorts es oldest first and returns those after the entry with Id after, at most the
// newest limit. An after no longer in the log was overwritten (the entries with greater numeric
// Ids are new) or the log was cleared (every Id lower, or Ids that say nothing): then all is new.
func newerThan(es []LogEntry, after string, limit int) []LogEntry {
	sortEntries(es)
	start := 0
	if after != "" {
		if i := slices.IndexFunc(es, func(e LogEntry) bool { return e.ID == after }); i >= 0 {
			start = i + 1
		} else if an, ok := numericID(after); ok && allNumeric(es) && len(es) > 0 {
			if top, _ := numericID(es[len(es)-1].ID); top > an {
				start = slices.IndexFunc(es, func(e LogEntry) bool { n, _ := numericID(e.ID); return n > an })
			}
		}
	}
	out := es[start:]
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// normalizeSeverity spells a severity as Redfish does. Older BMCs write other words.
func normalizeSeverity(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return ""
	case "ok", "informational", "info", "normal", "none":
		return "OK"
	case "warning", "minor", "degraded", "caution":
		return "Warning"
	case "critical", "major", "error", "fatal", "failed", "nonrecoverable":
		return "Critical"
	}
	return s
}

var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00", // no seconds (the DMTF mockups)
	"2006-01-02T15:04:05",    // no zone: UTC
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
}

// parseTime reads a Redfish timestamp, in UTC; zero when absent or unreadable.
func parseTime(s string) time.Time {
	s = strings.TrimSpace(s)
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}
