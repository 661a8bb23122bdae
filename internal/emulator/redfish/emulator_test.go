package redfish_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func start(t *testing.T, opts redfish.Options) *redfish.Emulator {
	t.Helper()
	e, err := redfish.Start(opts)
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

type call struct {
	method, path, token string
	basic               bool
	body                any
	header              map[string]string
}

func do(t *testing.T, b *redfish.BMC, c call) (*http.Response, map[string]any) {
	t.Helper()
	var body io.Reader
	if c.body != nil {
		raw, _ := json.Marshal(c.body)
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(c.method, b.URL()+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	}
	if c.basic {
		u, p := b.Credentials()
		req.SetBasicAuth(u, p)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp, out
}

func TestServiceRootAuthAndSessions(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)

	resp, root := do(t, b, call{method: "GET", path: "/redfish/v1/"})
	if resp.StatusCode != 200 || root["Systems"] == nil || root["SessionService"] == nil {
		t.Fatalf("service root: %d %v", resp.StatusCode, root)
	}
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/Systems"}); resp.StatusCode != 401 {
		t.Fatalf("unauthenticated Systems: got %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/Systems", basic: true}); resp.StatusCode != 200 {
		t.Fatalf("basic Systems: got %d", resp.StatusCode)
	}
	u, p := b.Credentials()
	resp, _ = do(t, b, call{method: "POST", path: "/redfish/v1/SessionService/Sessions", body: map[string]string{"UserName": u, "Password": p}})
	token, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	if resp.StatusCode != 201 || token == "" || loc == "" {
		t.Fatalf("login: %d token=%q location=%q", resp.StatusCode, token, loc)
	}
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/Systems", token: token}); resp.StatusCode != 200 {
		t.Fatalf("token Systems: got %d", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "DELETE", path: loc, token: token}); resp.StatusCode != 204 {
		t.Fatalf("logout: got %d", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/Systems", token: token}); resp.StatusCode != 401 {
		t.Fatalf("after logout: got %d, want 401", resp.StatusCode)
	}
	if st := b.Stats(); st.SessionsCreated != 1 || st.SessionsDeleted != 1 || st.ActiveSessions != 0 {
		t.Fatalf("stats: %+v", st)
	}

	b.SetFaults(redfish.Faults{NoSessionService: true})
	_, root = do(t, b, call{method: "GET", path: "/redfish/v1/"})
	if root["SessionService"] != nil {
		t.Fatalf("NoSessionService still advertises SessionService")
	}
	if resp, _ := do(t, b, call{method: "POST", path: "/redfish/v1/SessionService/Sessions", body: map[string]string{"UserName": u, "Password": p}}); resp.StatusCode != 404 {
		t.Fatalf("login without SessionService: got %d, want 404", resp.StatusCode)
	}
}

func TestResetBootOverrideETagAndHook(t *testing.T) {
	events := make(chan redfish.BootEvent, 4)
	e := start(t, redfish.Options{BMCs: 1, SystemsPerBMC: 2, PowerDelay: 20 * time.Millisecond, Seed: 7,
		OnBoot: func(ev redfish.BootEvent) { events <- ev }})
	b := e.BMC(0)
	s := b.Systems()[1]
	path := "/redfish/v1/Systems/" + s.ID()

	resp, sys := do(t, b, call{method: "GET", path: path, basic: true})
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || etag == "" || sys["@odata.etag"] != etag {
		t.Fatalf("system GET: %d etag=%q body etag=%v", resp.StatusCode, etag, sys["@odata.etag"])
	}
	if resp, _ := do(t, b, call{method: "POST", path: path + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "Bogus"}}); resp.StatusCode != 400 {
		t.Fatalf("bogus reset type: got %d, want 400", resp.StatusCode)
	}

	boot := map[string]any{"Boot": map[string]string{"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Pxe"}}
	if resp, _ := do(t, b, call{method: "PATCH", path: path, basic: true, body: boot, header: map[string]string{"If-Match": `W/"999"`}}); resp.StatusCode != 412 {
		t.Fatalf("stale If-Match: got %d, want 412", resp.StatusCode)
	}
	b.SetFaults(redfish.Faults{StrictETag: true})
	if resp, _ := do(t, b, call{method: "PATCH", path: path, basic: true, body: boot}); resp.StatusCode != 412 {
		t.Fatalf("strict mode without If-Match: got %d, want 412", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "PATCH", path: path, basic: true, body: boot, header: map[string]string{"If-Match": etag}}); resp.StatusCode/100 != 2 {
		t.Fatalf("PATCH with If-Match: got %d", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "POST", path: path + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "On"}}); resp.StatusCode/100 != 2 {
		t.Fatalf("reset On: got %d", resp.StatusCode)
	}
	if st := s.PowerState(); st != redfish.PowerPoweringOn && st != redfish.PowerOn {
		t.Fatalf("right after reset: %s, want PoweringOn (or On)", st)
	}
	select {
	case ev := <-events:
		if ev.SystemID != s.ID() || ev.Target != "Pxe" || ev.Enabled != "Once" || len(ev.MACs) == 0 || ev.UUID != s.UUID() {
			t.Fatalf("boot event: %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no boot event")
	}
	if st, boot := s.PowerState(), s.Boot(); st != redfish.PowerOn || boot.Enabled != "Disabled" {
		t.Fatalf("after boot: power %s, override %+v (want On, consumed)", st, boot)
	}

	recs := e.Records()
	if len(recs) != 2 || recs[0].Action != redfish.ActionBootOverride || recs[0].Boot.Target != "Pxe" ||
		recs[1].Action != redfish.ActionReset || recs[1].ResetType != "On" || recs[1].SystemID != s.ID() {
		t.Fatalf("records: %+v", recs)
	}
}

