// Package eventsink records Kubernetes events without letting them crowd out the writes
// that move objects through their lifecycle.
//
// client-go's events broadcaster writes every event from a goroutine of its own: a burst of
// work (500 claims bound at once, a fleet onboarded) sends hundreds of event writes to the API
// server at the same moment as the writes that do the work. In the claims benchmark events
// were 3 of every 12 API writes, and their flood starved the API server's watches. Here event
// writes go through a sink that keeps a bounded number in flight (the others wait their turn;
// past a backlog bound new events are dropped, counted in metalhub_events_dropped_total, as
// events are best effort by design), encoded as protobuf, which costs the API server less.
//
// The bound is the sink's own, not the one the controllers' writes share (internal/apilimit):
// taking those slots, events fell behind while 1000 servers were onboarded (a third dropped,
// the backlog's goroutines 35 MiB of RSS); with 32 of their own, all were written on time.
//
// It writes events and nothing else, and must not become something a controller relies on:
// an event may be dropped, so no state may live only in one.
package eventsink

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Defaults of Options.
const (
	DefaultInFlight = 32
	DefaultBacklog  = 4096
)

var dropped = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "metalhub_events_dropped_total",
	Help: "Kubernetes events not written because the backlog of events waiting to be written was full.",
})

func init() { ctrlmetrics.Registry.MustRegister(dropped) }

// Options bound the event writes.
type Options struct {
	// InFlight is the number of event writes sent to the API server at once.
	InFlight int
	// Backlog is the number of events that may wait for a write; more are dropped.
	Backlog int
	// Yield, when set and true, holds event writes to YieldInFlight at a time: the
	// controllers' urgent writes are being bound (apilimit.Slots.Urgent) and go first.
	Yield func() bool
}

// YieldInFlight is how many event writes go at once while Options.Yield is true.
const YieldInFlight = 2

func (o Options) withDefaults() Options {
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	if o.Backlog <= 0 {
		o.Backlog = DefaultBacklog
	}
	return o
}

// Provider hands out event recorders that share one broadcaster and one paced sink. It is a
// manager Runnable: recording starts with the manager and stops with it.
type Provider struct {
	broadcaster events.EventBroadcaster
	sink        *sink
	scheme      *runtime.Scheme
}

// New returns a provider writing through a client on mgr's config, and adds it to mgr.
func New(mgr ctrl.Manager, o Options) (*Provider, error) {
	o = o.withDefaults()
	// Events are a core type: protobuf costs the API server less than JSON.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cl, err := eventsclient.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	s := &sink{next: &events.EventSinkImpl{Interface: cl}, slots: make(chan struct{}, o.InFlight), backlog: o.Backlog,
		yield: o.Yield, few: make(chan struct{}, YieldInFlight)}
	p := &Provider{broadcaster: events.NewBroadcaster(s), sink: s, scheme: mgr.GetScheme()}
	if err := mgr.Add(p); err != nil {
		return nil, fmt.Errorf("adding the event recorder: %w", err)
	}
	return p, nil
}

// Recorder returns a recorder reporting as controller name.
func (p *Provider) Recorder(name string) recorder.EventRecorder {
	// client-go's recorder has AnnotatedEventf, which controller-runtime's interface asks
	// for, but the interface it is returned as does not declare it.
	return p.broadcaster.NewRecorder(p.scheme, name).(recorder.EventRecorder)
}

// Start records until ctx ends. Events are recorded by every replica, leader or not.
func (p *Provider) Start(ctx context.Context) error {
	if err := p.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("starting the event recorder: %w", err)
	}
	<-ctx.Done()
	p.broadcaster.Shutdown()
	return nil
}

// NeedLeaderElection is false: a standby's webhooks or a family without leader election record too.
func (p *Provider) NeedLeaderElection() bool { return false }

// Pending is the number of events waiting for or in a write.
func (p *Provider) Pending() int { return p.sink.pending() }

// sink passes writes to next, at most cap(slots) at a time.
type sink struct {
	next    events.EventSink
	slots   chan struct{}
	backlog int
	// yield and few hold the writes to cap(few) while yield is true.
	yield func() bool
	few   chan struct{}

	mu      sync.Mutex
	waiting int
}

func (s *sink) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// do runs write when a slot is free. An event past the backlog is dropped: it reports success,
// because an error would make the broadcaster log it and retry.
func (s *sink) do(ctx context.Context, ev *eventsv1.Event, write func() (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	s.mu.Lock()
	if s.waiting >= s.backlog {
		s.mu.Unlock()
		dropped.Inc()
		return ev, nil
	}
	s.waiting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
	}()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.slots }()
	if s.yield != nil && s.yield() {
		select {
		case s.few <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-s.few }()
	}
	return write()
}

func (s *sink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.do(ctx, ev, func() (*eventsv1.Event, error) { return s.next.Create(ctx, ev) })
}

func (s *sink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.do(ctx, ev, func() (*eventsv1.Event, error) { return s.next.Update(ctx, ev) })
}

func (s *sink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.do(ctx, old, func() (*eventsv1.Event, error) { return s.next.Patch(ctx, old, data) })
}
