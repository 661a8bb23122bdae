package logs

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func ids(es []Entry) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return fmt.Sprint(out)
}

func entriesWith(idsAndTimes ...any) []Entry {
	var out []Entry
	for i := 0; i < len(idsAndTimes); i += 2 {
		out = append(out, Entry{ID: idsAndTimes[i].(string), Created: time.Unix(int64(idsAndTimes[i+1].(int)), 0)})
	}
	return out
}

func TestNewerThan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		after   string
		limit   int
		want    string
	}{
		{"all, oldest first", entriesWith("1", 10, "2", 20, "3", 30), "", 64, "[1 2 3]"},
		{"newest first (iDRAC) comes out oldest first", entriesWith("3", 30, "2", 20, "1", 10), "", 64, "[1 2 3]"},
		{"after one", entriesWith("1", 10, "2", 20, "3", 30), "1", 64, "[2 3]"},
		{"after the last: nothing", entriesWith("1", 10, "2", 20, "3", 30), "3", 64, "[]"},
		{"numeric, not lexical", entriesWith("9", 90, "10", 100, "11", 110), "9", 64, "[10 11]"},
		// A SEL entry logged before the BMC's clock was set: its Id still says it is new.
		{"clock not set yet", entriesWith("1", 1000, "2", 2000, "3", 0), "2", 64, "[3]"},
		{"limit keeps the newest", entriesWith("1", 10, "2", 20, "3", 30, "4", 40), "", 2, "[3 4]"},
		{"after overwritten (wrapped)", entriesWith("5", 50, "6", 60, "7", 70), "3", 64, "[5 6 7]"},
		{"after gone, some older", entriesWith("2", 20, "6", 60, "7", 70), "4", 64, "[6 7]"},
		{"cleared and restarted", entriesWith("1", 100, "2", 200), "57", 64, "[1 2]"},
		{"cleared, Ids continued", entriesWith("58", 100), "57", 64, "[58]"},
		{"empty log", nil, "57", 64, "[]"},
		{"opaque Ids by time", entriesWith("1700000100", 1700000100, "1700000000_1", 1700000000, "1700000000", 1700000000), "1700000000", 64, "[1700000000_1 1700000100]"},
		{"opaque Ids, after gone", entriesWith("b", 20, "a", 10), "z", 64, "[a b]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(newerThan(slices.Clone(tc.entries), tc.after, tc.limit)); got != tc.want {
				t.Errorf("newerThan(%s, %q) = %s, want %s", ids(tc.entries), tc.after, got, tc.want)
			}
		})
	}
}

func TestLogRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{
		{"Sel", rankSEL},
		{"SEL", rankSEL},
		{"System Event Log", rankSEL},
		{"SEL Log Service", rankSEL},
		{"IML", rankIML},
		{"Integrated Management Log", rankIML},
		{"EventLog", rankEvent},
		{"Event", rankEvent},
		{"Log1", rankEvent},
		{"PlatformLog", rankEvent},
		{"Event Log", rankEvent},
		{"Lclog", rankOther},
		{"ActiveLog", rankOther},
		{"Dump", rankExcluded},
		{"Crashdump", rankExcluded},
		{"PostCodes", rankExcluded},
		{"POST Code Log Service", rankExcluded},
		{"Journal", rankExcluded},
		{"HostLogger", rankExcluded},
		{"AuditLog", rankExcluded},
		{"IEL", rankExcluded},
		{"iLO Event Log", rankExcluded},
		{"SL", rankExcluded},
		{"Security Log", rankExcluded},
		{"DiagLogs", rankExcluded},
		{"FaultList", 0},
		{"1", 0},
		{"", 0},
		{"Diesel", 0},
	} {
		if got := logRank(tc.name); got != tc.want {
			t.Errorf("logRank(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2021-03-10T15:34:27-06:00", time.Date(2021, 3, 10, 21, 34, 27, 0, time.UTC)},
		{"2019-05-14T18:26:43Z", time.Date(2019, 5, 14, 18, 26, 43, 0, time.UTC)},
		{"2012-03-07T14:44+06:00", time.Date(2012, 3, 7, 8, 44, 0, 0, time.UTC)},
		{"2024-01-02T03:04:05.123456Z", time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{"2024-01-02T03:04:05", time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"", time.Time{}},
		{"Pre-Init", time.Time{}},
	} {
		if got := ParseTime(tc.in); !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestNormalizeSeverity(t *testing.T) {
	for in, want := range map[string]string{
		"OK": "OK", "ok": "OK", "Informational": "OK", "Warning": "Warning", "WARNING": "Warning", "Critical": "Critical",
		"critical": "Critical", "Error": "Critical", "": "", "Unknown": "Unknown",
	} {
		if got := NormalizeSeverity(in); got != want {
			t.Errorf("NormalizeSeverity(%q) = %q, want %q", in, got, want)
		}
	}
}
