package health

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
)

const (
	// maxEventBody bounds one delivery.
	maxEventBody = 256 << 10
	// MinReadGap bounds how often events can make a server's log be read: a BMC (or anyone
	// who can reach the receiver) sending a flood of events costs at most one read per gap.
	MinReadGap = 5 * time.Second
)

// EventReceiver takes the events BMCs deliver and asks for a read of the hardware log of the
// servers they concern: the event is a doorbell, never the record. Whoever can reach the
// receiver can at most bring a server's log read forward (MinReadGap), never fault it: what
// is recorded comes from the log of the proven machine, read by the server's pass.
type EventReceiver struct {
	client client.Reader
	// polls are the servers' log reads; the Server controller shares them.
	polls *Polls
	// queue brings a rung server's next pass (the Server controller watches it).
	queue chan event.GenericEvent
	log   logr.Logger
}

// Polls are the servers' log reads this receiver rings; the Server controller reads the logs
// through the same bookkeeping, so a delivery and the poll never read one log twice.
func (e *EventReceiver) Polls() *Polls { return e.polls }

// Passes is where the receiver asks for a rung server's next pass; the Server controller
// watches it. Only the receiver sends on it.
func (e *EventReceiver) Passes() <-chan event.GenericEvent { return e.queue }

// LastRead is when the server's hardware log was last read, and whether an event has asked for
// another read since (what the suites wait on).
func (e *EventReceiver) LastRead(uid types.UID) (at time.Time, owed bool) {
	hp := e.polls.Get(uid)
	return hp.At, hp.Rung
}

// NewEventReceiver makes a receiver that finds servers with c (the manager's cached client).
// The server controller given it (Options.HardwareEvents) reads the logs it asks for; the
// registry's listener serves it.
func NewEventReceiver(c client.Reader, log logr.Logger) *EventReceiver {
	return &EventReceiver{client: c, polls: &Polls{}, queue: make(chan event.GenericEvent, 1024), log: log}
}

// ServeHTTP takes one delivery: POST bmcevents.EventsPath, a Redfish Event whose Context names the BMC.
func (e *EventReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST a Redfish Event", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxEventBody))
	if err != nil {
		http.Error(w, "event too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	ev, err := bmc.ParseEvent(body)
	if err != nil {
		http.Error(w, "not a Redfish Event: "+err.Error(), http.StatusBadRequest)
		return
	}
	bmcName, ok := bmcevents.BMCOf(ev.Context)
	if !ok {
		// Not one of our subscriptions: accepted, so the sender does not retry, and ignored.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	n := e.ring(req.Context(), bmcName, ev)
	e.log.V(1).Info("BMC event", "bmc", bmcName, "events", len(ev.Events), "servers", n)
	w.WriteHeader(http.StatusNoContent)
}

// ring asks for a log read of the servers of the BMC the events concern: those whose system
// an event's origin lies under, or all of them for an origin outside any system (a chassis'
// power supply or fan).
func (e *EventReceiver) ring(ctx context.Context, bmcName string, ev *bmc.Event) int {
	list := &metalv1alpha1.ServerList{}
	if err := e.client.List(ctx, list, client.MatchingFields{index.ServerBMC: bmcName}); err != nil {
		e.log.Info("listing the servers of a BMC for its event failed", "bmc", bmcName, "error", err.Error())
		return 0
	}
	n := 0
	for i := range list.Items {
		s := &list.Items[i]
		if !concerns(ev, s) {
			continue
		}
		e.polls.ring(s.UID)
		select {
		case e.queue <- event.GenericEvent{Object: s}:
		default:
			// The queue is full: the server's ring stands and its next pass reads the log.
		}
		n++
	}
	return n
}

// concerns reports whether an event may be about the server: its origin lies under the server's
// system, or under no system at all.
func concerns(ev *bmc.Event, s *metalv1alpha1.Server) bool {
	for _, r := range ev.Events {
		o := strings.TrimSuffix(r.Origin, "/")
		if !strings.Contains(o, "/Systems/") || s.Spec.SystemURI == "" {
			return true
		}
		sys := strings.TrimSuffix(s.Spec.SystemURI, "/")
		if o == sys || strings.HasPrefix(o, sys+"/") {
			return true
		}
	}
	return len(ev.Events) == 0
}
