package bmc_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// fleet starts an emulator big enough to hold every vendor profile.
func fleet(t *testing.T, opts redfish.Options) *redfish.Emulator {
	t.Helper()
	if opts.BMCs == 0 {
		opts.BMCs = 15
	}
	if opts.PowerDelay == 0 {
		opts.PowerDelay = 30 * time.Millisecond
	}
	e, err := redfish.Start(opts)
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func byVendor(t *testing.T, e *redfish.Emulator, vendor string) *redfish.BMC {
	t.Helper()
	for _, b := range e.BMCs() {
		if b.Vendor() == vendor {
			return b
		}
	}
	t.Fatalf("no %s BMC in the fleet", vendor)
	return nil
}

func pool(t *testing.T, opts bmc.Options) *bmc.Pool {
	t.Helper()
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 2 * time.Second
	}
	p := bmc.NewPool(opts)
	t.Cleanup(p.Close)
	return p
}

func endpoint(b *redfish.BMC) bmc.Endpoint {
	u, p := b.Credentials()
	return bmc.Endpoint{Address: b.URL(), Username: u, Password: p}
}

func get(t *testing.T, p *bmc.Pool, ep bmc.Endpoint) bmc.BMC {
	t.Helper()
	c, err := p.Get(ep)
	if err != nil {
		t.Fatalf("pool get: %v", err)
	}
	return c
}

// waitPower polls like a controller would; the library never polls.
func waitPower(t *testing.T, c bmc.BMC, id string, want bmc.PowerState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.System(context.Background(), id)
		if err != nil {
			t.Fatalf("read system: %v", err)
		}
		if st.PowerState == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("power state %s, want %s", st.PowerState, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestInventoryAcrossVendors(t *testing.T) {
	e := fleet(t, redfish.Options{SystemsPerBMC: 2, InitialPower: redfish.PowerOn})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	sources := map[string]bool{}
	for _, b := range e.BMCs() {
		c := get(t, p, endpoint(b))
		systems, err := c.Systems(ctx)
		if err != nil {
			t.Fatalf("%s: systems: %v", b.Vendor(), err)
		}
		if len(systems) != 2 {
			t.Fatalf("%s: %d systems, want 2", b.Vendor(), len(systems))
		}
		for _, sum := range systems {
			want := b.System(sum.ID)
			if want == nil {
				t.Fatalf("%s: unknown system %q", b.Vendor(), sum.ID)
			}
			inv, err := c.Inventory(ctx, sum.ID)
			if err != nil {
				t.Fatalf("%s: inventory %s: %v", b.Vendor(), sum.ID, err)
			}
			if len(inv.FailedSections) != 0 {
				t.Fatalf("%s: failed sections %+v", b.Vendor(), inv.FailedSections)
			}
			if inv.System.UUID != want.UUID() || inv.System.SerialNumber != want.SerialNumber() || inv.System.PowerState != bmc.PowerStateOn {
				t.Fatalf("%s: system info %+v", b.Vendor(), inv.System)
			}
			if len(inv.Processors) == 0 || inv.Processors[0].Cores == 0 || inv.Memory.TotalMiB == 0 || inv.Memory.Modules == 0 {
				t.Fatalf("%s: cpu/mem %+v %+v", b.Vendor(), inv.Processors, inv.Memory)
			}
			var macs []string
			up := 0
			for _, n := range inv.NICs {
				macs = append(macs, n.MACAddress)
				if n.Carrier {
					up++
				}
			}
			for _, m := range want.MACs() {
				if !slices.Contains(macs, toLower(m)) {
					t.Fatalf("%s: MAC %s missing from %v", b.Vendor(), m, macs)
				}
			}
			if up == 0 || len(inv.NICs[0].IPv4)+len(inv.NICs[1].IPv4) == 0 {
				t.Fatalf("%s: powered-on NICs without link or IP: %+v", b.Vendor(), inv.NICs)
			}
			if len(inv.Storage.Drives) == 0 {
				t.Fatalf("%s: no drives: %+v", b.Vendor(), inv.Storage)
			}
			sources[inv.Storage.Source] = true
			if inv.Manager == nil || inv.Manager.FirmwareVersion == "" || inv.Manager.MACAddress == "" {
				t.Fatalf("%s: manager %+v", b.Vendor(), inv.Manager)
			}
		}
	}
	if !sources["Storage"] || !sources["SimpleStorage"] {
		t.Fatalf("want both storage shapes, got %v", sources)
	}
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func TestPowerIsAsynchronous(t *testing.T) {
	e := fleet(t, redfish.Options{PowerDelay: 50 * time.Millisecond})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	for _, vendor := range []string{"dell", "hpe", "lenovo", "supermicro", "openbmc"} {
		t.Run(vendor, func(t *testing.T) {
			b := byVendor(t, e, vendor)
			c := get(t, p, endpoint(b))
			id := b.SystemIDs()[0]
			// A BMC that takes forever: Power must return while it is still
			// PoweringOn, since the library never polls.
			b.SetPowerDelay(time.Hour)
			if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
				t.Fatalf("power on: %v", err)
			}
			if st, err := c.System(ctx, id); err != nil || st.PowerState != bmc.PowerStatePoweringOn {
				t.Fatalf("right after Power(On): %+v %v, want PoweringOn", st, err)
			}
			b.SetPowerDelay(50 * time.Millisecond)
			b.System(id).SetPowerState(redfish.PowerOff)
			if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
				t.Fatalf("power on: %v", err)
			}
			waitPower(t, c, id, bmc.PowerStateOn)
			before := len(e.Records())
			if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
				t.Fatalf("power on again: %v", err)
			}
			if len(e.Records()) != before {
				t.Fatalf("Power(On) on a system already On sent a reset")
			}

			err := c.Power(ctx, id, bmc.PowerRestart)
			if vendor == "lenovo" {
				// No GracefulRestart advertised: only an explicit fallback may force.
				if !errors.Is(err, bmc.ErrUnsupported) {
					t.Fatalf("graceful restart without it advertised: %v, want Unsupported", err)
				}
				err = c.Power(ctx, id, bmc.PowerRestart, bmc.WithForceFallback())
			}
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			last := e.Records()[len(e.Records())-1]
			wantType := "GracefulRestart"
			if vendor == "lenovo" {
				wantType = "ForceRestart"
			}
			if last.ResetType != wantType || last.SystemID != id {
				t.Fatalf("recorded %+v, want %s on %s", last, wantType, id)
			}
			waitPower(t, c, id, bmc.PowerStateOn)

			if err := c.Power(ctx, id, bmc.PowerOff); err != nil {
				t.Fatalf("power off: %v", err)
			}
			waitPower(t, c, id, bmc.PowerStateOff)
			last = e.Records()[len(e.Records())-1]
			if last.ResetType != "ForceOff" {
				t.Fatalf("power off recorded %+v", last)
			}
		})
	}
}