func TestControlAPI(t *testing.T) {
	e := start(t, redfish.Options{BMCs: 2, PowerDelay: -1})
	ctl := httptest.NewServer(e.ControlHandler())
	defer ctl.Close()

	req, _ := http.NewRequest("PUT", ctl.URL+"/emulator/bmcs/1/faults", strings.NewReader(`{"status":503,"latency":"1ms","brokenCollections":{"Memory":404}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("set faults: %v %v", err, resp)
	}
	resp.Body.Close()
	if f := e.BMC(1).Faults(); f.Status != 503 || time.Duration(f.Latency) != time.Millisecond || f.BrokenCollections["Memory"] != 404 {
		t.Fatalf("faults not applied: %+v", f)
	}
	if resp, _ := do(t, e.BMC(1), call{method: "GET", path: "/redfish/v1/", basic: true}); resp.StatusCode != 503 {
		t.Fatalf("503 fault: got %d", resp.StatusCode)
	}

	b := e.BMC(0)
	id := b.SystemIDs()[0]
	do(t, b, call{method: "POST", path: "/redfish/v1/Systems/" + id + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "On"}})
	resp, err = http.Get(ctl.URL + "/emulator/records?bmc=0")
	if err != nil {
		t.Fatal(err)
	}
	var recs []redfish.Record
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(recs) != 1 || recs[0].ResetType != "On" || recs[0].SystemID != id || recs[0].Address != b.URL() {
		t.Fatalf("records over HTTP: %+v", recs)
	}
	resp, err = http.Get(ctl.URL + "/emulator/bmcs/0/systems/" + id)
	if err != nil {
		t.Fatal(err)
	}
	var st redfish.SystemState
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.PowerState != redfish.PowerOn {
		t.Fatalf("system state over HTTP: %+v", st)
	}
}

func TestDeterministicInventory(t *testing.T) {
	a, err := redfish.New(redfish.Options{BMCs: 20, SystemsPerBMC: 3, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := redfish.New(redfish.Options{BMCs: 20, SystemsPerBMC: 3, Seed: 42})
	macs := map[string]bool{}
	serials := map[string]bool{}
	vendors := map[string]bool{}
	for i, bm := range a.BMCs() {
		vendors[bm.Vendor()] = true
		for k, s := range bm.Systems() {
			o := b.BMC(i).Systems()[k]
			if s.ID() != o.ID() || s.UUID() != o.UUID() || s.SerialNumber() != o.SerialNumber() {
				t.Fatalf("same seed, different system: %s/%s", s.ID(), o.ID())
			}
			if serials[s.SerialNumber()] {
				t.Fatalf("duplicate serial %s", s.SerialNumber())
			}
			serials[s.SerialNumber()] = true
			for _, m := range s.MACs() {
				if macs[m] {
					t.Fatalf("duplicate MAC %s", m)
				}
				macs[m] = true
			}
		}
	}
	if len(vendors) < 4 {
		t.Fatalf("want varied vendors, got %v", vendors)
	}
}

func TestPowerTransitionsAreAsynchronous(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: time.Hour, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	s := b.Systems()[0]
	reset := func(rt string) {
		t.Helper()
		if resp, _ := do(t, b, call{method: "POST", path: "/redfish/v1/Systems/" + s.ID() + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": rt}}); resp.StatusCode/100 != 2 {
			t.Fatalf("reset %s: %d", rt, resp.StatusCode)
		}
	}
	reset("ForceOff")
	if st := s.PowerState(); st != redfish.PowerPoweringOff {
		t.Fatalf("after ForceOff: %s, want PoweringOff until the delay passes", st)
	}
	b.SetPowerDelay(0)
	reset("On") // a new action supersedes the pending transition
	if st := s.PowerState(); st != redfish.PowerOn {
		t.Fatalf("instant On: %s", st)
	}
}

// A failed power transition starts (PoweringOn), then falls back to where it was; the reset is
// still answered and recorded, as a BMC whose PSU or POST fails does.
func TestFailedPowerTransitionFallsBack(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)
	s := b.Systems()[0]
	b.SetFaults(redfish.Faults{FailPowerTransitions: true})
	if resp, _ := do(t, b, call{method: "POST", path: "/redfish/v1/Systems/" + s.ID() + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "On"}}); resp.StatusCode/100 != 2 {
		t.Fatalf("reset On: %d", resp.StatusCode)
	}
	if st := s.PowerState(); st != redfish.PowerOff {
		t.Fatalf("after a failed On: %s, want Off", st)
	}
	if n := len(e.Records()); n != 1 {
		t.Fatalf("records: %d, want the reset recorded once", n)
	}
	b.ClearFaults()
	if resp, _ := do(t, b, call{method: "POST", path: "/redfish/v1/Systems/" + s.ID() + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "On"}}); resp.StatusCode/100 != 2 {
		t.Fatalf("reset On: %d", resp.StatusCode)
	}
	if st := s.PowerState(); st != redfish.PowerOn {
		t.Fatalf("after a healed On: %s, want On", st)
	}
}

// ErrorAfterEffect carries the action out and records it, then answers an error: the answer
// says nothing about whether it happened, as with a BMC or proxy that fails after acting.
func TestErrorAfterEffectActsThenFails(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	s := b.Systems()[0]
	b.SetFaults(redfish.Faults{ErrorAfterEffect: 502})
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + s.ID(), basic: true}); resp.StatusCode != 200 {
		t.Fatalf("GET under ErrorAfterEffect: %d, want 200", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "POST", path: "/redfish/v1/Systems/" + s.ID() + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": "ForceOff"}}); resp.StatusCode != 502 {
		t.Fatalf("system reset: %d, want 502", resp.StatusCode)
	}
	if st := s.PowerState(); st != redfish.PowerOff {
		t.Fatalf("after the failed-after-effect ForceOff: %s, want Off", st)
	}
	before := b.LastResetTime()
	_, m := do(t, b, call{method: "GET", path: "/redfish/v1/Managers", basic: true})
	mp := m["Members"].([]any)[0].(map[string]any)["@odata.id"].(string)
	if resp, _ := do(t, b, call{method: "POST", path: mp + "/Actions/Manager.Reset", basic: true, body: map[string]string{"ResetType": "ForceRestart"}}); resp.StatusCode != 502 {
		t.Fatalf("manager reset: %d, want 502", resp.StatusCode)
	}
	if !b.LastResetTime().After(before) {
		t.Errorf("manager LastResetTime %s not moved by the reset answered 502", b.LastResetTime())
	}
	if recs := e.Records(); len(recs) != 2 || recs[0].ResetType != "ForceOff" || recs[1].Action != redfish.ActionManagerReset {
		t.Errorf("records %+v, want the ForceOff and the manager reset", recs)
	}
}

// A system's LastResetTime moves when it restarts or powers on, not when it powers off, and is
// shown only where the BMC reports it.
func TestSystemLastResetTime(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	s := b.Systems()[0]
	path := "/redfish/v1/Systems/" + s.ID()
	shown := func() any {
		t.Helper()
		_, sys := do(t, b, call{method: "GET", path: path, basic: true})
		return sys["LastResetTime"]
	}
	reset := func(rt string) {
		t.Helper()
		if resp, _ := do(t, b, call{method: "POST", path: path + "/Actions/ComputerSystem.Reset", basic: true, body: map[string]string{"ResetType": rt}}); resp.StatusCode/100 != 2 {
			t.Fatalf("reset %s: %d", rt, resp.StatusCode)
		}
	}
	b.SetReportsSystemLastResetTime(true)
	first := shown()
	if _, ok := first.(string); !ok {
		t.Fatalf("LastResetTime %v, want a time", first)
	}
	reset("ForceOff")
	if got := shown(); got != first {
		t.Errorf("a power-off moved LastResetTime from %v to %v", first, got)
	}
	reset("On")
	second := shown()
	if second == first {
		t.Errorf("a power-on left LastResetTime at %v", first)
	}
	reset("ForceRestart")
	if got := shown(); got == second {
		t.Errorf("a restart left LastResetTime at %v", second)
	}
	b.SetReportsSystemLastResetTime(false)
	if got := shown(); got != nil {
		t.Errorf("LastResetTime %v shown by a BMC that does not report it", got)
	}
}

// The request journal records nothing until asked, then every request's span and sender.
func TestRequestJournal(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)
	do(t, b, call{method: "GET", path: "/redfish/v1/", header: map[string]string{"User-Agent": "before"}})
	b.JournalRequests(true)
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(20 * time.Millisecond)})
	do(t, b, call{method: "GET", path: "/redfish/v1/Systems", basic: true, header: map[string]string{"User-Agent": "replica-a"}})
	spans := b.RequestSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the one request made while journaling: %+v", len(spans), spans)
	}
	s := spans[0]
	if s.UserAgent != "replica-a" || s.Method != "GET" || s.Path != "/redfish/v1/Systems" || s.End.Sub(s.Start) < 20*time.Millisecond {
		t.Fatalf("span %+v: want replica-a's GET of Systems lasting at least the latency", s)
	}
}
