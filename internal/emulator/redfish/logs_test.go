package redfish_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func members(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	raw, ok := body["Members"].([]any)
	if !ok {
		t.Fatalf("no Members in %v", body)
	}
	out := make([]map[string]any, len(raw))
	for i, m := range raw {
		out[i] = m.(map[string]any)
	}
	return out
}

func health(t *testing.T, b *redfish.BMC, s *redfish.System) (string, string) {
	t.Helper()
	_, sys := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + s.ID(), basic: true})
	st := sys["Status"].(map[string]any)
	h, _ := st["Health"].(string)
	r, _ := st["HealthRollup"].(string)
	return h, r
}

func TestSELListingInjectionAndClear(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)
	s := b.Systems()[0]
	sp := "/redfish/v1/Systems/" + s.ID()

	_, sys := do(t, b, call{method: "GET", path: sp, basic: true})
	if sys["LogServices"].(map[string]any)["@odata.id"] != sp+"/LogServices" {
		t.Fatalf("system links no LogServices: %v", sys["LogServices"])
	}
	if resp, _ := do(t, b, call{method: "GET", path: sp + "/LogServices"}); resp.StatusCode != 401 {
		t.Fatalf("LogServices without credentials: %d, want 401", resp.StatusCode)
	}
	_, coll := do(t, b, call{method: "GET", path: sp + "/LogServices", basic: true})
	if ms := members(t, coll); len(ms) != 1 || ms[0]["@odata.id"] != sp+"/LogServices/SEL" {
		t.Fatalf("log services %v", coll)
	}
	_, svc := do(t, b, call{method: "GET", path: sp + "/LogServices/SEL", basic: true})
	clear := svc["Actions"].(map[string]any)["#LogService.ClearLog"].(map[string]any)["target"]
	if svc["Id"] != "SEL" || svc["ServiceEnabled"] != true || svc["MaxNumberOfRecords"] != float64(1024) ||
		svc["OverWritePolicy"] != "WrapsWhenFull" || svc["DateTime"] == nil ||
		svc["Entries"].(map[string]any)["@odata.id"] != sp+"/LogServices/SEL/Entries" || clear != sp+"/LogServices/SEL/Actions/LogService.ClearLog" {
		t.Fatalf("SEL service %v", svc)
	}

	// A booted system's SEL holds its boot, inline as most BMCs serve entries.
	_, entries := do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries", basic: true})
	ms := members(t, entries)
	if len(ms) != 2 || entries["Members@odata.count"] != float64(2) || ms[0]["Id"] != "1" || ms[1]["Id"] != "2" ||
		ms[0]["EntryType"] != "SEL" || ms[0]["Severity"] != "OK" || ms[0]["Created"] == nil {
		t.Fatalf("initial entries %v", entries)
	}
	if h, r := health(t, b, s); h != "OK" || r != "OK" {
		t.Fatalf("health %s/%s before any fault", h, r)
	}

	dimm := sp + "/Memory/DIMM0"
	got := s.InjectLogEntry(redfish.LogEntry{Severity: "critical", Message: "Uncorrectable ECC error.", SensorType: "Memory", EntryCode: redfish.EntryAssert, Origin: dimm})
	if got.ID != "3" || got.Severity != redfish.SeverityCritical || got.Created.IsZero() || got.MessageID == "" {
		t.Fatalf("injected %+v", got)
	}
	_, one := do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries/3", basic: true})
	if one["Message"] != "Uncorrectable ECC error." || one["SensorType"] != "Memory" || one["EntryCode"] != "Assert" ||
		one["Severity"] != "Critical" || one["Links"].(map[string]any)["OriginOfCondition"].(map[string]any)["@odata.id"] != dimm {
		t.Fatalf("entry 3 %v", one)
	}
	if h, r := health(t, b, s); h != "Critical" || r != "Critical" || s.Health() != "Critical" {
		t.Fatalf("health %s/%s after a Critical entry", h, r)
	}
	s.InjectLogEntry(redfish.LogEntry{Severity: "Warning", Message: "Fan 2 below lower threshold.", SensorType: "Fan"})
	if s.Health() != "Critical" {
		t.Fatalf("a Warning lowered Critical to %s", s.Health())
	}
	s.InjectLogEntry(redfish.LogEntry{Severity: "OK", Message: "Uncorrectable ECC error.", SensorType: "Memory", EntryCode: redfish.EntryDeassert})
	if s.Health() != "OK" {
		t.Fatalf("a Deassert left health %s", s.Health())
	}

	// $skip and $top, and paging with a nextLink.
	_, page := do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries?$skip=1&$top=2", basic: true})
	if ms := members(t, page); len(ms) != 2 || ms[0]["Id"] != "2" || page["Members@odata.count"] != float64(5) ||
		page["Members@odata.nextLink"] != sp+"/LogServices/SEL/Entries?$skip=3" {
		t.Fatalf("$skip/$top page %v", page)
	}
	b.SetLogPageSize(4)
	_, page = do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries", basic: true})
	if ms := members(t, page); len(ms) != 4 || page["Members@odata.nextLink"] != sp+"/LogServices/SEL/Entries?$skip=4" {
		t.Fatalf("first page %v", page)
	}
	_, page = do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries?$skip=4", basic: true})
	if ms := members(t, page); len(ms) != 1 || ms[0]["Id"] != "5" || page["Members@odata.nextLink"] != nil {
		t.Fatalf("last page %v", page)
	}
	if resp, _ := do(t, b, call{method: "GET", path: sp + "/LogServices/SEL/Entries?$top=x", basic: true}); resp.StatusCode != 400 {
		t.Fatalf("bad $top: %d, want 400", resp.StatusCode)
	}

	// ClearLog empties the log, sets health back and is recorded; Ids continue.
	s.InjectLogEntry(redfish.LogEntry{Severity: "Critical", Message: "PSU 1 failure.", SensorType: "Power Supply / Converter"})
	if resp, _ := do(t, b, call{method: "POST", path: clear.(string), basic: true, body: map[string]any{}}); resp.StatusCode != 204 {
		t.Fatalf("ClearLog: %d", resp.StatusCode)
	}
	if n := len(s.LogEntries()); n != 0 || s.Health() != "OK" {
		t.Fatalf("after ClearLog: %d entries, health %s", n, s.Health())
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].Action != redfish.ActionClearLog || recs[0].SystemID != s.ID() {
		t.Fatalf("records %+v", recs)
	}
	if got := s.InjectLogEntry(redfish.LogEntry{Message: "GPU 3 fell off the bus.", SensorType: "Add-in Card", Severity: "Critical"}); got.ID != "7" {
		t.Fatalf("Id after ClearLog %q, want 7", got.ID)
	}

	b.SetFaults(redfish.Faults{NoLogServices: true})
	if _, sys := do(t, b, call{method: "GET", path: sp, basic: true}); sys["LogServices"] != nil {
		t.Fatalf("NoLogServices still links them")
	}
	if resp, _ := do(t, b, call{method: "GET", path: sp + "/LogServices", basic: true}); resp.StatusCode != 404 {
		t.Fatalf("NoLogServices: %d, want 404", resp.StatusCode)
	}
}

