package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sel"
)

// Subscription actions in the recorder (Record.Subscription names the EventDestination).
const (
	ActionSubscribe   = "Subscribe"
	ActionUnsubscribe = "Unsubscribe"
)

const (
	// maxSubscriptions caps subscriptions per BMC, as BMCs do (iDRAC: 8, iLO: 10 or 20).
	maxSubscriptions = 16
	// eventQueue is how many events wait for one subscription's destination; more are dropped,
	// as a BMC's bounded queue drops them.
	eventQueue = 256
	// DeliveryTimeout bounds one POST to a destination.
	DeliveryTimeout = 5 * time.Second
	// maxDeliveries bounds the delivery log (Deliveries).
	maxDeliveries = 10000
)

// Subscription is one event subscription (EventDestination) as a test sees it.
type Subscription struct {
	ID              string   `json:"id"`
	Destination     string   `json:"destination"`
	Context         string   `json:"context,omitempty"`
	Protocol        string   `json:"protocol"`
	EventFormatType string   `json:"eventFormatType"`
	EventTypes      []string `json:"eventTypes,omitempty"`
	// RegistryPrefixes and ResourceTypes filter what is sent (empty: everything).
	RegistryPrefixes []string `json:"registryPrefixes,omitempty"`
	ResourceTypes    []string `json:"resourceTypes,omitempty"`
}

