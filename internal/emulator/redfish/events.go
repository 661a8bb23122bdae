package redfish

import (
	"crypto/tls"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/metalhub/metalhub/internal/emulator/redfish/events"
)

// Subscription actions in the recorder (Record.Subscription names the EventDestination).
const (
	ActionSubscribe   = events.ActionSubscribe
	ActionUnsubscribe = events.ActionUnsubscribe
)

// Subscription is one event subscription (EventDestination) as a test sees it.
type Subscription = events.Subscription

// Delivery is the outcome of one event sent (or not) to one subscription.
type Delivery = events.Delivery

// Delivery outcomes.
const (
	DeliveryDelivered = events.DeliveryDelivered
	DeliveryFailed    = events.DeliveryFailed
	DeliveryDropped   = events.DeliveryDropped
)

// eventClient is the emulator's one HTTP client for event deliveries.
type eventClient struct {
	once   sync.Once
	client *http.Client
}

func (e *Emulator) eventHTTP() *http.Client {
	e.events.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{
			MinVersion: tls.VersionTLS12, RootCAs: e.opts.EventRootCAs,
			InsecureSkipVerify: e.opts.EventInsecureSkipVerify, //nolint:gosec // explicit Options opt-in
		}
		tr.Proxy = nil // a BMC posts straight to its destinations
		tr.MaxIdleConnsPerHost = 2
		e.events.client = &http.Client{Transport: tr, Timeout: events.DeliveryTimeout,
			// A receiver that redirects is misconfigured; BMCs do not follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	})
	return e.events.client
}

// Subscriptions lists the BMC's event subscriptions in creation order.
func (b *BMC) Subscriptions() []Subscription { return b.ev.Subscriptions() }

// Deliveries lists what became of the events sent so far, in the order they ended. A test
// waits for an event by polling it (or, better, by receiving at its destination).
func (b *BMC) Deliveries() []Delivery { return b.ev.Deliveries() }

// down says the BMC can send nothing now: it hangs, drops connections, fails every request,
// restarts after an update, or has no EventService.
func (b *BMC) down() bool {
	f := b.faults.Load()
	return f.Hang || f.DropConnection || f.Status >= 500 || f.NoEventService || b.rebooting()
}

// publish queues an event for the entry e of system s to every subscription that wants it.
func (b *BMC) publish(s *System, e LogEntry) { b.ev.Publish(s.hw.ID, e) }

// routeEvents serves the EventService and its Subscriptions.
func (b *BMC) routeEvents(w http.ResponseWriter, r *http.Request, segs []string) {
	b.ev.Route(w, r, segs)
}

// eventHost is the BMC as its EventService sees it.
type eventHost struct{ b *BMC }

func (h eventHost) Down() bool           { return h.b.down() }
func (h eventHost) Client() *http.Client { return h.b.em.eventHTTP() }
func (h eventHost) Logger() logr.Logger  { return h.b.em.opts.Logger }
func (h eventHost) Retry() (int, time.Duration) {
	return h.b.em.opts.EventRetryAttempts, h.b.em.opts.EventRetryInterval
}

func (h eventHost) Record(r *http.Request, action, subscription, destination string) {
	h.b.em.rec.add(Record{Time: time.Now(), BMC: h.b.index, Address: h.b.url, Via: via(r, h.b), Action: action,
		Subscription: subscription, Destination: destination})
}
