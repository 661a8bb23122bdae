package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/logs"
	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// EventServiceInfo describes a BMC's EventService.
type EventServiceInfo struct {
	URI     string `json:"uri"`
	Enabled bool   `json:"enabled"`
	// EventFormatTypes are the formats it sends (Event, MetricReport); empty on older services.
	EventFormatTypes []string `json:"eventFormatTypes,omitempty"`
	// EventTypes are the EventTypesForSubscription of older services (Alert, StatusChange, ...).
	EventTypes       []string `json:"eventTypes,omitempty"`
	RegistryPrefixes []string `json:"registryPrefixes,omitempty"`
	ResourceTypes    []string `json:"resourceTypes,omitempty"`
	SubscriptionsURI string   `json:"subscriptionsURI,omitempty"`
	// DeliveryRetryAttempts and DeliveryRetryInterval say how hard it tries a destination.
	DeliveryRetryAttempts int           `json:"deliveryRetryAttempts,omitempty"`
	DeliveryRetryInterval time.Duration `json:"deliveryRetryInterval,omitempty"`
}

// Subscription is one event subscription (EventDestination) of a BMC.
type Subscription struct {
	URI         string `json:"uri"`
	Destination string `json:"destination"`
	Context     string `json:"context,omitempty"`
	Protocol    string `json:"protocol,omitempty"`
}

type eventServiceBody struct {
	ODataID                      string `json:"@odata.id"`
	ServiceEnabled               *bool
	EventFormatTypes             []string
	EventTypesForSubscription    []string
	RegistryPrefixes             []string
	ResourceTypes                []string
	DeliveryRetryAttempts        int
	DeliveryRetryIntervalSeconds int
	Subscriptions                wire.Link
}

// EventService does the work of bmc.BMC.EventService.
func EventService(ctx context.Context, c wire.Conn) (EventServiceInfo, error) {
	const op = "read event service"
	api, err := c.Client(ctx)
	if err != nil {
		return EventServiceInfo{}, wire.Wrap(op, err)
	}
	if c.Root().EventService.ID == "" {
		return EventServiceInfo{}, wire.New(wire.ReasonUnsupported, op, "service root has no EventService")
	}
	var b eventServiceBody
	if err := wire.GetJSON(api, c.Root().EventService.ID, &b); err != nil {
		if wire.ReasonOf(err) == wire.ReasonNotFound {
			return EventServiceInfo{}, &wire.Error{Reason: wire.ReasonUnsupported, Op: op, Err: err}
		}
		return EventServiceInfo{}, wire.Wrap(op, err)
	}
	return EventServiceInfo{
		URI: c.Root().EventService.ID,
		// A service that does not say is taken as on: a switched-off one says so.
		Enabled:          b.ServiceEnabled == nil || *b.ServiceEnabled,
		EventFormatTypes: b.EventFormatTypes, EventTypes: b.EventTypesForSubscription,
		RegistryPrefixes: b.RegistryPrefixes, ResourceTypes: b.ResourceTypes,
		SubscriptionsURI:      b.Subscriptions.ID,
		DeliveryRetryAttempts: b.DeliveryRetryAttempts,
		DeliveryRetryInterval: time.Duration(b.DeliveryRetryIntervalSeconds) * time.Second,
	}, nil
}

// subscriptionBodies are the EventDestination bodies to try, best first: the current form
// (EventFormatType Event) where the service lists formats, the older one (EventTypes Alert,
// deprecated but what iDRAC and iLO asked for) where it lists event types or nothing. A service
// that refuses the first (400) gets the other.
func subscriptionBodies(info EventServiceInfo, destination, context string) []map[string]any {
	base := func() map[string]any {
		return map[string]any{"Destination": destination, "Protocol": "Redfish", "Context": context}
	}
	modern := base()
	modern["EventFormatType"] = "Event"
	legacy := base()
	legacy["EventTypes"] = []string{"Alert"}
	if slices.Contains(info.EventFormatTypes, "Event") {
		legacy["EventFormatType"] = "Event"
	}
	if len(info.EventFormatTypes) > 0 && len(info.EventTypes) == 0 {
		return []map[string]any{modern, legacy}
	}
	return []map[string]any{legacy, modern}
}

// Subscribe does the work of bmc.BMC.Subscribe.
func Subscribe(ctx context.Context, c wire.Conn, destination, evContext string) (string, error) {
	op := "subscribe to events"
	if u, err := url.Parse(destination); err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", wire.New(wire.ReasonInvalidConfig, op, "destination %q is not an http or https URL", redactedURL(destination))
	}
	op += " at " + redactedURL(destination)
	info, err := EventService(ctx, c)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	if !info.Enabled {
		return "", wire.New(wire.ReasonUnsupported, op, "the EventService is disabled")
	}
	if info.SubscriptionsURI == "" {
		return "", wire.New(wire.ReasonUnsupported, op, "the EventService has no Subscriptions collection")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	var lastErr error
	for _, body := range subscriptionBodies(info, destination, evContext) {
		resp, err := api.Post(info.SubscriptionsURI, body)
		if err != nil {
			lastErr = err
			if wire.ReasonOf(err) == wire.ReasonUnsupported { // 400: try the other form
				continue
			}
			return "", wire.Wrap(op, err)
		}
		uri := resp.Header.Get("Location")
		if uri == "" {
			var s wire.Link
			if json.NewDecoder(resp.Body).Decode(&s) == nil {
				uri = s.ID
			}
		}
		resp.Body.Close()
		if uri == "" {
			return "", wire.New(wire.ReasonUnknown, op, "the BMC answered %d without saying where the subscription is", resp.StatusCode)
		}
		uri = wire.PathOf(uri)
		c.Log().V(1).Info("subscribed to events", "subscription", uri, "destination", redactedURL(destination))
		return uri, nil
	}
	return "", wire.Wrap(op, lastErr)
}

