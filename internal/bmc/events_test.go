package bmc_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// eventReceiver is a subscriber's endpoint: every event POSTed to it, parsed, goes to the test.
func eventReceiver(t *testing.T) (*httptest.Server, chan *bmc.Event) {
	t.Helper()
	got := make(chan *bmc.Event, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := bmc.ParseEvent(body)
		if err != nil {
			t.Errorf("event %s: %v", body, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- ev
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestEventSubscriptionAgainstEmulator(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	s := b.Systems()[0]
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	dest, got := eventReceiver(t)

	info, err := c.EventService(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Enabled || !slices.Contains(info.EventFormatTypes, "Event") || info.SubscriptionsURI != "/redfish/v1/EventService/Subscriptions" ||
		info.DeliveryRetryAttempts != 3 || info.DeliveryRetryInterval != time.Second {
		t.Fatalf("event service %+v", info)
	}

	uri, err := c.Subscribe(ctx, dest.URL+"/events", "metalhub/server-1")
	if err != nil {
		t.Fatal(err)
	}
	if uri != "/redfish/v1/EventService/Subscriptions/1" {
		t.Fatalf("subscription at %q", uri)
	}
	if subs := b.Subscriptions(); len(subs) != 1 || subs[0].EventFormatType != "Event" || len(subs[0].EventTypes) != 0 || subs[0].Protocol != "Redfish" {
		t.Fatalf("the BMC's subscriptions %+v (a service that lists formats gets EventFormatType)", subs)
	}
	subs, err := c.Subscriptions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0] != (bmc.Subscription{URI: uri, Destination: dest.URL + "/events", Context: "metalhub/server-1", Protocol: "Redfish"}) {
		t.Fatalf("subscriptions %+v", subs)
	}

	in := s.InjectLogEntry(redfish.LogEntry{Severity: "Critical", Message: "GPU 2 fell off the bus.", SensorType: "Add-in Card"})
	var ev *bmc.Event
	select {
	case ev = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	if ev.Context != "metalhub/server-1" || len(ev.Events) != 1 {
		t.Fatalf("event %+v", ev)
	}
	r := ev.Events[0]
	if r.Severity != "Critical" || r.Message != in.Message || r.MessageID != in.MessageID || r.Origin != "/redfish/v1/Systems/"+s.ID() ||
		!r.EventTimestamp.Equal(in.Created) || r.EventID == "" || r.LogEntry != "/redfish/v1/Systems/"+s.ID()+"/LogServices/SEL/Entries/"+in.ID {
		t.Fatalf("event record %+v", r)
	}

	if err := c.Unsubscribe(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if err := c.Unsubscribe(ctx, uri); err != nil {
		t.Fatalf("unsubscribing twice: %v", err)
	}
	if subs, err := c.Subscriptions(ctx); err != nil || len(subs) != 0 {
		t.Fatalf("after unsubscribe: %+v %v", subs, err)
	}
	var actions []string
	for _, rec := range e.Records() {
		actions = append(actions, rec.Action)
	}
	if !slices.Equal(actions, []string{redfish.ActionSubscribe, redfish.ActionUnsubscribe}) {
		t.Fatalf("records %v", actions)
	}

	if _, err := c.Subscribe(ctx, "/events", "x"); bmc.ReasonOf(err) != bmc.ReasonInvalidConfig {
		t.Fatalf("relative destination: %v, want %s", err, bmc.ReasonInvalidConfig)
	}
	b.SetFaults(redfish.Faults{NoEventService: true})
	if _, err := c.EventService(ctx); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("EventService without one: %v", err)
	}
	if _, err := c.Subscribe(ctx, dest.URL, "x"); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("Subscribe without an EventService: %v", err)
	}
	if _, err := c.Subscriptions(ctx); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("Subscriptions without an EventService: %v", err)
	}
}

func TestEventSubscriptionVendorTrees(t *testing.T) {
	ctx := context.Background()

	t.Run("dell", func(t *testing.T) {
		// iDRAC lists event types: it gets them, with the format; it answers with an absolute
		// Location.
		v, srv := serveVendor(t, "dell")
		v.subscribe = func(w http.ResponseWriter, body map[string]any) {
			w.Header().Set("Location", "https://idrac.example/redfish/v1/EventService/Subscriptions/c1a71140-ba1d-11e9-842f-d094662a05e6")
			w.WriteHeader(http.StatusCreated)
		}
		uri, err := vendorConn(t, srv).Subscribe(ctx, "https://metalhub.example/events", "metalhub")
		if err != nil {
			t.Fatal(err)
		}
		if uri != "/redfish/v1/EventService/Subscriptions/c1a71140-ba1d-11e9-842f-d094662a05e6" {
			t.Errorf("subscription %q", uri)
		}
		if posts := v.posted(); len(posts) != 1 || posts[0]["EventFormatType"] != "Event" || posts[0]["EventTypes"] == nil || posts[0]["Protocol"] != "Redfish" {
			t.Errorf("posted %v", posts)
		}
	})

	t.Run("openbmc refuses EventTypes", func(t *testing.T) {
		v, srv := serveVendor(t, "openbmc")
		v.subscribe = func(w http.ResponseWriter, body map[string]any) {
			if _, ok := body["EventTypes"]; ok {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":{"code":"Base.1.13.0.PropertyUnknown","message":"EventTypes"}}`))
				return
			}
			w.Header().Set("Location", "/redfish/v1/EventService/Subscriptions/2039441")
			w.WriteHeader(http.StatusCreated)
		}
		uri, err := vendorConn(t, srv).Subscribe(ctx, "https://metalhub.example/events", "metalhub")
		if err != nil {
			t.Fatal(err)
		}
		if posts := v.posted(); uri != "/redfish/v1/EventService/Subscriptions/2039441" || len(posts) != 2 || posts[1]["EventTypes"] != nil {
			t.Errorf("subscription %q after posts %v", uri, posts)
		}
	})

	t.Run("hpe lists bare links", func(t *testing.T) {
		_, srv := serveVendor(t, "hpe")
		c := vendorConn(t, srv)
		info, err := c.EventService(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.EventFormatTypes) != 0 || !slices.Contains(info.EventTypes, "Alert") || info.DeliveryRetryInterval != 30*time.Second {
			t.Errorf("event service %+v", info)
		}
		subs, err := c.Subscriptions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(subs) != 1 || subs[0] != (bmc.Subscription{URI: "/redfish/v1/EventService/Subscriptions/1/", Destination: "https://192.0.2.50/ilo-events", Context: "oneview", Protocol: "Redfish"}) {
			t.Errorf("subscriptions %+v", subs)
		}
	})

	t.Run("supermicro has none", func(t *testing.T) {
		_, srv := serveVendor(t, "supermicro")
		if _, err := vendorConn(t, srv).Subscribe(ctx, "https://metalhub.example/events", "metalhub"); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
			t.Fatalf("Subscribe: %v, want %s", err, bmc.ReasonUnsupported)
		}
	})
}
