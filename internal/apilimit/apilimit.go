// Package apilimit bounds how many writes a client has in flight at the API server.
//
// A burst of work (500 claims at once, a fleet onboarded) has every worker of every controller
// write at the same moment. On a small control plane that is more than it can serve at once:
// the writes only wait inside the API server, whose watch goroutines, starved of CPU, fall so
// far behind that it closes them as unresponsive, and every controller's next step (which
// waits for the watch event of its last write) stalls by seconds. Measured with 500 claims on
// a 2-core machine: with ~100 writes in flight the informers saw them ~3 s late and the API
// server closed 20-odd watches; bounded to 16, writes were seen as they returned.
//
// In a cluster, API Priority and Fairness limits a client's concurrency on the server side; a
// client on an exempt identity (or a control plane without it) has only this bound.
//
// It decides only when a write is sent, never what it carries, and leaves reads and watches
// unbounded. It imports no metalhub package: it knows no kind and no controller.
package apilimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultWritesInFlight is the operator's bound: enough to keep a small API server busy (8
// bound 500 claims no faster and powered them on slower; 32 no faster either).
const DefaultWritesInFlight = 16

// Priority orders the writes waiting for a slot.
type Priority int

const (
	// Normal is every write not marked otherwise.
	Normal Priority = iota
	// Ahead is for writes a caller outside the process waits on with a deadline of its own
	// (see Prompt): they wait ahead of the normal writes, and are otherwise like them.
	Ahead
	// High is for writes a user waits on (see Urgent).
	High
)

// Slots is a bound on writes in flight, with waiters served by priority and, within one, in
// order.
//
// Serving urgent waiters first is not enough while a burst of them is bound: between a claim's
// writes (each pass waits for the watch event of its last) the queue of urgent writes empties
// for moments, normal writes take the freed slots, and on an API server that is already busy
// every one of those delays the binds behind it. So while urgent writes are coming (one was
// asked for within UrgentWindow), normal writes keep to NormalWhileUrgent slots; they are not
// stopped, and have every slot again once the burst is over.
//
// Held back is not starved: a steady burst always has urgent writes waiting, and served strictly
// by priority the normal ones (a bound claim's power-on among them) would get no slot until it
// ends. So normal writes are guaranteed a share (guaranteed) for as long as they wait: while
// they hold fewer, a freed slot goes to them before the urgent ones.
type Slots struct {
	mu     sync.Mutex
	free   int
	size   int
	queues [High + 1][]chan struct{}
	// normal is the number of slots normal and ahead writes hold.
	normal int
	// lastUrgent is when an urgent write last asked for a slot.
	lastUrgent time.Time
	// timer wakes normal waiters held back by the urgent window once it has passed.
	timer *time.Timer
	now   func() time.Time
}

const (
	// UrgentWindow is how long after the last urgent write normal writes stay held back.
	UrgentWindow = 500 * time.Millisecond
	// NormalWhileUrgent is how many slots normal writes may hold meanwhile.
	NormalWhileUrgent = 2
)

// NewSlots returns n slots; nil (no bound) when n <= 0.
func NewSlots(n int) *Slots {
	if n <= 0 {
		return nil
	}
	return &Slots{free: n, size: n, now: time.Now}
}

// InFlight is the number of slots taken.
func (s *Slots) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.free
}

// Urgent reports whether urgent writes are coming: one asked for a slot within UrgentWindow.
// Other writers (events) hold back too while it is true.
func (s *Slots) Urgent() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.urgent()
}

// Busy reports whether background work that makes no writes of its own (telemetry's reads)
// should wait: urgent writes are coming (Urgent), or the controllers' writes hold half the
// slots or more, or wait for one. Their work is then what the process's CPU, the API server
// and the BMCs are for.
func (s *Slots) Busy() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.urgent() || (s.size-s.free)*2 >= s.size || s.waitersFrom(Normal)
}

func (s *Slots) urgent() bool {
	return !s.lastUrgent.IsZero() && s.now().Sub(s.lastUrgent) < UrgentWindow
}

// admits reports whether a write of priority p may take a free slot now.
func (s *Slots) admits(p Priority) bool {
	return p == High || s.normal < NormalWhileUrgent || !s.urgent()
}

// guaranteed is how many slots normal writes get ahead of urgent ones: NormalWhileUrgent, but
// no more than an eighth of the slots, so a small bound still serves urgent writes first.
func (s *Slots) guaranteed() int {
	return min(NormalWhileUrgent, s.size/8)
}

// owedNormal reports whether a normal write is owed a slot before the urgent ones waiting.
func (s *Slots) owedNormal() bool {
	return s.normal < s.guaranteed()
}

// Acquire waits for a slot; waiting ends with ctx. Release it, with the same priority, when
// the write returns.
func (s *Slots) Acquire(ctx context.Context, p Priority) error {
	s.mu.Lock()
	if p == High {
		s.lastUrgent = s.now()
	}
	ahead := s.waitersFrom(p)
	if p != High && !s.waitersBetween(p, Ahead) && s.owedNormal() {
		ahead = false
	}
	if s.free > 0 && !ahead && s.admits(p) {
		s.take(p)
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.queues[p] = append(s.queues[p], ch)
	s.wakeLater()
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.drop(p, ch) {
			// Granted while giving up: pass the slot on.
			s.give(p)
		}
		return ctx.Err()
	}
}

// Release gives back a slot a write of priority p held.
func (s *Slots) Release(p Priority) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.give(p)
}

// take hands a free slot to a write of priority p.
func (s *Slots) take(p Priority) {
	s.free--
	if p != High {
		s.normal++
	}
}

// give returns the slot of a write of priority p and hands out what may go now.
func (s *Slots) give(p Priority) {
	s.free++
	if p != High {
		s.normal--
	}
	s.handOut()
}