// The SEL wraps when full: the oldest entries go, the newest stay.
func TestSELWrapsWhenFull(t *testing.T) {
	e, err := redfish.New(redfish.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := e.BMC(0).Systems()[0]
	for range 1100 {
		s.InjectLogEntry(redfish.LogEntry{Message: "Chassis intrusion.", SensorType: "Physical Security"})
	}
	entries := s.LogEntries()
	if len(entries) != 1024 || entries[0].ID != "79" || entries[1023].ID != "1102" {
		t.Fatalf("%d entries from %s to %s, want 1024 from 79 to 1102", len(entries), entries[0].ID, entries[len(entries)-1].ID)
	}
}

func TestControlLogAPI(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	ctl := httptest.NewServer(e.ControlHandler())
	defer ctl.Close()
	id := e.BMC(0).SystemIDs()[0]
	logURL := ctl.URL + "/emulator/bmcs/0/systems/" + id + "/log"

	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"critical", `{"severity":"Critical","message":"Correctable ECC limit reached.","sensorType":"Memory","entryCode":"Assert","origin":"/redfish/v1/Systems/` + id + `/Memory/DIMM0"}`, 201},
		{"default severity", `{"message":"Front panel button pressed."}`, 201},
		{"unknown severity", `{"severity":"Fatal","message":"x"}`, 400},
		{"unknown field", `{"severty":"Critical","message":"x"}`, 400},
		{"bad entry code", `{"entryCode":"Asserted","message":"x"}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(logURL, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %s: %d, want %d", tc.body, resp.StatusCode, tc.status)
			}
		})
	}
	resp, err := http.Get(logURL)
	if err != nil {
		t.Fatal(err)
	}
	var entries []redfish.LogEntry
	_ = json.NewDecoder(resp.Body).Decode(&entries)
	resp.Body.Close()
	if len(entries) != 4 || entries[2].Severity != "Critical" || entries[2].Origin == "" || entries[3].Severity != "OK" || entries[3].ID != "4" {
		t.Fatalf("entries over HTTP %+v", entries)
	}
	resp, _ = http.Get(ctl.URL + "/emulator/bmcs/0/systems/" + id)
	var st redfish.SystemState
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Health != "Critical" {
		t.Fatalf("state health %q", st.Health)
	}
	req, _ := http.NewRequest("DELETE", logURL, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("clear: %v %v", err, resp)
	}
	if n := len(e.BMC(0).System(id).LogEntries()); n != 0 {
		t.Fatalf("%d entries after DELETE", n)
	}
}
