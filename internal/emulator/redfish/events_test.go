package redfish_test

import (
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// received is one event POST as a receiver saw it.
type received struct {
	auth string
	body map[string]any
}

// receiver is an event destination that hands every POST to the test; fail makes it answer
// 500 that many times first.
func receiver(t *testing.T, tlsServer bool, fail int64) (*httptest.Server, chan received) {
	t.Helper()
	got := make(chan received, 16)
	var failures atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if failures.Add(1) <= fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("event body %q: %v", raw, err)
		}
		got <- received{auth: r.Header.Get("Authorization"), body: body}
		w.WriteHeader(http.StatusNoContent)
	})
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, got
}

func next(t *testing.T, got chan received) received {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no event delivered")
	}
	return received{}
}

// waitDelivery polls the BMC's delivery log until one for the event's subscription ends.
func waitDelivery(t *testing.T, b *redfish.BMC, sub string) redfish.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, d := range b.Deliveries() {
			if d.Subscription == sub {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery for subscription %s: %+v", sub, b.Deliveries())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func subscribe(t *testing.T, b *redfish.BMC, body map[string]any) (string, map[string]any) {
	t.Helper()
	resp, sub := do(t, b, call{method: "POST", path: "/redfish/v1/EventService/Subscriptions", basic: true, body: body})
	if resp.StatusCode != 201 || resp.Header.Get("Location") == "" || sub["@odata.id"] != resp.Header.Get("Location") {
		t.Fatalf("subscribe: %d %v location %q", resp.StatusCode, sub, resp.Header.Get("Location"))
	}
	return resp.Header.Get("Location"), sub
}

func TestEventSubscriptionsAndDelivery(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)
	s := b.Systems()[0]
	dest, got := receiver(t, false, 0)

	_, root := do(t, b, call{method: "GET", path: "/redfish/v1/"})
	if root["EventService"] == nil {
		t.Fatal("service root links no EventService")
	}
	_, svc := do(t, b, call{method: "GET", path: "/redfish/v1/EventService", basic: true})
	if svc["ServiceEnabled"] != true || svc["DeliveryRetryAttempts"] != float64(3) || svc["DeliveryRetryIntervalSeconds"] != float64(1) ||
		svc["Subscriptions"].(map[string]any)["@odata.id"] != "/redfish/v1/EventService/Subscriptions" ||
		len(svc["EventFormatTypes"].([]any)) != 1 || svc["RegistryPrefixes"] == nil || svc["ResourceTypes"] == nil {
		t.Fatalf("event service %v", svc)
	}

	loc, sub := subscribe(t, b, map[string]any{
		"Destination": dest.URL + "/events", "Protocol": "Redfish", "Context": "metalhub-a", "EventFormatType": "Event",
		"HttpHeaders": []map[string]string{{"Authorization": "Bearer receiver-secret"}},
	})
	if sub["Context"] != "metalhub-a" || sub["Destination"] != dest.URL+"/events" || len(sub["HttpHeaders"].([]any)) != 0 {
		t.Fatalf("created subscription %v (HttpHeaders must not be shown)", sub)
	}
	_, coll := do(t, b, call{method: "GET", path: "/redfish/v1/EventService/Subscriptions", basic: true})
	if ms := members(t, coll); len(ms) != 1 || ms[0]["@odata.id"] != loc {
		t.Fatalf("subscriptions %v", coll)
	}
	if _, one := do(t, b, call{method: "GET", path: loc, basic: true}); one["Protocol"] != "Redfish" || one["Context"] != "metalhub-a" {
		t.Fatalf("subscription %v", one)
	}

	entry := s.InjectLogEntry(redfish.LogEntry{Severity: "Critical", Message: "PSU 2 lost input.", SensorType: "Power Supply / Converter"})
	ev := next(t, got)
	if ev.auth != "Bearer receiver-secret" {
		t.Errorf("HttpHeaders not sent: Authorization %q", ev.auth)
	}
	records := ev.body["Events"].([]any)
	rec := records[0].(map[string]any)
	if ev.body["Context"] != "metalhub-a" || ev.body["@odata.type"] != "#Event.v1_7_0.Event" || len(records) != 1 ||
		rec["EventType"] != "Alert" || rec["Severity"] != "Critical" || rec["MessageSeverity"] != "Critical" ||
		rec["Message"] != entry.Message || rec["MessageId"] != entry.MessageID || rec["EventTimestamp"] == nil || rec["EventId"] == nil ||
		rec["OriginOfCondition"].(map[string]any)["@odata.id"] != "/redfish/v1/Systems/"+s.ID() {
		t.Fatalf("event %v", ev.body)
	}
	if d := waitDelivery(t, b, "1"); d.Outcome != redfish.DeliveryDelivered || d.Attempts != 1 || d.SystemID != s.ID() {
		t.Fatalf("delivery %+v", d)
	}

	if resp, _ := do(t, b, call{method: "DELETE", path: loc, basic: true}); resp.StatusCode != 204 {
		t.Fatalf("delete subscription: %d", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "GET", path: loc, basic: true}); resp.StatusCode != 404 {
		t.Fatalf("deleted subscription: %d, want 404", resp.StatusCode)
	}
	if resp, _ := do(t, b, call{method: "DELETE", path: loc, basic: true}); resp.StatusCode != 404 {
		t.Fatalf("deleted twice: %d, want 404", resp.StatusCode)
	}
	// Only the live subscription hears of the next entry: the deleted one is sent nothing.
	subscribe(t, b, map[string]any{"Destination": dest.URL + "/events", "Protocol": "Redfish", "Context": "metalhub-b"})
	s.InjectLogEntry(redfish.LogEntry{Severity: "Warning", Message: "Inlet temperature high.", SensorType: "Temperature"})
	if ev := next(t, got); ev.body["Context"] != "metalhub-b" {
		t.Fatalf("after delete, event for %v", ev.body["Context"])
	}
	waitDelivery(t, b, "2")
	var toA int
	for _, d := range b.Deliveries() {
		if d.Subscription == "1" {
			toA++
		}
	}
	if toA != 1 {
		t.Fatalf("%d deliveries to the deleted subscription, want only the one before", toA)
	}
	var actions []string
	for _, r := range e.Records() {
		actions = append(actions, r.Action+" "+r.Subscription)
	}
	if strings.Join(actions, ",") != "Subscribe "+loc+",Unsubscribe "+loc+",Subscribe /redfish/v1/EventService/Subscriptions/2" {
		t.Fatalf("records %v", actions)
	}
}

