package logs

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

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

func allNumeric(es []Entry) bool {
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
func sortEntries(es []Entry) {
	if allNumeric(es) {
		slices.SortStableFunc(es, func(a, b Entry) int {
			x, _ := numericID(a.ID)
			y, _ := numericID(b.ID)
			return cmp.Compare(x, y)
		})
		return
	}
	slices.SortStableFunc(es, func(a, b Entry) int {
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
func newerThan(es []Entry, after string, limit int) []Entry {
	sortEntries(es)
	start := 0
	if after != "" {
		if i := slices.IndexFunc(es, func(e Entry) bool { return e.ID == after }); i >= 0 {
			start = i + 1
		} else if an, ok := numericID(after); ok && allNumeric(es) && len(es) > 0 {
			if top, _ := numericID(es[len(es)-1].ID); top > an {
				start = slices.IndexFunc(es, func(e Entry) bool { n, _ := numericID(e.ID); return n > an })
			}
		}
	}
	out := es[start:]
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// NormalizeSeverity spells a severity as Redfish does. Older BMCs write other words.
func NormalizeSeverity(s string) string {
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

// ParseTime reads a Redfish timestamp, in UTC; zero when absent or unreadable.
func ParseTime(s string) time.Time {
	s = strings.TrimSpace(s)
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}
