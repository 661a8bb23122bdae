package apilimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// gate is a fake API server whose writes block until released, recording their order and the
// most in flight at once.
type gate struct {
	release chan struct{}
	mu      sync.Mutex
	order   []string
	cur     atomic.Int32
	max     atomic.Int32
}

func newGated(t *testing.T, n int) (client.Client, *gate) {
	t.Helper()
	g := &gate{release: make(chan struct{})}
	write := func(name string) {
		now := g.cur.Add(1)
		for {
			m := g.max.Load()
			if now <= m || g.max.CompareAndSwap(m, now) {
				break
			}
		}
		<-g.release
		g.mu.Lock()
		g.order = append(g.order, name)
		g.mu.Unlock()
		g.cur.Add(-1)
	}
	base := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			write(obj.GetName())
			return c.Create(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			write(sub + "/" + obj.GetName())
			return nil
		},
	})
	return Wrap(base, NewSlots(n)), g
}

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
}

// waitFor polls cond: the writers are goroutines, and the test must know they queued.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func queued(c client.Client) (urgent, other int) {
	s := c.(*limited).slots
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[High]), len(s.queues[Normal])
}

func inFlight(c client.Client) int { return c.(*limited).slots.InFlight() }

func TestWritesBounded(t *testing.T) {
	c, g := newGated(t, 2)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if err := c.Create(context.Background(), cm(fmt.Sprintf("cm-%d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() { _ = c.Status().Update(context.Background(), cm("status")) })
	// Both slot holders must have reached the server, not only taken their slot: released
	// earlier, the first could finish before the second arrives, and the test would see 1.
	waitFor(t, "two writes at the server, five queued", func() bool {
		_, o := queued(c)
		return inFlight(c) == 2 && o == 5 && g.cur.Load() == 2
	})
	close(g.release)
	wg.Wait()
	if m := g.max.Load(); m != 2 {
		t.Errorf("at most %d writes were in flight, want 2", m)
	}
	if inFlight(c) != 0 {
		t.Errorf("%d writes still counted in flight", inFlight(c))
	}
}

func TestUrgentWritesGoFirst(t *testing.T) {
	c, g := newGated(t, 1)
	var wg sync.WaitGroup
	start := func(name string, urgent bool) {
		ctx := context.Background()
		if urgent {
			ctx = Urgent(ctx)
		}
		wg.Go(func() { _ = c.Create(ctx, cm(name)) })
	}
	start("holder", false)
	waitFor(t, "the holder in flight", func() bool { return g.cur.Load() == 1 })
	// Queue in this order, one after the other: other-1, urgent-1, other-2, urgent-2.
	for i, w := range []struct {
		name   string
		urgent bool
	}{{"other-1", false}, {"urgent-1", true}, {"other-2", false}, {"urgent-2", true}} {
		start(w.name, w.urgent)
		waitFor(t, w.name+" queued", func() bool { u, o := queued(c); return u+o == i+1 })
	}
	// Let the writes through one at a time.
	for range 5 {
		g.release <- struct{}{}
	}
	wg.Wait()
	want := []string{"holder", "urgent-1", "urgent-2", "other-1", "other-2"}
	if fmt.Sprint(g.order) != fmt.Sprint(want) {
		t.Errorf("writes ran in order %v, want %v", g.order, want)
	}
}

func TestGivingUpFreesNothingTwice(t *testing.T) {
	c, g := newGated(t, 1)
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Create(context.Background(), cm("holder")) })
	waitFor(t, "the holder in flight", func() bool { return g.cur.Load() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Create(ctx, cm("impatient")) }()
	waitFor(t, "the impatient write queued", func() bool { _, o := queued(c); return o == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a write that gave up returned %v, want context.Canceled", err)
	}
	if _, o := queued(c); o != 0 {
		t.Errorf("%d waiters left queued", o)
	}
	g.release <- struct{}{}
	wg.Wait()
	if inFlight(c) != 0 {
		t.Errorf("%d writes counted in flight after all returned", inFlight(c))
	}
	// The slot is usable again, and only one: two writes run one after the other.
	wg.Go(func() { _ = c.Create(context.Background(), cm("a")) })
	wg.Go(func() { _ = c.Create(context.Background(), cm("b")) })
	waitFor(t, "one in flight, one queued", func() bool { _, o := queued(c); return g.cur.Load() == 1 && o == 1 })
	g.release <- struct{}{}
	g.release <- struct{}{}
	wg.Wait()
	if m := g.max.Load(); m != 1 {
		t.Errorf("at most %d writes were in flight, want 1", m)
	}
}

func TestNoBound(t *testing.T) {
	base := fake.NewClientBuilder().Build()
	if NewSlots(0) != nil || Wrap(base, nil) != base {
		t.Error("no bound should leave the client as it is")
	}
}

// serveOrder queues writers of the given priorities, in turn, behind the one slot of s that a
// normal write holds, then frees it and returns the order they were served in.
func serveOrder(t *testing.T, s *Slots, arrivals []Priority) []Priority {
	t.Helper()
	if err := s.Acquire(context.Background(), Normal); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []Priority
	var wg sync.WaitGroup
	waiting := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, q := range s.queues {
			n += len(q)
		}
		return n
	}
	for i, p := range arrivals {
		wg.Go(func() {
			if err := s.Acquire(context.Background(), p); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, p)
			mu.Unlock()
			s.Release(p)
		})
		waitFor(t, "waiter queued", func() bool { return waiting() == i+1 })
	}
	s.Release(Normal)
	wg.Wait()
	return order
}

func TestSlotsServeByPriority(t *testing.T) {
	s := NewSlots(1)
	order := serveOrder(t, s, []Priority{Normal, High, Normal, High})
	if want := []Priority{High, High, Normal, Normal}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("served in order %v, want %v", order, want)
	}
	if s.InFlight() != 0 {
		t.Errorf("%d slots taken after all released", s.InFlight())
	}
}

