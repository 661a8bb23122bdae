package bmc_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// A background reader skips a BMC whose slots the reconciles hold, and one failing fast.
func TestPoolBusy(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, PowerDelay: -1})
	b := e.BMC(0)
	p := pool(t, bmc.Options{MaxConcurrentRequests: 4, RequestTimeout: time.Second})
	ep := endpoint(b)
	if busy, _ := p.Busy(ep.Address); busy {
		t.Fatal("a BMC not pooled yet is busy")
	}
	c := get(t, p, ep)
	id := b.SystemIDs()[0]
	if _, err := c.System(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if busy, why := p.Busy(ep.Address); busy {
		t.Fatalf("an idle BMC is busy (%s)", why)
	}

	// Two of four slots held by requests the BMC does not answer.
	b.SetFaults(redfish.Faults{Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			_, _ = c.System(ctx, id)
			done <- struct{}{}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().InFlight < 2 {
		if time.Now().After(deadline) {
			t.Fatal("requests never reached the BMC")
		}
		runtime.Gosched()
	}
	if busy, why := p.Busy(ep.Address); !busy || why != "saturated" {
		t.Errorf("Busy with half the slots taken = %t %q, want saturated", busy, why)
	}
	cancel()
	<-done
	<-done

	// A request that times out opens the breaker.
	if _, err := c.System(context.Background(), id); err == nil {
		t.Fatal("a hung BMC answered")
	}
	if busy, why := p.Busy(ep.Address); !busy || why != "unreachable" {
		t.Errorf("Busy with the breaker open = %t %q, want unreachable", busy, why)
	}
}
