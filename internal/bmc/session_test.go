package bmc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestSessionReuseExpiryAndLogout(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 2})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, p, endpoint(b))
	for range 5 {
		if _, err := get(t, p, endpoint(b)).System(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.SessionsCreated != 1 || st.ActiveSessions != 1 {
		t.Fatalf("want one reused session, stats %+v", st)
	}

	if n := b.ExpireSessions(); n != 1 {
		t.Fatalf("expired %d sessions", n)
	}
	if _, err := c.System(ctx, id); err != nil {
		t.Fatalf("after session expiry: %v", err)
	}
	if st := b.Stats(); st.SessionsCreated != 2 {
		t.Fatalf("want a re-login after expiry, stats %+v", st)
	}

	// Rotated credentials: the pool replaces the connection and logs out.
	b.SetCredentials("admin", "rotated")
	ep := endpoint(b)
	c2 := get(t, p, ep)
	if c2 == c {
		t.Fatal("pool kept the connection after a credential change")
	}
	if _, err := c2.System(ctx, id); err != nil {
		t.Fatalf("with new credentials: %v", err)
	}
	p.Remove(ep.Address)
	if st := b.Stats(); st.ActiveSessions != 0 || st.SessionsDeleted < 1 {
		t.Fatalf("want sessions logged out, stats %+v", st)
	}

	// No SessionService: Basic auth, no sessions at all.
	nb := e.BMC(1)
	nb.SetFaults(redfish.Faults{NoSessionService: true})
	if _, err := get(t, p, endpoint(nb)).Inventory(ctx, nb.SystemIDs()[0]); err != nil {
		t.Fatalf("basic auth inventory: %v", err)
	}
	if st := nb.Stats(); st.SessionsCreated != 0 {
		t.Fatalf("sessions created without SessionService: %+v", st)
	}
}

// A BMC whose session slots are all taken — by sessions a killed predecessor never logged out of
// — is still managed, over Basic auth, instead of being locked out until they expire.
func TestSessionLimitFallsBackToBasic(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, MaxSessions: 2})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	ctx := context.Background()
	for range 2 { // predecessors that die without logging out
		p := bmc.NewPool(bmc.Options{RequestTimeout: 2 * time.Second})
		if _, err := get(t, p, endpoint(b)).System(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.ActiveSessions != 2 {
		t.Fatalf("setup: %+v", st)
	}
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	if _, err := c.System(ctx, id); err != nil {
		t.Fatalf("with every session slot taken: %v", err)
	}
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatalf("power over Basic auth: %v", err)
	}
}

func TestConcurrencyCap(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(5 * time.Millisecond)})
	p := pool(t, bmc.Options{MaxConcurrentRequests: 2})
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Inventory(context.Background(), id)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.MaxInFlight != 2 {
		t.Fatalf("max in-flight %d, cap 2", st.MaxInFlight)
	}
}