func TestSubscriptionValidation(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1})
	b := e.BMC(0)
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"no destination", map[string]any{"Protocol": "Redfish"}},
		{"relative destination", map[string]any{"Destination": "/events", "Protocol": "Redfish"}},
		{"not http", map[string]any{"Destination": "ftp://192.0.2.1/x", "Protocol": "Redfish"}},
		{"no protocol", map[string]any{"Destination": "http://192.0.2.1/x"}},
		{"snmp", map[string]any{"Destination": "http://192.0.2.1/x", "Protocol": "SNMPv2c"}},
		{"metric reports", map[string]any{"Destination": "http://192.0.2.1/x", "Protocol": "Redfish", "EventFormatType": "MetricReport"}},
		{"unknown event type", map[string]any{"Destination": "http://192.0.2.1/x", "Protocol": "Redfish", "EventTypes": []string{"Fire"}}},
		{"unknown property", map[string]any{"Destination": "http://192.0.2.1/x", "Protocol": "Redfish", "Colour": "red"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp, body := do(t, b, call{method: "POST", path: "/redfish/v1/EventService/Subscriptions", basic: true, body: tc.body}); resp.StatusCode != 400 {
				t.Fatalf("got %d %v, want 400", resp.StatusCode, body)
			}
		})
	}
	// The older form, EventTypes instead of EventFormatType, is taken.
	subscribe(t, b, map[string]any{"Destination": "https://192.0.2.1/x", "Protocol": "Redfish", "EventTypes": []string{"Alert"}})
	if subs := b.Subscriptions(); len(subs) != 1 || subs[0].EventTypes[0] != "Alert" {
		t.Fatalf("subscriptions %+v", subs)
	}
	b.SetFaults(redfish.Faults{NoEventService: true})
	if _, root := do(t, b, call{method: "GET", path: "/redfish/v1/"}); root["EventService"] != nil {
		t.Fatal("NoEventService still links it")
	}
	if resp, _ := do(t, b, call{method: "GET", path: "/redfish/v1/EventService", basic: true}); resp.StatusCode != 404 {
		t.Fatalf("NoEventService: %d, want 404", resp.StatusCode)
	}
}