// waitersFrom reports whether anyone of priority p or higher waits: they go first.
func (s *Slots) waitersFrom(p Priority) bool {
	return s.waitersBetween(p, High)
}

// waitersBetween reports whether anyone of priority from to to waits.
func (s *Slots) waitersBetween(from, to Priority) bool {
	for q := from; q <= to; q++ {
		if len(s.queues[q]) > 0 {
			return true
		}
	}
	return false
}

// drop removes a waiter that gave up; false if it was granted a slot already.
func (s *Slots) drop(p Priority, ch chan struct{}) bool {
	q := s.queues[p]
	for i, c := range q {
		if c == ch {
			s.queues[p] = append(q[:i], q[i+1:]...)
			return true
		}
	}
	return false
}

// handOut gives free slots to the waiters: normal ones (ahead first) up to their guaranteed
// share, then highest priority first, each in order, as far as admits lets them.
func (s *Slots) handOut() {
	for s.free > 0 && s.waitersBetween(Normal, Ahead) && s.owedNormal() {
		p := Ahead
		if len(s.queues[Ahead]) == 0 {
			p = Normal
		}
		ch := s.queues[p][0]
		s.queues[p] = s.queues[p][1:]
		s.take(p)
		close(ch)
	}
	for p := High; p >= Normal; p-- {
		for s.free > 0 && len(s.queues[p]) > 0 && s.admits(p) {
			ch := s.queues[p][0]
			s.queues[p] = s.queues[p][1:]
			s.take(p)
			close(ch)
		}
	}
	s.wakeLater()
}

// wakeLater makes sure normal waiters held back by the urgent window are handed slots when it
// has passed, even if no write returns meanwhile to do it.
func (s *Slots) wakeLater() {
	if !s.waitersBetween(Normal, Ahead) || !s.urgent() || s.timer != nil {
		return
	}
	s.timer = time.AfterFunc(UrgentWindow-s.now().Sub(s.lastUrgent), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.timer = nil
		s.handOut()
	})
}

// NewClient returns a manager's Options.NewClient whose writes take slots (unbounded when
// slots is nil).
func NewClient(slots *Slots) func(*rest.Config, client.Options) (client.Client, error) {
	return func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.New(cfg, o)
		if err != nil {
			return nil, err
		}
		return Wrap(c, slots), nil
	}
}

// Wrap makes c's writes take slots; nil slots returns c.
func Wrap(c client.Client, slots *Slots) client.Client {
	if slots == nil {
		return c
	}
	return &limited{Client: c, slots: slots}
}

type urgentKey struct{}

// Urgent marks the writes made with ctx as ones a user waits for: when writes queue for a
// slot, urgent ones go first. The claim controller's are: binding a claim is a few writes a
// user waits on, while what follows it (the server's bookkeeping, its boot and power) takes
// seconds of hardware time anyway.
func Urgent(ctx context.Context) context.Context { return context.WithValue(ctx, urgentKey{}, true) }

type promptKey struct{}

// Prompt marks the writes made with ctx as ones a caller outside the process waits on with a
// deadline of its own: a machine's discovery report, answered once its hardware is written.
// They wait ahead of the controllers' writes (which a pass retries by itself) but hold nothing
// back: on a busy API server a report behind a fleet's passes outwaited its caller, which then
// sent it again, all of it redone. Urgent wins where both are set.
func Prompt(ctx context.Context) context.Context { return context.WithValue(ctx, promptKey{}, true) }

// IsUrgent reports whether ctx marks its writes urgent.
func IsUrgent(ctx context.Context) bool { return PriorityOf(ctx) == High }

// PriorityOf is the priority ctx gives its writes.
func PriorityOf(ctx context.Context) Priority {
	if v, _ := ctx.Value(urgentKey{}).(bool); v {
		return High
	}
	if v, _ := ctx.Value(promptKey{}).(bool); v {
		return Ahead
	}
	return Normal
}

type limited struct {
	client.Client
	slots *Slots
}

// do runs write in a free slot; waiting ends with ctx.
func (l *limited) do(ctx context.Context, write func() error) error {
	p := PriorityOf(ctx)
	if err := l.slots.Acquire(ctx, p); err != nil {
		return fmt.Errorf("waiting for a free API write slot: %w", err)
	}
	defer l.slots.Release(p)
	return write()
}

func (l *limited) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return l.do(ctx, func() error { return l.Client.Create(ctx, obj, opts...) })
}

func (l *limited) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return l.do(ctx, func() error { return l.Client.Update(ctx, obj, opts...) })
}

func (l *limited) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return l.do(ctx, func() error { return l.Client.Patch(ctx, obj, patch, opts...) })
}

func (l *limited) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return l.do(ctx, func() error { return l.Client.Apply(ctx, obj, opts...) })
}

func (l *limited) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return l.do(ctx, func() error { return l.Client.Delete(ctx, obj, opts...) })
}

func (l *limited) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return l.do(ctx, func() error { return l.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (l *limited) Status() client.SubResourceWriter {
	return &limitedSub{SubResourceClient: l.Client.SubResource("status"), l: l}
}

func (l *limited) SubResource(name string) client.SubResourceClient {
	return &limitedSub{SubResourceClient: l.Client.SubResource(name), l: l}
}

type limitedSub struct {
	client.SubResourceClient
	l *limited
}

func (s *limitedSub) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.l.do(ctx, func() error { return s.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (s *limitedSub) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.l.do(ctx, func() error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *limitedSub) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.l.do(ctx, func() error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

func (s *limitedSub) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.l.do(ctx, func() error { return s.SubResourceClient.Apply(ctx, obj, opts...) })
}
