package bmc_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// fence admits requests while open and counts the holds still taken.
type fence struct {
	open   atomic.Bool
	taken  atomic.Int32
	maxNow atomic.Int32
	// until, when set, is when the right to act could pass; expired is closed then.
	until   atomic.Pointer[time.Time]
	expired chan struct{}
}

func (f *fence) Hold(deadline time.Time) (func(), <-chan struct{}, error) {
	if !f.open.Load() {
		return nil, nil, errors.New("shard moved")
	}
	if f.until.Load() != nil && !deadline.IsZero() && deadline.After(*f.until.Load()) {
		return nil, nil, errors.New("the request could outlast the shard")
	}
	n := f.taken.Add(1)
	if n > f.maxNow.Load() {
		f.maxNow.Store(n)
	}
	return func() { f.taken.Add(-1) }, f.expired, nil
}

// A request under a fence that no longer admits it is not sent, says so (NotSent, Fenced), and
// does not count against the BMC; one it admits holds the fence until the BMC has answered.
func TestFenceKeepsRequestsFromBeingSent(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	f := &fence{}
	ctx := bmc.WithFence(context.Background(), f)

	err := c.Power(ctx, id, bmc.PowerOn)
	if !bmc.IsFenced(err) || !errors.Is(err, bmc.ErrNotSent) {
		t.Fatalf("power on under a closed fence: %v, want Fenced and NotSent", err)
	}
	// What lifecycle.Reconciler matches on, through wrapping, to look again without an error.
	var f2 interface{ Fenced() bool }
	if !errors.As(fmt.Errorf("power step: %w", err), &f2) || !f2.Fenced() {
		t.Errorf("the fenced error does not say Fenced() through wrapping: %v", err)
	}
	if len(e.Records()) != 0 {
		t.Fatalf("records %+v, want none", e.Records())
	}
	// Not the BMC's failure: the breaker stays closed for everyone else.
	if _, err := c.Systems(context.Background()); err != nil {
		t.Fatalf("a request without a fence after a fenced one: %v", err)
	}

	f.open.Store(true)
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	if len(e.Records()) != 1 {
		t.Errorf("records %+v, want the power-on", e.Records())
	}
	if f.maxNow.Load() < 1 || f.taken.Load() != 0 {
		t.Errorf("holds: at most %d at once, %d still taken; want each request held and released", f.maxNow.Load(), f.taken.Load())
	}
}

// A request that could outlast its right to act is not sent; one in flight when the right could
// pass is cut then (its outcome unknown to the caller), not left running into the next owner's.
func TestFenceBoundsRequestsByTheRight(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, pool(t, bmc.Options{RequestTimeout: 30 * time.Second}), endpoint(b))
	f := &fence{expired: make(chan struct{})}
	f.open.Store(true)
	soon := time.Now().Add(10 * time.Second)
	f.until.Store(&soon)
	ctx := bmc.WithFence(context.Background(), f)
	err := c.Power(ctx, id, bmc.PowerOn)
	if !bmc.IsFenced(err) || !errors.Is(err, bmc.ErrNotSent) {
		t.Fatalf("a 30 s request under a right that ends in 10 s: %v, want Fenced and NotSent", err)
	}
	if len(e.Records()) != 0 {
		t.Fatalf("records %+v, want none", e.Records())
	}

	later := time.Now().Add(time.Minute)
	f.until.Store(&later)
	if _, err := c.Systems(ctx); err != nil { // connected: the cut below is of the request alone
		t.Fatal(err)
	}
	b.SetFaults(redfish.Faults{Hang: true})
	defer b.ClearFaults() // before the pool's logout at cleanup
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := c.Systems(ctx); done <- err }()
	close(f.expired) // the right could pass now: the hung request is cut at once
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a request cut by its fence succeeded")
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the cut request ran %s, as long as its own timeout", took)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the request outlived its fence")
	}
}
