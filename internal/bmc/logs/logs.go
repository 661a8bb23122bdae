package logs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
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
)

// Entry is one entry of a system's hardware event log.
type Entry struct {
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

// Find finds the Entries collection of sys's hardware event log: among the system's own
// LogServices (where HPE serves its IML, Supermicro its Log1, OpenBMC its EventLog, newer
// iDRAC their Sel), else among its manager's (older iDRAC's Sel) when that manager manages this
// system alone: a manager shared by several systems logs for all of them.
func Find(api *gofish.APIClient, root *wire.Root, sys *schemas.ComputerSystem) (string, error) {
	var links struct {
		LogServices wire.Link
		Links       struct{ ManagedBy []wire.Link }
	}
	_ = json.Unmarshal(sys.RawData, &links)
	if links.LogServices.ID != "" {
		entries, err := pickLog(api, links.LogServices.ID)
		if err != nil && !absent(err) {
			return "", err
		}
		if entries != "" {
			return entries, nil
		}
	}
	none := wire.New(wire.ReasonUnsupported, "find event log", "system %s has no event log service", sys.ID)
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
		if root.Systems.ID == "" {
			return "", none
		}
		coll, err := schemas.GetCollection(api, root.Systems.ID)
		if err != nil {
			return "", err
		}
		if len(coll.ItemLinks) != 1 {
			return "", none
		}
	}
	entries, err := pickLog(api, mgr.LogServices.ID)
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
	r := wire.ReasonOf(err)
	return r == wire.ReasonNotFound || r == wire.ReasonUnsupported
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
func pickLog(api *gofish.APIClient, collURI string) (string, error) {
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

// FlexString reads a JSON string or number: some BMCs write Ids as numbers.
type FlexString string

func (f *FlexString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = FlexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("neither a string nor a number: %s", b)
	}
	*f = FlexString(n.String())
	return nil
}

type rawLogEntry struct {
	ODataID         string     `json:"@odata.id"`
	ID              FlexString `json:"Id"`
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

func (r *rawLogEntry) entry() Entry {
	id := string(r.ID)
	if id == "" {
		id = wire.LastSegment(r.ODataID)
	}
	return Entry{
		ID: id, Created: ParseTime(r.Created), Severity: NormalizeSeverity(cmp.Or(r.Severity, r.MessageSeverity)),
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

// Read reads the entries newer than after from an Entries collection: one GET when the
// collection holds its entries (most BMCs), plus one per new entry where it holds bare links
// (iLO), plus pages where it is paged (iDRAC: 50 a page, newest first, so the first page is
// enough in steady state).
func Read(api *gofish.APIClient, log logr.Logger, uri, after string) ([]Entry, error) {
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
		if err := wire.GetJSON(api, wire.PathOf(next), &p); err != nil {
			return nil, err
		}
		members, next = append(members, p.Members...), p.NextLink
	}

	var entries []Entry
	var links []string
	for i := range members {
		if members[i].inline() {
			entries = append(entries, members[i].entry())
		} else if members[i].ODataID != "" {
			links = append(links, members[i].ODataID)
		}
	}
	if len(links) > 0 {
		fetched, err := fetchEntries(api, log, links, after)
		if err != nil {
			return nil, err
		}
		entries = append(entries, fetched...)
	}
	return newerThan(entries, after, maxLogEntries), nil
}

// Newest is the Id of the newest entry of an Entries collection, read as cheaply as the
// collection allows: its first page when newest first, its last when oldest first; entries'
// bodies only where bare links with Ids that say nothing leave the ends to be read. "" for an
// empty log.
func Newest(api *gofish.APIClient, uri string) (string, error) {
	var page entriesPage
	if err := wire.GetJSON(api, uri, &page); err != nil {
		return "", err
	}
	members := page.Members
	if page.NextLink != "" && !newestFirst(members) && page.Count > len(members) && len(members) > 0 {
		if m := skipParam.FindStringSubmatch(page.NextLink); m != nil {
			var last entriesPage
			next := skipParam.ReplaceAllString(page.NextLink, "${1}"+strconv.Itoa(page.Count-len(members)))
			if err := wire.GetJSON(api, wire.PathOf(next), &last); err != nil {
				return "", err
			}
			members = append(members, last.Members...)
		}
	}
	var entries, links []Entry
	for i := range members {
		switch {
		case members[i].inline():
			entries = append(entries, members[i].entry())
		case members[i].ODataID != "":
			links = append(links, Entry{ID: wire.LastSegment(members[i].ODataID), Origin: members[i].ODataID})
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
func fetchEntries(api *gofish.APIClient, log logr.Logger, links []string, after string) ([]Entry, error) {
	read := func(uri string) (Entry, error) {
		var r rawLogEntry
		if err := wire.GetJSON(api, uri, &r); err != nil {
			return Entry{}, err
		}
		if r.ODataID == "" {
			r.ODataID = uri
		}
		return r.entry(), nil
	}
	ids := make([]Entry, len(links))
	for i, l := range links {
		ids[i] = Entry{ID: wire.LastSegment(l), Origin: l} // Origin carries the link until read
	}
	var todo []Entry
	var known []Entry
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
		if i := slices.IndexFunc(ordered, func(e Entry) bool { return e.ID == after }); i >= 0 {
			ordered = ordered[i+1:]
		}
		todo = ordered[max(0, len(ordered)-maxLogEntries):]
	}
	out := make([]Entry, 0, len(todo))
	for _, t := range todo {
		if i := slices.IndexFunc(known, func(e Entry) bool { return e.ID == t.ID }); i >= 0 {
			out = append(out, known[i])
			continue
		}
		e, err := read(t.Origin)
		switch {
		case err == nil:
			out = append(out, e)
		case wire.ReasonOf(err) == wire.ReasonNotFound:
			continue // overwritten since the listing
		case len(out) > 0:
			log.V(1).Info("stopped reading log entries", "entry", t.Origin, "error", err.Error())
			return out, nil
		default:
			return nil, err
		}
	}
	return out, nil
}