// Delivery is the outcome of one event sent (or not) to one subscription.
type Delivery struct {
	Time         time.Time `json:"time"`
	Subscription string    `json:"subscription"`
	EventID      string    `json:"eventId"`
	SystemID     string    `json:"systemId,omitempty"`
	// Outcome is Delivered, Failed (every try failed) or Dropped (the BMC was down or its
	// queue full: never sent).
	Outcome  string `json:"outcome"`
	Attempts int    `json:"attempts,omitempty"`
	// Status is the destination's last HTTP status, Error the last transport error.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Delivery outcomes.
const (
	DeliveryDelivered = "Delivered"
	DeliveryFailed    = "Failed"
	DeliveryDropped   = "Dropped"
)

// subscription is a live one: its destination's queue and the worker that empties it.
type subscription struct {
	Subscription
	headers map[string]string // HttpHeaders: sent with every event, never shown or logged
	queue   chan pendingEvent
	ctx     context.Context
	cancel  context.CancelFunc
}

type pendingEvent struct {
	id, systemID string
	body         []byte
}

const v1 = rfhttp.V1

// Host is what the EventService needs of its BMC.
type Host interface {
	// Down says the BMC can send nothing now: it hangs, drops connections, fails every request,
	// restarts after an update, or has no EventService.
	Down() bool
	// Retry is how often (after the first try) and how far apart a delivery is tried.
	Retry() (attempts int, interval time.Duration)
	// Client is the HTTP client deliveries are POSTed with.
	Client() *http.Client
	// Logger logs failed deliveries.
	Logger() logr.Logger
	// Record records a subscription made or deleted by the request r.
	Record(r *http.Request, action, subscription, destination string)
}

// Init readies the service of the BMC with index bmc.
func (ev *Service) Init(bmc int, host Host) { ev.bmc, ev.host = bmc, host }

// Service is one BMC's EventService: its subscriptions, their queues and workers, and the log
// of what became of each event.
type Service struct {
	host Host
	bmc  int

	mu     sync.Mutex
	next   int
	subs   []*subscription
	closed bool
	wg     sync.WaitGroup

	seq atomic.Int64 // event ids

	logMu      sync.Mutex
	deliveries []Delivery
}

// Subscriptions lists the BMC's event subscriptions in creation order.
func (ev *Service) Subscriptions() []Subscription {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	out := make([]Subscription, len(ev.subs))
	for i, s := range ev.subs {
		out[i] = s.Subscription
	}
	return out
}

// Deliveries lists what became of the events sent so far, in the order they ended. A test
// waits for an event by polling it (or, better, by receiving at its destination).
func (ev *Service) Deliveries() []Delivery {
	ev.logMu.Lock()
	defer ev.logMu.Unlock()
	return slices.Clone(ev.deliveries)
}

func (ev *Service) logDelivery(d Delivery) {
	d.Time = time.Now()
	ev.logMu.Lock()
	defer ev.logMu.Unlock()
	if len(ev.deliveries) >= maxDeliveries {
		ev.deliveries = slices.Delete(ev.deliveries, 0, maxDeliveries/10)
	}
	ev.deliveries = append(ev.deliveries, d)
}

// Shutdown ends every subscription's worker and waits for them.
func (ev *Service) Shutdown() {
	ev.mu.Lock()
	ev.closed = true
	for _, s := range ev.subs {
		s.cancel()
	}
	ev.mu.Unlock()
	ev.wg.Wait()
}

// Publish queues an event for the entry e of system systemID to every subscription that wants it.
// Delivery is asynchronous: nothing here waits for a destination.
func (ev *Service) Publish(systemID string, e sel.Entry) {
	ev.mu.Lock()
	subs := slices.Clone(ev.subs)
	closed := ev.closed
	ev.mu.Unlock()
	if closed || len(subs) == 0 {
		return
	}
	id := strconv.FormatInt(ev.seq.Add(1), 10)
	sp := v1 + "/Systems/" + systemID
	record := rfhttp.Obj{
		"EventType": "Alert", "EventId": id, "EventTimestamp": e.Created.Format(time.RFC3339),
		"Severity": e.Severity, "MessageSeverity": e.Severity, "Message": e.Message, "MessageId": e.MessageID,
		"MessageArgs": []string{}, "MemberId": "0",
		"OriginOfCondition": rfhttp.Link(sp),
		"LogEntry":          rfhttp.Link(sp + "/LogServices/" + sel.ID + "/Entries/" + e.ID),
	}
	prefix, _, _ := strings.Cut(e.MessageID, ".")
	down := ev.host.Down()
	for _, sub := range subs {
		if !sub.wants(prefix) {
			continue
		}
		if down {
			ev.logDelivery(Delivery{Subscription: sub.ID, EventID: id, SystemID: systemID, Outcome: DeliveryDropped, Error: "BMC down"})
			continue
		}
		body, _ := json.Marshal(rfhttp.Obj{
			"@odata.type": "#Event.v1_7_0.Event", "Id": id, "Name": "Event Array", "Context": sub.Context,
			"Events": []rfhttp.Obj{record},
		})
		select {
		case sub.queue <- pendingEvent{id: id, systemID: systemID, body: body}:
		default:
			ev.logDelivery(Delivery{Subscription: sub.ID, EventID: id, SystemID: systemID, Outcome: DeliveryDropped, Error: "queue full"})
		}
	}
}

// wants says whether the subscription's filters let an Alert of the registry prefix through.
func (s *subscription) wants(prefix string) bool {
	if len(s.EventTypes) > 0 && !slices.Contains(s.EventTypes, "Alert") {
		return false
	}
	if len(s.RegistryPrefixes) > 0 && !slices.Contains(s.RegistryPrefixes, prefix) {
		return false
	}
	if len(s.ResourceTypes) > 0 && !slices.ContainsFunc(s.ResourceTypes, func(t string) bool {
		return t == "ComputerSystem" || t == "LogEntry" || t == "LogService" || t == "Systems"
	}) {
		return false
	}
	return true
}

// work delivers the subscription's events one at a time, in order, until it is deleted or the
// emulator closes.
func (ev *Service) work(sub *subscription) {
	defer ev.wg.Done()
	for {
		select {
		case <-sub.ctx.Done():
			return
		case pe := <-sub.queue:
			ev.deliver(sub, pe)
		}
	}
}

// deliver POSTs one event, retrying a failure EventRetryAttempts times.
func (ev *Service) deliver(sub *subscription, pe pendingEvent) {
	attempts, interval := ev.host.Retry()
	d := Delivery{Subscription: sub.ID, EventID: pe.id, SystemID: pe.systemID}
	for {
		if ev.host.Down() {
			d.Outcome, d.Error = DeliveryDropped, "BMC down"
			ev.logDelivery(d)
			return
		}
		d.Attempts++
		d.Status, d.Error = 0, ""
		status, err := ev.post(sub, pe.body)
		if err == nil && status/100 == 2 {
			d.Outcome, d.Status = DeliveryDelivered, status
			ev.logDelivery(d)
			return
		}
		if err != nil {
			d.Error = err.Error()
		}
		d.Status = status
		if sub.ctx.Err() != nil {
			return // deleted or closed: nothing more to say
		}
		if d.Attempts > attempts {
			break
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-sub.ctx.Done():
			t.Stop()
			return
		}
	}
	d.Outcome = DeliveryFailed
	ev.logDelivery(d)
	ev.host.Logger().V(1).Info("event delivery failed", "bmc", ev.bmc, "subscription", sub.ID,
		"destination", redactURL(sub.Destination), "attempts", d.Attempts, "status", d.Status, "error", d.Error)
}

func (ev *Service) post(sub *subscription, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(sub.ctx, http.MethodPost, sub.Destination, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build event request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range sub.headers {
		req.Header.Set(k, v)
	}
	resp, err := ev.host.Client().Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// redactURL drops credentials from a destination for logs and records.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Route serves the EventService and its Subscriptions.
func (ev *Service) Route(w http.ResponseWriter, r *http.Request, segs []string) {
	base := v1 + "/EventService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			attempts, interval := ev.host.Retry()
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#EventService.v1_7_0.EventService", "@odata.id": base, "Id": "EventService",
				"Name": "Event Service", "ServiceEnabled": true, "Status": rfhttp.Status("Enabled"),
				"DeliveryRetryAttempts":        attempts,
				"DeliveryRetryIntervalSeconds": int((interval + time.Second - 1) / time.Second),
				"EventFormatTypes":             []string{"Event"},
				"RegistryPrefixes":             []string{"Base", "ResourceEvent"},
				"ResourceTypes":                []string{"ComputerSystem", "LogEntry"},
				"Subscriptions":                rfhttp.Link(base + "/Subscriptions"),
			})
		}
	case len(segs) == 1 && segs[0] == "Subscriptions":
		rfhttp.ServeCollection(w, r, base+"/Subscriptions", "EventDestinationCollection", "Event Subscriptions Collection", func() []string {
			var ids []string
			for _, s := range ev.Subscriptions() {
				ids = append(ids, base+"/Subscriptions/"+s.ID)
			}
			return ids
		}, ev.subscribe)
	case len(segs) == 2 && segs[0] == "Subscriptions":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodDelete) {
			return
		}
		if r.Method == http.MethodDelete {
			ev.unsubscribe(w, r, segs[1])
			return
		}
		for _, s := range ev.Subscriptions() {
			if s.ID == segs[1] {
				rfhttp.WriteJSON(w, http.StatusOK, subscriptionBody(s))
				return
			}
		}
		rfhttp.NotFound(w, r)
	default:
		rfhttp.NotFound(w, r)
	}
}

