package bmc_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

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