func TestGracefulOffIgnoredIsCallersChoice(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	b.SetFaults(redfish.Faults{IgnoreGracefulShutdown: true})
	p := pool(t, bmc.Options{})
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	ctx := context.Background()
	if err := c.Power(ctx, id, bmc.PowerGracefulOff); err != nil {
		t.Fatalf("graceful off: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // several power delays
	if st, _ := c.System(ctx, id); st.PowerState != bmc.PowerStateOn {
		t.Fatalf("machine ignoring ACPI powered off anyway: %s", st.PowerState)
	}
	// The caller escalates explicitly.
	if err := c.Power(ctx, id, bmc.PowerOff); err != nil {
		t.Fatalf("force off: %v", err)
	}
	waitPower(t, c, id, bmc.PowerStateOff)
}

func TestBootOnceThenPXEBoot(t *testing.T) {
	events := make(chan redfish.BootEvent, 8)
	e := fleet(t, redfish.Options{OnBoot: func(ev redfish.BootEvent) { events <- ev }})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		vendor   string
		faults   redfish.Faults
		wantMode string
	}{
		{vendor: "dell", faults: redfish.Faults{StrictETag: true}, wantMode: "UEFI"},
		{vendor: "supermicro", wantMode: ""}, // does not advertise the mode
		{vendor: "hpe", faults: redfish.Faults{BootReadbackContinuous: true}, wantMode: "UEFI"},
	} {
		t.Run(tc.vendor, func(t *testing.T) {
			b := byVendor(t, e, tc.vendor)
			b.SetFaults(tc.faults)
			c := get(t, p, endpoint(b))
			id := b.SystemIDs()[0]
			if err := c.SetBootOnce(ctx, id, bmc.BootPxe); err != nil {
				t.Fatalf("set boot once: %v", err)
			}
			rec := e.Records()[len(e.Records())-1]
			if rec.Action != redfish.ActionBootOverride || rec.Boot.Enabled != "Once" || rec.Boot.Target != "Pxe" {
				t.Fatalf("recorded %+v", rec)
			}
			if got := b.System(id).Boot().Mode; got != tc.wantMode {
				t.Fatalf("mode %q, want %q", got, tc.wantMode)
			}
			if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
				t.Fatalf("power on: %v", err)
			}
			select {
			case ev := <-events:
				if ev.SystemID != id || ev.Target != "Pxe" || len(ev.MACs) == 0 {
					t.Fatalf("boot event %+v", ev)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no PXE boot event")
			}
			if st, _ := c.System(ctx, id); st.Boot.Enabled != "Disabled" {
				t.Fatalf("one-time override not consumed: %+v", st.Boot)
			}
			b.ClearFaults()
		})
	}
	b := byVendor(t, e, "dell")
	if err := get(t, p, endpoint(b)).SetBootOnce(ctx, b.SystemIDs()[0], "Floppy"); !errors.Is(err, bmc.ErrUnsupported) {
		t.Fatalf("unadvertised boot target: %v, want Unsupported", err)
	}
}

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

func TestFaultsBecomeTypedErrors(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	for _, tc := range []struct {
		name   string
		faults redfish.Faults
		want   error
	}{
		{"server error", redfish.Faults{Status: 503}, bmc.ErrUnavailable},
		{"unauthorized", redfish.Faults{Unauthorized: true}, bmc.ErrAuthenticationFailed},
		{"hang", redfish.Faults{Hang: true}, bmc.ErrTimeout},
		{"slow", redfish.Faults{Latency: redfish.Duration(time.Second)}, bmc.ErrTimeout},
		{"dropped connection", redfish.Faults{DropConnection: true}, bmc.ErrConnectionFailed},
		{"not implemented", redfish.Faults{Status: 501}, bmc.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.SetFaults(tc.faults)
			defer b.ClearFaults()
			// A fresh pool each time: the fault must surface on connect, too.
			p := pool(t, bmc.Options{RequestTimeout: 150 * time.Millisecond})
			_, err := get(t, p, endpoint(b)).System(context.Background(), id)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var be *bmc.Error
			if !errors.As(err, &be) || string(be.Reason) != tc.want.Error() || bmc.ReasonString(err) != tc.want.Error() {
				t.Fatalf("typed error: %#v", err)
			}
		})
	}

	t.Run("fault after the session exists", func(t *testing.T) {
		p := pool(t, bmc.Options{RequestTimeout: 150 * time.Millisecond, UnreachableBackoff: 20 * time.Millisecond})
		c := get(t, p, endpoint(b))
		if _, err := c.System(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		// A 401 is an answer: it never makes the BMC unreachable.
		b.SetFaults(redfish.Faults{Unauthorized: true})
		defer b.ClearFaults()
		if err := c.Power(context.Background(), id, bmc.PowerOn); !errors.Is(err, bmc.ErrAuthenticationFailed) || errors.Is(err, bmc.ErrUnreachable) {
			t.Fatalf("got %v, want AuthenticationFailed", err)
		}
		b.SetFaults(redfish.Faults{Hang: true})
		if _, err := c.System(context.Background(), id); !errors.Is(err, bmc.ErrTimeout) {
			t.Fatalf("got %v, want Timeout", err)
		}
		b.ClearFaults()
		// Failing fast until the probe after the (short) window finds the BMC back.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := c.System(context.Background(), id)
			if err == nil {
				break
			}
			if !errors.Is(err, bmc.ErrUnreachable) || time.Now().After(deadline) {
				t.Fatalf("recovers after the fault clears: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		p := pool(t, bmc.Options{})
		_, err = get(t, p, bmc.Endpoint{Address: "http://" + addr, Username: "u", Password: "p"}).Systems(context.Background())
		if !errors.Is(err, bmc.ErrConnectionFailed) {
			t.Fatalf("got %v, want ConnectionFailed", err)
		}
	})

	t.Run("unknown system", func(t *testing.T) {
		p := pool(t, bmc.Options{})
		_, err := get(t, p, endpoint(b)).System(context.Background(), "NoSuchSystem")
		if !errors.Is(err, bmc.ErrNotFound) {
			t.Fatalf("got %v, want NotFound", err)
		}
	})

	t.Run("caller deadline", func(t *testing.T) {
		b.SetFaults(redfish.Faults{Hang: true})
		defer b.ClearFaults()
		p := pool(t, bmc.Options{RequestTimeout: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := get(t, p, endpoint(b)).Systems(ctx); !errors.Is(err, bmc.ErrTimeout) {
			t.Fatalf("got %v, want Timeout", err)
		}
	})
}

func TestBrokenCollectionsAreBestEffort(t *testing.T) {
	e := fleet(t, redfish.Options{})
	p := pool(t, bmc.Options{})
	b := byVendor(t, e, "dell")
	b.SetFaults(redfish.Faults{BrokenCollections: map[string]int{"Memory": 404, "Processors": 501, "Storage": 500}})
	inv, err := get(t, p, endpoint(b)).Inventory(context.Background(), b.SystemIDs()[0])
	if err != nil {
		t.Fatalf("inventory failed as a whole: %v", err)
	}
	got := map[string]bmc.Reason{}
	for _, f := range inv.FailedSections {
		got[f.Section] = f.Reason
	}
	want := map[string]bmc.Reason{
		bmc.SectionMemory: bmc.ReasonNotFound, bmc.SectionProcessors: bmc.ReasonUnsupported, bmc.SectionStorage: bmc.ReasonUnavailable,
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("failed sections %+v, want %v", inv.FailedSections, want)
		}
	}
	if len(inv.NICs) == 0 || inv.Manager == nil || inv.System.UUID == "" {
		t.Fatalf("healthy sections missing: %+v", inv)
	}
	// MemorySummary still gives the total when the Memory collection is gone.
	if inv.Memory.TotalMiB == 0 || inv.System.ProcessorCount == 0 {
		t.Fatalf("summaries not used as fallback: %+v %+v", inv.Memory, inv.System)
	}
}

func TestTLS(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, TLS: true})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	p := pool(t, bmc.Options{})
	ctx := context.Background()

	ep := endpoint(b)
	if _, err := get(t, p, ep).System(ctx, id); !errors.Is(err, bmc.ErrTLSVerificationFailed) {
		t.Fatalf("self-signed without CA: %v, want TLSVerificationFailed", err)
	}
	ep.CACert = e.CACertPEM()
	if _, err := get(t, p, ep).System(ctx, id); err != nil {
		t.Fatalf("with CA bundle: %v", err)
	}
	ep.CACert, ep.InsecureSkipVerify = nil, true
	if _, err := get(t, p, ep).System(ctx, id); err != nil {
		t.Fatalf("insecure: %v", err)
	}
	if _, err := p.Get(bmc.Endpoint{Address: b.URL(), CACert: []byte("not pem")}); !errors.Is(err, bmc.ErrInvalidConfig) {
		t.Fatalf("bad CA bundle: %v, want InvalidConfig", err)
	}
}

// A BMC reset goes to the manager, not the system, and the connection logs in again after it
// (the reboot ends every session).
func TestResetManagerThenReconnect(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	p := pool(t, bmc.Options{})
	c := get(t, p, endpoint(b))
	ctx := context.Background()
	if _, err := c.Manager(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetManager(ctx); err != nil {
		t.Fatalf("reset manager: %v", err)
	}
	recs := e.Records()
	if len(recs) != 1 || recs[0].Action != redfish.ActionManagerReset || recs[0].ResetType != "GracefulRestart" || recs[0].SystemID != "" {
		t.Fatalf("records %+v, want one graceful manager reset", recs)
	}
	if _, err := c.Systems(ctx); err != nil {
		t.Fatalf("after the BMC reset: %v", err)
	}
}

// Whether a failed action may have happened decides whether it may be issued again: a failure
// before the request was sent says for certain that it did not; a timeout on a request does not.
func TestActionsSayWhetherTheyWereSent(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	ctx := context.Background()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	refused := get(t, pool(t, bmc.Options{}), bmc.Endpoint{Address: "http://" + addr, Username: "u", Password: "p"})
	if err := refused.ResetManager(ctx); !errors.Is(err, bmc.ErrNotSent) {
		t.Errorf("reset manager on a closed port: %v, want NotSent", err)
	}
	if err := refused.Power(ctx, id, bmc.PowerOn); !errors.Is(err, bmc.ErrNotSent) {
		t.Errorf("power on a closed port: %v, want NotSent", err)
	}

	c := get(t, pool(t, bmc.Options{RequestTimeout: 150 * time.Millisecond, UnreachableBackoff: time.Minute}), endpoint(b))
	if _, err := c.Manager(ctx); err != nil {
		t.Fatal(err)
	}
	b.SetFaults(redfish.Faults{Hang: true})
	defer b.ClearFaults()
	if _, err := c.Systems(ctx); !errors.Is(err, bmc.ErrTimeout) || errors.Is(err, bmc.ErrNotSent) {
		t.Errorf("a request into a hang: %v, want Timeout and not NotSent", err)
	}
	// The breaker is open now: the reset is not even tried.
	if err := c.ResetManager(ctx); !errors.Is(err, bmc.ErrNotSent) {
		t.Errorf("reset manager while failing fast: %v, want NotSent", err)
	}
	if len(e.Records()) != 0 {
		t.Errorf("records %+v, want none", e.Records())
	}
}

// Manager.LastResetTime, where the firmware reports it, moves when the BMC is reset: what tells
// whether a reset of unknown outcome happened.
func TestManagerLastResetTimeMovesOnReset(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	b.SetReportsLastResetTime(false)
	if m, err := c.Manager(ctx); err != nil || m.LastResetTime != "" {
		t.Fatalf("older firmware: %+v, %v; want no LastResetTime", m, err)
	}
	b.SetReportsLastResetTime(true)
	before, err := c.Manager(ctx)
	if err != nil || before.LastResetTime == "" {
		t.Fatalf("manager: %+v, %v; want a LastResetTime", before, err)
	}
	if err := c.ResetManager(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.Manager(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.LastResetTime == before.LastResetTime {
		t.Errorf("LastResetTime %s unchanged by a reset", after.LastResetTime)
	}
}

// ComputerSystem.LastResetTime, where the firmware reports it, is read with the system and
// before a prepared reset, and moves when the system is restarted.
func TestSystemLastResetTimeMovesOnRestart(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	b.SetReportsSystemLastResetTime(false)
	if st, err := c.System(ctx, id); err != nil || st.LastResetTime != "" {
		t.Fatalf("firmware that does not say: %+v, %v; want no LastResetTime", st, err)
	}
	b.SetReportsSystemLastResetTime(true)
	before, err := c.System(ctx, id)
	if err != nil || before.LastResetTime == "" {
		t.Fatalf("system: %+v, %v; want a LastResetTime", before, err)
	}
	req, err := c.PreparePower(ctx, id, bmc.PowerForceRestart)
	if err != nil || req == nil {
		t.Fatalf("prepare restart: %v, %v", req, err)
	}
	if req.LastResetTime() != before.LastResetTime || req.PowerState() != bmc.PowerStateOn {
		t.Errorf("prepared request saw %s/%s, want %s/On", req.LastResetTime(), req.PowerState(), before.LastResetTime)
	}
	if err := req.Send(); err != nil {
		t.Fatal(err)
	}
	after, err := c.System(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.LastResetTime == before.LastResetTime {
		t.Errorf("LastResetTime %s unchanged by a restart", after.LastResetTime)
	}
}

// An action answered 500 after the BMC carried it out is reported as the BMC's answer, with its
// status: what the caller needs to treat it as of unknown outcome, not as refused.
func TestActionAnsweredAfterEffectKeepsStatus(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, InitialPower: redfish.PowerOn})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	if _, err := c.System(ctx, id); err != nil {
		t.Fatal(err)
	}
	b.SetFaults(redfish.Faults{ErrorAfterEffect: 500})
	defer b.ClearFaults()
	err := c.Power(ctx, id, bmc.PowerForceRestart)
	var be *bmc.Error
	if !errors.As(err, &be) || be.StatusCode != 500 || errors.Is(err, bmc.ErrNotSent) {
		t.Fatalf("restart answered 500 after acting: %v, want a sent request with status 500", err)
	}
	if n := len(e.Records()); n != 1 {
		t.Errorf("records: %d, want the restart once", n)
	}
}

// PreparePower leaves only the reset request to Send: a caller that records its intent in
// between (operation annotations) has nothing else between the record and the BMC.
func TestPreparePowerLeavesOnlyTheRequest(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	b.System(id).SetPowerState(redfish.PowerOff)
	if req, err := c.PreparePower(ctx, id, bmc.PowerOff); err != nil || req != nil {
		t.Fatalf("off while off: %v, %v; want nothing to send", req, err)
	}
	req, err := c.PreparePower(ctx, id, bmc.PowerOn)
	if err != nil || req == nil {
		t.Fatalf("prepare power on: %v, %v", req, err)
	}
	before := b.Stats().Requests
	if len(e.Records()) != 0 {
		t.Fatalf("records after prepare: %+v", e.Records())
	}
	if err := req.Send(); err != nil {
		t.Fatal(err)
	}
	if n := b.Stats().Requests - before; n != 1 {
		t.Errorf("Send made %d requests, want the one reset", n)
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].ResetType != "On" {
		t.Errorf("records %+v, want one On", recs)
	}
}

// Every request, the login included, names its sender: a BMC's audit log tells which replica
// acted.
func TestRequestsCarryTheUserAgent(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	b.JournalRequests(true)
	c := get(t, pool(t, bmc.Options{UserAgent: "metalhub (replica-a)"}), endpoint(b))
	if _, err := c.Systems(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := b.RequestSpans()
	if len(spans) == 0 {
		t.Fatal("no request journaled")
	}
	for _, s := range spans {
		if s.UserAgent != "metalhub (replica-a)" {
			t.Errorf("%s %s sent as %q", s.Method, s.Path, s.UserAgent)
		}
	}
}