// While urgent writes are coming, normal ones keep to NormalWhileUrgent slots even with more
// free, and urgent ones still get a slot at once; once no urgent write has asked for
// UrgentWindow, the normal writes held back get the free slots without any write returning.
func TestNormalWritesHeldBackWhileUrgent(t *testing.T) {
	s := NewSlots(4)
	ctx := context.Background()
	if err := s.Acquire(ctx, High); err != nil {
		t.Fatal(err)
	}
	s.Release(High)
	urgentAt := time.Now()
	if !s.Urgent() {
		t.Fatal("not urgent right after an urgent write")
	}
	for range NormalWhileUrgent {
		if err := s.Acquire(ctx, Normal); err != nil {
			t.Fatal(err)
		}
	}
	granted := make(chan time.Time, 1)
	go func() {
		if err := s.Acquire(ctx, Normal); err != nil {
			t.Error(err)
		}
		granted <- time.Now()
	}()
	waitFor(t, "normal write queued", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queues[Normal]) == 1
	})
	if got := s.InFlight(); got != NormalWhileUrgent {
		t.Errorf("%d slots taken, want %d: a normal write went past the urgent window's share", got, NormalWhileUrgent)
	}
	// An urgent write is not held back by the normal ones waiting.
	if err := s.Acquire(ctx, High); err != nil {
		t.Fatal(err)
	}
	s.Release(High)
	urgentAt = time.Now()
	select {
	case at := <-granted:
		if at.Sub(urgentAt) < UrgentWindow*9/10 {
			t.Errorf("normal write granted %s after the last urgent one, before the window of %s passed", at.Sub(urgentAt), UrgentWindow)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("normal write still held back long after the urgent window")
	}
	if s.Urgent() {
		t.Error("still urgent after the window")
	}
	for range NormalWhileUrgent + 1 {
		s.Release(Normal)
	}
	if got := s.InFlight(); got != 0 {
		t.Errorf("%d slots taken after all released", got)
	}
}