func subscriptionBody(s Subscription) rfhttp.Obj {
	body := rfhttp.Obj{
		"@odata.type": "#EventDestination.v1_9_0.EventDestination", "@odata.id": v1 + "/EventService/Subscriptions/" + s.ID,
		"Id": s.ID, "Name": "Event Subscription " + s.ID, "Destination": s.Destination, "Context": s.Context,
		"Protocol": s.Protocol, "EventFormatType": s.EventFormatType, "SubscriptionType": "RedfishEvent",
		"RegistryPrefixes": rfhttp.NonNil(s.RegistryPrefixes), "ResourceTypes": rfhttp.NonNil(s.ResourceTypes),
		// Write-only: the headers may carry the receiver's credentials.
		"HttpHeaders": []rfhttp.Obj{}, "Status": rfhttp.Status("Enabled"),
	}
	if len(s.EventTypes) > 0 {
		body["EventTypes"] = s.EventTypes
	}
	return body
}

var eventTypes = []string{"Alert", "StatusChange", "ResourceAdded", "ResourceUpdated", "ResourceRemoved", "Other"}

// subscribe creates an EventDestination from a POST, as strictly as BMCs do: an unknown
// property, a missing Destination or a Protocol other than Redfish is refused.
func (ev *Service) subscribe(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Destination, Protocol, Context, EventFormatType, SubscriptionType string
		Name, Description, DeliveryRetryPolicy                            string
		EventTypes, RegistryPrefixes, ResourceTypes, MessageIds           []string
		HttpHeaders                                                       []map[string]string //nolint:revive // Redfish's name
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON or has a property the service does not know: "+err.Error())
		return
	}
	u, err := url.Parse(req.Destination)
	switch {
	case req.Destination == "":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyMissing", "The property Destination is a required property and must be included in the request.")
		return
	case err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueFormatError", "The value for the property Destination is of a different format than the property can accept: an http or https URL.")
		return
	case req.Protocol == "":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyMissing", "The property Protocol is a required property and must be included in the request.")
		return
	case req.Protocol != "Redfish":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+req.Protocol+" for the property Protocol is not in the list of acceptable values.")
		return
	case req.EventFormatType != "" && req.EventFormatType != "Event":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+req.EventFormatType+" for the property EventFormatType is not in the list of acceptable values.")
		return
	case req.SubscriptionType != "" && req.SubscriptionType != "RedfishEvent":
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+req.SubscriptionType+" for the property SubscriptionType is not in the list of acceptable values.")
		return
	}
	for _, t := range req.EventTypes {
		if !slices.Contains(eventTypes, t) {
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+t+" for the property EventTypes is not in the list of acceptable values.")
			return
		}
	}
	headers := map[string]string{}
	for _, h := range req.HttpHeaders {
		for k, v := range h {
			headers[k] = v
		}
	}
	sub := &subscription{
		Subscription: Subscription{
			Destination: req.Destination, Context: req.Context, Protocol: req.Protocol, EventFormatType: "Event",
			EventTypes: req.EventTypes, RegistryPrefixes: req.RegistryPrefixes, ResourceTypes: req.ResourceTypes,
		},
		headers: headers,
		queue:   make(chan pendingEvent, eventQueue),
	}
	ev.mu.Lock()
	if ev.closed {
		ev.mu.Unlock()
		rfhttp.WriteError(w, http.StatusServiceUnavailable, "ServiceShuttingDown", "The operation failed because the service is shutting down.")
		return
	}
	if len(ev.subs) >= maxSubscriptions {
		ev.mu.Unlock()
		rfhttp.WriteError(w, http.StatusBadRequest, "CreateLimitReachedForResource", "The create operation failed because the resource has reached the limit of possible resources.")
		return
	}
	ev.next++
	sub.ID = strconv.Itoa(ev.next)
	sub.ctx, sub.cancel = context.WithCancel(context.Background())
	ev.subs = append(ev.subs, sub)
	ev.wg.Add(1)
	go ev.work(sub)
	ev.mu.Unlock()

	loc := v1 + "/EventService/Subscriptions/" + sub.ID
	ev.host.Record(r, ActionSubscribe, loc, redactURL(sub.Destination))
	w.Header().Set("Location", loc)
	rfhttp.WriteJSON(w, http.StatusCreated, subscriptionBody(sub.Subscription))
}

// unsubscribe deletes a subscription: its worker ends and what it had queued is not sent.
func (ev *Service) unsubscribe(w http.ResponseWriter, r *http.Request, id string) {
	ev.mu.Lock()
	i := slices.IndexFunc(ev.subs, func(s *subscription) bool { return s.ID == id })
	var sub *subscription
	if i >= 0 {
		sub = ev.subs[i]
		ev.subs = slices.Delete(ev.subs, i, i+1)
		sub.cancel()
	}
	ev.mu.Unlock()
	if sub == nil {
		rfhttp.NotFound(w, r)
		return
	}
	ev.host.Record(r, ActionUnsubscribe, v1+"/EventService/Subscriptions/"+id, redactURL(sub.Destination))
	w.WriteHeader(http.StatusNoContent)
}