// A failed delivery is retried; a BMC that is down sends nothing.
func TestEventRetryAndDeadBMC(t *testing.T) {
	e := start(t, redfish.Options{PowerDelay: -1, EventRetryInterval: 10 * time.Millisecond})
	b := e.BMC(0)
	s := b.Systems()[0]
	dest, got := receiver(t, false, 2)
	subscribe(t, b, map[string]any{"Destination": dest.URL, "Protocol": "Redfish", "Context": "c"})

	s.InjectLogEntry(redfish.LogEntry{Severity: "Critical", Message: "CPU 1 IERR.", SensorType: "Processor"})
	next(t, got)
	if d := waitDelivery(t, b, "1"); d.Outcome != redfish.DeliveryDelivered || d.Attempts != 3 {
		t.Fatalf("delivery %+v, want delivered at the third try", d)
	}

	for _, f := range []redfish.Faults{{Hang: true}, {DropConnection: true}, {Status: 503}, {NoEventService: true}} {
		b.SetFaults(f)
		before := len(b.Deliveries())
		s.InjectLogEntry(redfish.LogEntry{Severity: "Critical", Message: "CPU 1 IERR.", SensorType: "Processor"})
		ds := b.Deliveries()
		if len(ds) != before+1 || ds[before].Outcome != redfish.DeliveryDropped {
			t.Fatalf("faults %+v: deliveries %+v, want one dropped", f, ds[before:])
		}
	}
	b.ClearFaults()
	select {
	case r := <-got:
		t.Fatalf("a down BMC delivered %v", r.body)
	default:
	}
}

// HTTPS destinations are verified against EventRootCAs; without the receiver's CA every try
// fails.
func TestEventDeliveryTLS(t *testing.T) {
	dest, got := receiver(t, true, 0)
	roots := x509.NewCertPool()
	roots.AddCert(dest.Certificate())

	trusting := start(t, redfish.Options{PowerDelay: -1, EventRootCAs: roots})
	subscribe(t, trusting.BMC(0), map[string]any{"Destination": dest.URL, "Protocol": "Redfish", "Context": "tls"})
	trusting.BMC(0).Systems()[0].InjectLogEntry(redfish.LogEntry{Severity: "Warning", Message: "Fan 1 low.", SensorType: "Fan"})
	if ev := next(t, got); ev.body["Context"] != "tls" {
		t.Fatalf("event %v", ev.body)
	}

	strict := start(t, redfish.Options{PowerDelay: -1, EventRetryAttempts: -1})
	subscribe(t, strict.BMC(0), map[string]any{"Destination": dest.URL, "Protocol": "Redfish", "Context": "tls"})
	strict.BMC(0).Systems()[0].InjectLogEntry(redfish.LogEntry{Severity: "Warning", Message: "Fan 1 low.", SensorType: "Fan"})
	if d := waitDelivery(t, strict.BMC(0), "1"); d.Outcome != redfish.DeliveryFailed || d.Attempts != 1 || !strings.Contains(d.Error, "certificate") {
		t.Fatalf("delivery to an untrusted receiver %+v", d)
	}
}