// Unsubscribe does the work of bmc.BMC.Unsubscribe.
func Unsubscribe(ctx context.Context, c wire.Conn, uri string) error {
	op := "unsubscribe " + uri
	if strings.TrimSpace(uri) == "" {
		return wire.New(wire.ReasonInvalidConfig, op, "no subscription URI")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return wire.Wrap(op, err)
	}
	resp, err := api.Delete(wire.PathOf(uri))
	if err != nil {
		if wire.ReasonOf(err) == wire.ReasonNotFound {
			return nil // gone already: what was asked for
		}
		return wire.Wrap(op, err)
	}
	resp.Body.Close()
	c.Log().V(1).Info("unsubscribed from events", "subscription", uri)
	return nil
}

type subscriptionBody struct {
	ODataID     string `json:"@odata.id"`
	Destination string
	Context     string
	Protocol    string
}

// Subscriptions does the work of bmc.BMC.Subscriptions.
func Subscriptions(ctx context.Context, c wire.Conn) ([]Subscription, error) {
	const op = "list event subscriptions"
	info, err := EventService(ctx, c)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if info.SubscriptionsURI == "" {
		return nil, wire.New(wire.ReasonUnsupported, op, "the EventService has no Subscriptions collection")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	var coll struct{ Members []subscriptionBody }
	if err := wire.GetJSON(api, info.SubscriptionsURI, &coll); err != nil {
		return nil, wire.Wrap(op, err)
	}
	out := make([]Subscription, 0, len(coll.Members))
	for _, m := range coll.Members {
		if m.Destination == "" && m.ODataID != "" {
			// A bare link: read the subscription.
			if err := wire.GetJSON(api, m.ODataID, &m); err != nil {
				if wire.ReasonOf(err) == wire.ReasonNotFound {
					continue // deleted meanwhile
				}
				return nil, wire.Wrap(op, err)
			}
		}
		out = append(out, Subscription{URI: wire.PathOf(m.ODataID), Destination: m.Destination, Context: m.Context, Protocol: m.Protocol})
	}
	return out, nil
}

// redactedURL drops credentials from a URL for messages and logs.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Event is a Redfish event POSTed by a BMC to a subscription's destination.
type Event struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
	// Context is the subscription's Context: which subscription (and so which BMC) sent it.
	Context string        `json:"context,omitempty"`
	Events  []EventRecord `json:"events"`
}

// EventRecord is one event of an Event.
type EventRecord struct {
	EventID   string `json:"eventID,omitempty"`
	EventType string `json:"eventType,omitempty"`
	// EventTimestamp is zero when the BMC did not say.
	EventTimestamp time.Time `json:"eventTimestamp"`
	// Severity is OK, Warning or Critical: the MessageSeverity, else the deprecated Severity.
	Severity    string   `json:"severity,omitempty"`
	Message     string   `json:"message,omitempty"`
	MessageID   string   `json:"messageID,omitempty"`
	MessageArgs []string `json:"messageArgs,omitempty"`
	// Origin is the OriginOfCondition's @odata.id: the resource the event is about.
	Origin string `json:"origin,omitempty"`
	// LogEntry is the log entry the event was logged as, where the BMC says.
	LogEntry string `json:"logEntry,omitempty"`
}

type rawEventRecord struct {
	EventID           logs.FlexString `json:"EventId"` // iLO 4 writes EventID: names match case-insensitively
	EventType         string
	EventTimestamp    string
	Severity          string
	MessageSeverity   string
	Message           string
	MessageID         string `json:"MessageId"`
	MessageArgs       []any
	OriginOfCondition json.RawMessage
	Context           string // where Event v1.0 had it (iLO 5)
	LogEntry          wire.Link
}

type rawEvent struct {
	ID      logs.FlexString `json:"Id"`
	Name    string
	Context string
	Events  []rawEventRecord
}

// ParseEvent reads the body of a Redfish event POST. Real BMCs vary, and all of these are read:
// MessageSeverity or only the deprecated Severity, OriginOfCondition as a link or a bare string,
// Context on the event or (Event v1.0) on its records, EventId spelled EventID.
func ParseEvent(body []byte) (*Event, error) {
	var raw rawEvent
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("parse Redfish event: %w", err)
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(body, &keys)
	if _, ok := keys["Events"]; !ok {
		return nil, errors.New("parse Redfish event: no Events array")
	}
	ev := &Event{ID: string(raw.ID), Name: raw.Name, Context: raw.Context, Events: make([]EventRecord, 0, len(raw.Events))}
	for _, r := range raw.Events {
		if ev.Context == "" {
			ev.Context = r.Context
		}
		rec := EventRecord{
			EventID: string(r.EventID), EventType: r.EventType, EventTimestamp: logs.ParseTime(r.EventTimestamp),
			Severity: logs.NormalizeSeverity(cmp.Or(r.MessageSeverity, r.Severity)), Message: strings.TrimSpace(r.Message),
			MessageID: r.MessageID, Origin: originOf(r.OriginOfCondition), LogEntry: r.LogEntry.ID,
		}
		for _, a := range r.MessageArgs {
			rec.MessageArgs = append(rec.MessageArgs, fmt.Sprint(a))
		}
		ev.Events = append(ev.Events, rec)
	}
	return ev, nil
}

// originOf reads an OriginOfCondition: {"@odata.id": ...} or, on older BMCs, the path itself.
func originOf(raw json.RawMessage) string {
	var l wire.Link
	if json.Unmarshal(raw, &l) == nil && l.ID != "" {
		return l.ID
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}
