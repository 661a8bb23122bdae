package bmc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// clock is a clock the test moves; the breaker's windows follow it, network timeouts do not.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// calls are one of each BMC operation, all on the system id.
func calls(c bmc.BMC, id string) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"System":      func(ctx context.Context) error { _, err := c.System(ctx, id); return err },
		"Systems":     func(ctx context.Context) error { _, err := c.Systems(ctx); return err },
		"Manager":     func(ctx context.Context) error { _, err := c.Manager(ctx); return err },
		"Inventory":   func(ctx context.Context) error { _, err := c.Inventory(ctx, id); return err },
		"Power":       func(ctx context.Context) error { return c.Power(ctx, id, bmc.PowerOn) },
		"SetBootOnce": func(ctx context.Context) error { return c.SetBootOnce(ctx, id, bmc.BootPxe) },
	}
}

// failsFast runs every operation at once and checks that each failed without sending anything
// to the BMC, saying it is unreachable and when it is tried again.
func failsFast(t *testing.T, b *redfish.BMC, c bmc.BMC, id string, clk *clock, cause error) time.Time {
	t.Helper()
	before := b.Stats().Requests
	var (
		mu      sync.Mutex
		retryAt time.Time
		wg      sync.WaitGroup
	)
	for name, call := range calls(c, id) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := call(context.Background())
			at, ok := bmc.RetryAt(err)
			if !errors.Is(err, bmc.ErrUnreachable) || !errors.Is(err, cause) || !ok || !at.After(clk.Now()) ||
				!strings.Contains(err.Error(), "unreachable") {
				t.Errorf("%s: got %v (retry at %v), want a fast failure saying unreachable and %v", name, err, at, cause)
			}
			mu.Lock()
			retryAt = at
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n := b.Stats().Requests - before; n != 0 {
		t.Errorf("%d requests reached the unreachable BMC, want none", n)
	}
	return retryAt
}

// A BMC that stopped answering costs one request timeout, once: from then on every request
// fails at once, without reaching it, until its window ends.
func TestDeadBMCFailsFastAfterFirstTimeout(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name      string
		faults    redfish.Faults
		cause     error
		connected bool
	}{
		{"hang after connect", redfish.Faults{Hang: true}, bmc.ErrTimeout, true},
		{"hang from the start", redfish.Faults{Hang: true}, bmc.ErrTimeout, false},
		{"connection dropped", redfish.Faults{DropConnection: true}, bmc.ErrConnectionFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			p := pool(t, bmc.Options{RequestTimeout: timeout, UnreachableBackoff: time.Minute, Now: clk.Now})
			c := get(t, p, endpoint(b))
			if tc.connected {
				if _, err := c.System(context.Background(), id); err != nil {
					t.Fatal(err)
				}
			}
			b.SetFaults(tc.faults)
			defer b.ClearFaults()
			_, err := c.System(context.Background(), id)
			if !errors.Is(err, tc.cause) || errors.Is(err, bmc.ErrUnreachable) {
				t.Fatalf("first failure: got %v, want %v", err, tc.cause)
			}
			at := failsFast(t, b, c, id, clk, tc.cause)
			if w := at.Sub(clk.Now()); w > time.Minute {
				t.Errorf("tried again in %s, after more than the first window", w)
			}
			// The window belongs to the BMC, not to the conn: a new caller fails fast too.
			if _, err := get(t, p, endpoint(b)).Systems(context.Background()); !errors.Is(err, bmc.ErrUnreachable) {
				t.Errorf("another caller: %v", err)
			}
		})
	}
}

// Every caller waiting for the connect of a hanging BMC gets its failure when that one connect
// fails; none starts a connect of its own behind it.
func TestHungConnectTripsForEveryCaller(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{Hang: true})
	defer b.ClearFaults()
	const timeout, callers = 300 * time.Millisecond, 6
	p := pool(t, bmc.Options{RequestTimeout: timeout, UnreachableBackoff: time.Minute})
	c := get(t, p, endpoint(b))
	start := time.Now()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.System(context.Background(), b.SystemIDs()[0])
			if !errors.Is(err, bmc.ErrTimeout) {
				t.Errorf("caller %d: %v, want Timeout", i, err)
			}
		}()
	}
	wg.Wait()
	// Serialised connects would take one timeout per caller.
	if took := time.Since(start); took > 2*timeout {
		t.Errorf("%d callers of a hanging BMC took %s, more than one connect's timeout (%s) and a margin", callers, took, timeout)
	}
	if n := b.Stats().Requests; n != 1 {
		t.Errorf("%d requests reached the hanging BMC, want the one of the one connect", n)
	}
}

