package bmc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// fence admits requests while open and counts the holds still taken.
type fence struct {
	open   atomic.Bool
	taken  atomic.Int32
	maxNow atomic.Int32
}

func (f *fence) Hold() (func(), error) {
	if !f.open.Load() {
		return nil, errors.New("shard moved")
	}
	n := f.taken.Add(1)
	if n > f.maxNow.Load() {
		f.maxNow.Store(n)
	}
	return func() { f.taken.Add(-1) }, nil
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
