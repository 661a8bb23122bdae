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
package apilimit

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultWritesInFlight is the operator's bound: enough to keep a small API server busy (8
// bound 500 claims no faster and powered them on slower; 32 no faster either).
const DefaultWritesInFlight = 16

// NewClient returns a manager's Options.NewClient that bounds writes to n in flight (none when
// n <= 0).
func NewClient(n int) func(*rest.Config, client.Options) (client.Client, error) {
	return func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.New(cfg, o)
		if err != nil {
			return nil, err
		}
		return Wrap(c, n), nil
	}
}

// Wrap bounds c's writes to n in flight; n <= 0 returns c.
func Wrap(c client.Client, n int) client.Client {
	if n <= 0 {
		return c
	}
	return &limited{Client: c, slots: newSlots(n)}
}

// InFlight is the number of writes a wrapped client has in flight (0 for another client).
func InFlight(c client.Client) int {
	if l, ok := c.(*limited); ok {
		return l.slots.inFlight()
	}
	return 0
}

type urgentKey struct{}

// Urgent marks the writes made with ctx as ones a user waits for: when writes queue for a
// slot, urgent ones go first. The claim controller's are: binding a claim is a few writes a
// user waits on, while what follows it (the server's bookkeeping, its boot and power) takes
// seconds of hardware time anyway.
func Urgent(ctx context.Context) context.Context { return context.WithValue(ctx, urgentKey{}, true) }

func isUrgent(ctx context.Context) bool { v, _ := ctx.Value(urgentKey{}).(bool); return v }

type limited struct {
	client.Client
	slots *slots
}

// do runs write in a free slot; waiting ends with ctx.
func (l *limited) do(ctx context.Context, write func() error) error {
	if err := l.slots.acquire(ctx, isUrgent(ctx)); err != nil {
		return fmt.Errorf("waiting for a free API write slot: %w", err)
	}
	defer l.slots.release()
	return write()
}

// slots is a counting semaphore with two FIFO queues of waiters: urgent ones are served first.
type slots struct {
	mu            sync.Mutex
	free, size    int
	urgent, other []chan struct{}
}

func newSlots(n int) *slots { return &slots{free: n, size: n} }

func (s *slots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.free
}

func (s *slots) acquire(ctx context.Context, urgent bool) error {
	s.mu.Lock()
	if s.free > 0 && len(s.urgent) == 0 && (urgent || len(s.other) == 0) {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if urgent {
		s.urgent = append(s.urgent, ch)
	} else {
		s.other = append(s.other, ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.drop(ch) {
			return ctx.Err()
		}
		// Granted while giving up: pass the slot on.
		s.handOff()
		return ctx.Err()
	}
}

// drop removes a waiter that gave up; false if it was granted a slot already.
func (s *slots) drop(ch chan struct{}) bool {
	for _, q := range []*[]chan struct{}{&s.urgent, &s.other} {
		for i, c := range *q {
			if c == ch {
				*q = append((*q)[:i], (*q)[i+1:]...)
				return true
			}
		}
	}
	return false
}

func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handOff()
}

// handOff gives a freed slot to the first waiter, urgent ones first, or frees it.
func (s *slots) handOff() {
	for _, q := range []*[]chan struct{}{&s.urgent, &s.other} {
		if len(*q) > 0 {
			ch := (*q)[0]
			*q = (*q)[1:]
			close(ch)
			return
		}
	}
	s.free++
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