// Answers, whatever they say, and a slow answer cut short by the caller's own deadline leave
// the BMC reachable: the next request is sent.
func TestBreakerTripsOnlyOnTransportFailures(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		faults redfish.Faults
		ctx    time.Duration // the caller's deadline, 0 for none
		want   error         // nil: success
	}{
		{"server error", redfish.Faults{Status: 503}, 0, bmc.ErrUnavailable},
		{"unauthorized", redfish.Faults{Unauthorized: true}, 0, bmc.ErrAuthenticationFailed},
		{"not implemented", redfish.Faults{Status: 501}, 0, bmc.ErrUnsupported},
		{"slow answer", redfish.Faults{Latency: redfish.Duration(timeout / 2)}, 0, nil},
		{"slow answer, short caller deadline", redfish.Faults{Latency: redfish.Duration(timeout / 2)}, timeout / 10, bmc.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool(t, bmc.Options{RequestTimeout: timeout, UnreachableBackoff: time.Minute})
			c := get(t, p, endpoint(b))
			if _, err := c.System(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			b.SetFaults(tc.faults)
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			_, err := c.System(ctx, id)
			b.ClearFaults()
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("with the fault: %v, want %v", err, tc.want)
			}
			if open, _, _ := bmc.BreakerState(c); open {
				t.Fatalf("%v opened the breaker", err)
			}
			before := b.Stats().Requests
			if _, err := c.System(context.Background(), id); err != nil {
				t.Fatalf("after the fault: %v", err)
			}
			if b.Stats().Requests == before {
				t.Fatal("the request after the fault was not sent")
			}
		})
	}
}

// When a window ends exactly one probe goes out, in the background; a failed probe doubles the
// window, a probe that gets an answer closes the breaker, and a later failure starts over at
// the first window.
func TestBreakerHalfOpenProbeHeals(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	const timeout, first = 200 * time.Millisecond, time.Second
	clk := newClock()
	p := pool(t, bmc.Options{RequestTimeout: timeout, UnreachableBackoff: first, MaxUnreachableBackoff: time.Hour, Now: clk.Now})
	c := get(t, p, endpoint(b))
	if _, err := c.System(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	b.SetFaults(redfish.Faults{Hang: true})
	if _, err := c.System(context.Background(), id); !errors.Is(err, bmc.ErrTimeout) {
		t.Fatalf("first failure: %v", err)
	}
	r1 := failsFast(t, b, c, id, clk, bmc.ErrTimeout)
	if w := r1.Sub(clk.Now()); w < first/2 || w > first {
		t.Fatalf("first window %s, want within [%s, %s]", w, first/2, first)
	}

	// The window ends with the BMC still dead: of many callers, one probe reaches it.
	clk.Set(r1)
	before := b.Stats().Requests
	failsFastSending(t, c, id, 10)
	waitProbeDone(t, c)
	if n := b.Stats().Requests - before; n != 1 {
		t.Fatalf("%d requests reached the BMC when the window ended, want one probe", n)
	}
	if _, _, n := bmc.BreakerState(c); n != 2 {
		t.Fatalf("failures %d after the failed probe, want 2", n)
	}
	r2 := failsFast(t, b, c, id, clk, bmc.ErrTimeout)
	if w := r2.Sub(clk.Now()); w < first || w > 2*first {
		t.Fatalf("second window %s, want within [%s, %s]", w, first, 2*first)
	}

	// Healed: nothing is sent before the window ends, then the probe closes the breaker.
	b.ClearFaults()
	failsFast(t, b, c, id, clk, bmc.ErrTimeout)
	clk.Set(r2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.System(context.Background(), id)
		if err == nil {
			break
		}
		if !errors.Is(err, bmc.ErrUnreachable) || time.Now().After(deadline) {
			t.Fatalf("after healing: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if open, _, n := bmc.BreakerState(c); open || n != 0 {
		t.Fatalf("after the first answer: open %t, failures %d", open, n)
	}

	// The next failure starts over at the first window.
	b.SetFaults(redfish.Faults{Hang: true})
	defer b.ClearFaults()
	if _, err := c.System(context.Background(), id); !errors.Is(err, bmc.ErrTimeout) {
		t.Fatalf("failure after healing: %v", err)
	}
	if r3 := failsFast(t, b, c, id, clk, bmc.ErrTimeout); r3.Sub(clk.Now()) > first {
		t.Fatalf("window after healing %s, want at most the first (%s)", r3.Sub(clk.Now()), first)
	}
}

// failsFastSending makes n concurrent calls that must all fail fast (one of them starts the
// probe).
func failsFastSending(t *testing.T, c bmc.BMC, id string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.System(context.Background(), id); !errors.Is(err, bmc.ErrUnreachable) {
				t.Errorf("while probing: %v, want a fast failure", err)
			}
		}()
	}
	wg.Wait()
}

func waitProbeDone(t *testing.T, c bmc.BMC) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, probing, _ := bmc.BreakerState(c); !probing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("probe still in flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
