package bmc_test

import (
	"context"
	"errors"
	"slices"
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
