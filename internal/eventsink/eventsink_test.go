package eventsink

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// blockingSink is an API server whose event writes block until released.
type blockingSink struct {
	release  chan struct{}
	cur, max atomic.Int32
	written  atomic.Int32
}

func (b *blockingSink) write(ev *eventsv1.Event) (*eventsv1.Event, error) {
	now := b.cur.Add(1)
	for {
		m := b.max.Load()
		if now <= m || b.max.CompareAndSwap(m, now) {
			break
		}
	}
	<-b.release
	b.cur.Add(-1)
	b.written.Add(1)
	return ev, nil
}

func (b *blockingSink) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return b.write(ev)
}

func (b *blockingSink) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return b.write(ev)
}

func (b *blockingSink) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return b.write(ev)
}

func TestSinkBoundsWritesAndDropsPastBacklog(t *testing.T) {
	next := &blockingSink{release: make(chan struct{})}
	s := &sink{next: next, slots: make(chan struct{}, 2), backlog: 5}
	dropped0 := testutil.ToFloat64(dropped)

	var wg sync.WaitGroup
	for i := range 5 {
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ev-%d", i)}}
		wg.Go(func() {
			if _, err := s.Create(context.Background(), ev); err != nil {
				t.Error(err)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); s.pending() != 5 || next.cur.Load() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, in flight %d; want 5 and 2", s.pending(), next.cur.Load())
		}
	}
	// The backlog is full: the sixth event is dropped at once, reported as written.
	if _, err := s.Patch(context.Background(), &eventsv1.Event{}, nil); err != nil {
		t.Errorf("a dropped event returned %v", err)
	}
	if d := testutil.ToFloat64(dropped) - dropped0; d != 1 {
		t.Errorf("dropped counter rose by %v, want 1", d)
	}
	close(next.release)
	wg.Wait()
	if m := next.max.Load(); m != 2 {
		t.Errorf("at most %d event writes in flight, want 2", m)
	}
	if w := next.written.Load(); w != 5 {
		t.Errorf("%d events written, want 5", w)
	}
	if s.pending() != 0 {
		t.Errorf("%d events still pending", s.pending())
	}
}

func TestSinkGivesUpWithContext(t *testing.T) {
	next := &blockingSink{release: make(chan struct{})}
	s := &sink{next: next, slots: make(chan struct{}, 1), backlog: 10}
	go func() { _, _ = s.Create(context.Background(), &eventsv1.Event{}) }()
	for next.cur.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Update(ctx, &eventsv1.Event{}); err == nil {
		t.Error("a write waiting for a slot ignored its context")
	}
	close(next.release)
}

func TestOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		in, want Options
	}{
		{Options{}, Options{InFlight: DefaultInFlight, Backlog: DefaultBacklog}},
		{Options{InFlight: 3, Backlog: 7}, Options{InFlight: 3, Backlog: 7}},
		{Options{InFlight: -1}, Options{InFlight: DefaultInFlight, Backlog: DefaultBacklog}},
	} {
		if got := tc.in.withDefaults(); got.InFlight != tc.want.InFlight || got.Backlog != tc.want.Backlog {
			t.Errorf("%+v.withDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// While the controllers' urgent writes go (Yield true), events keep to YieldInFlight writes at
// once; otherwise to the sink's own bound.
func TestSinkYieldsToUrgentWrites(t *testing.T) {
	for _, tc := range []struct {
		yield bool
		want  int32
	}{{true, YieldInFlight}, {false, 5}} {
		t.Run(fmt.Sprint("yield=", tc.yield), func(t *testing.T) {
			next := &blockingSink{release: make(chan struct{})}
			s := &sink{next: next, slots: make(chan struct{}, 8), backlog: 10,
				yield: func() bool { return tc.yield }, few: make(chan struct{}, YieldInFlight)}
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					if _, err := s.Create(context.Background(), &eventsv1.Event{}); err != nil {
						t.Error(err)
					}
				})
			}
			for deadline := time.Now().Add(5 * time.Second); s.pending() != 5 || next.cur.Load() != tc.want; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("pending %d, in flight %d; want 5 and %d", s.pending(), next.cur.Load(), tc.want)
				}
			}
			close(next.release)
			wg.Wait()
			if m := next.max.Load(); m != tc.want {
				t.Errorf("at most %d event writes in flight, want %d", m, tc.want)
			}
		})
	}
}