// A steady burst of urgent writes, always some waiting, does not starve the normal ones: they
// get their guaranteed share of the slots as they free up, before the urgent writes queued.
func TestNormalWritesGuaranteedShareWhileUrgentWait(t *testing.T) {
	const n = 16
	s := NewSlots(n)
	ctx := context.Background()
	for range n {
		if err := s.Acquire(ctx, High); err != nil {
			t.Fatal(err)
		}
	}
	queued := func(p Priority) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queues[p])
	}
	var normals atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if err := s.Acquire(ctx, High); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, "urgent write queued", func() bool { return queued(High) == i+1 })
	}
	for i := range NormalWhileUrgent + 1 {
		wg.Go(func() {
			if err := s.Acquire(ctx, Normal); err != nil {
				t.Error(err)
			}
			normals.Add(1)
		})
		waitFor(t, "normal write queued", func() bool { return queued(Normal) == i+1 })
	}
	// Each urgent write that returns frees a slot: the normal writes take the first ones, up
	// to their share; the urgent writes queued take the rest.
	for range NormalWhileUrgent {
		s.Release(High)
	}
	waitFor(t, "normal writes granted their share", func() bool { return normals.Load() == NormalWhileUrgent })
	if got := queued(High); got != 4 {
		t.Errorf("%d urgent writes waiting, want 4: they took the normal writes' share", got)
	}
	for range 4 {
		s.Release(High)
	}
	waitFor(t, "urgent writes granted", func() bool { return queued(High) == 0 })
	if got := normals.Load(); got != NormalWhileUrgent {
		t.Errorf("%d normal writes granted, want %d: past their share while urgent writes come", got, NormalWhileUrgent)
	}
	// Past the urgent window the last normal write goes too.
	for range n - NormalWhileUrgent {
		s.Release(High)
	}
	wg.Wait()
	for range NormalWhileUrgent + 1 {
		s.Release(Normal)
	}
	if got := s.InFlight(); got != 0 {
		t.Errorf("%d slots taken after all released", got)
	}
}

// Busy while half the slots or more are taken, and while urgent writes are coming.
func TestBusy(t *testing.T) {
	if (*Slots)(nil).Busy() {
		t.Error("no bound is busy")
	}
	now := time.Unix(1000, 0)
	s := NewSlots(4)
	s.now = func() time.Time { return now }
	ctx := context.Background()
	for i, want := range []bool{false, true, true} { // 1, 2, 3 normal writes in flight
		if err := s.Acquire(ctx, Normal); err != nil {
			t.Fatal(err)
		}
		if got := s.Busy(); got != want {
			t.Errorf("%d of 4 slots taken: busy %t, want %t", i+1, got, want)
		}
	}
	for range 3 {
		s.Release(Normal)
	}
	if s.Busy() {
		t.Error("busy with every slot free")
	}
	if err := s.Acquire(ctx, High); err != nil {
		t.Fatal(err)
	}
	s.Release(High)
	if !s.Busy() {
		t.Error("not busy right after an urgent write")
	}
	now = now.Add(UrgentWindow)
	if s.Busy() {
		t.Error("still busy once the urgent window passed")
	}
}

// Writes marked Prompt wait ahead of the normal ones and behind the urgent ones, and hold no
// normal write back: no urgent window opens for them.
func TestAheadWritesWaitBeforeNormal(t *testing.T) {
	order := serveOrder(t, NewSlots(1), []Priority{Normal, Ahead, High, Normal, Ahead})
	if want := []Priority{High, Ahead, Ahead, Normal, Normal}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("served in order %v, want %v", order, want)
	}

	// Alone, ahead writes open no urgent window: normal writes take every free slot.
	s := NewSlots(4)
	ctx := Prompt(context.Background())
	if p := PriorityOf(ctx); p != Ahead {
		t.Fatalf("Prompt gives priority %v, want Ahead", p)
	}
	if p := PriorityOf(Urgent(ctx)); p != High {
		t.Fatalf("Urgent over Prompt gives priority %v, want High", p)
	}
	if err := s.Acquire(ctx, PriorityOf(ctx)); err != nil {
		t.Fatal(err)
	}
	if s.Urgent() {
		t.Error("an ahead write opened the urgent window")
	}
	for range 3 {
		held, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.Acquire(held, Normal)
		cancel()
		if err != nil {
			t.Fatalf("a normal write was held back beside an ahead write: %v", err)
		}
	}
	if s.InFlight() != 4 {
		t.Errorf("%d of 4 slots taken, want all", s.InFlight())
	}
}
