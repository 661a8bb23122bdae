package bmc_test

import (
	"context"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// recordsSince returns the emulator's records after the first n.
func recordsSince(e *redfish.Emulator, n int) []redfish.Record { return e.Records()[n:] }

func waitBoot(t *testing.T, events <-chan redfish.BootEvent, id string) redfish.BootEvent {
	t.Helper()
	select {
	case ev := <-events:
		if ev.SystemID != id {
			t.Fatalf("boot event of %s, want %s", ev.SystemID, id)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no boot event")
	}
	return redfish.BootEvent{}
}

func TestVirtualMediaBootAcrossVendors(t *testing.T) {
	events := make(chan redfish.BootEvent, 8)
	e := fleet(t, redfish.Options{OnBoot: func(ev redfish.BootEvent) { events <- ev }})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	const iso = "http://images.example/installer.iso"
	for _, vendor := range []string{"dell", "hpe", "lenovo", "supermicro", "openbmc"} {
		t.Run(vendor, func(t *testing.T) {
			b := byVendor(t, e, vendor)
			c := get(t, p, endpoint(b))
			id := b.SystemIDs()[0]
			slots, err := c.VirtualMedia(ctx, id)
			if err != nil || len(slots) == 0 {
				t.Fatalf("virtual media: %v %+v", err, slots)
			}
			if onManager := slots[0].OnManager; onManager != (vendor != "dell") {
				t.Fatalf("devices on the manager: %v", onManager)
			}
			n := len(e.Records())
			for range 2 { // the second finds it inserted and sends nothing
				if err := c.InsertMedia(ctx, id, iso); err != nil {
					t.Fatalf("insert: %v", err)
				}
			}
			if err := c.SetBootOnce(ctx, id, bmc.BootCd); err != nil {
				t.Fatalf("boot once Cd: %v", err)
			}
			if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
				t.Fatalf("power on: %v", err)
			}
			if ev := waitBoot(t, events, id); ev.Target != "Cd" || ev.Image != iso {
				t.Fatalf("boot event %+v", ev)
			}
			for range 2 {
				if err := c.EjectMedia(ctx, id, iso); err != nil {
					t.Fatalf("eject: %v", err)
				}
			}
			var got []string
			for _, r := range recordsSince(e, n) {
				got = append(got, r.Action)
				if (r.Action == redfish.ActionInsertMedia || r.Action == redfish.ActionEjectMedia) && r.Image != iso {
					t.Fatalf("record %+v", r)
				}
			}
			want := []string{redfish.ActionInsertMedia, redfish.ActionBootOverride, redfish.ActionReset, redfish.ActionEjectMedia}
			if len(got) != len(want) {
				t.Fatalf("recorded %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("recorded %v, want %v", got, want)
				}
			}
			if err := c.Power(ctx, id, bmc.PowerOff); err != nil {
				t.Fatal(err)
			}
			waitPower(t, c, id, bmc.PowerStateOff)
		})
	}
}

func TestVirtualMediaRefusals(t *testing.T) {
	e := fleet(t, redfish.Options{})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := byVendor(t, e, "lenovo")
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	n := len(e.Records())

	b.SetFaults(redfish.Faults{NoVirtualMedia: true})
	if err := c.InsertMedia(ctx, id, "http://x/a.iso"); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("no virtual media: %v", err)
	}
	b.SetFaults(redfish.Faults{MediaMountFails: true})
	if err := c.InsertMedia(ctx, id, "http://x/a.iso"); err == nil {
		t.Fatal("a mount the BMC refuses succeeded")
	}
	b.ClearFaults()
	if err := c.InsertMedia(ctx, id, "http://x/a.iso"); err != nil {
		t.Fatal(err)
	}
	// Another image is not pushed over one that is there.
	if err := c.InsertMedia(ctx, id, "http://x/b.iso"); bmc.ReasonOf(err) != bmc.ReasonRejected {
		t.Fatalf("insert over another image: %v", err)
	}
	if err := c.EjectMedia(ctx, id, "http://x/b.iso"); err != nil {
		t.Fatal(err)
	}
	if m := b.System(id).Media(); !m[0].Inserted && !m[1].Inserted {
		t.Fatal("ejecting another image ejected ours")
	}
	if got := recordsSince(e, n); len(got) != 1 || got[0].Action != redfish.ActionInsertMedia {
		t.Fatalf("recorded %+v", got)
	}
}

func TestUefiHTTPBoot(t *testing.T) {
	events := make(chan redfish.BootEvent, 8)
	e := fleet(t, redfish.Options{OnBoot: func(ev redfish.BootEvent) { events <- ev }})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	const uri = "https://boot.example/shim.efi"

	b := byVendor(t, e, "dell")
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	if st, err := c.System(ctx, id); err != nil || !st.HTTPBoot {
		t.Fatalf("dell does not report HTTP boot: %v %+v", err, st)
	}
	if err := c.SetBootOnce(ctx, id, bmc.BootUefiHttp, bmc.WithHTTPBootURI(uri)); err != nil {
		t.Fatalf("boot once UefiHttp: %v", err)
	}
	if st, _ := c.System(ctx, id); st.Boot.Target != "UefiHttp" || st.Boot.HTTPBootURI != uri {
		t.Fatalf("read back %+v", st.Boot)
	}
	if err := c.Power(ctx, id, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	if ev := waitBoot(t, events, id); ev.Target != "UefiHttp" || ev.Image != uri {
		t.Fatalf("boot event %+v", ev)
	}

	for _, tc := range []struct {
		vendor string
		faults redfish.Faults
	}{{"supermicro", redfish.Faults{}}, {"hpe", redfish.Faults{NoHTTPBoot: true}}} {
		b := byVendor(t, e, tc.vendor)
		b.SetFaults(tc.faults)
		c := get(t, p, endpoint(b))
		id := b.SystemIDs()[0]
		n := len(e.Records())
		if st, err := c.System(ctx, id); err != nil || st.HTTPBoot {
			t.Fatalf("%s reports HTTP boot: %v %+v", tc.vendor, err, st)
		}
		if err := c.SetBootOnce(ctx, id, bmc.BootUefiHttp, bmc.WithHTTPBootURI(uri)); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
			t.Fatalf("%s: UefiHttp without support: %v", tc.vendor, err)
		}
		if got := recordsSince(e, n); len(got) != 0 {
			t.Fatalf("%s: sent %+v", tc.vendor, got)
		}
	}
}

func TestVirtualMediaPerSystemOnMultiSystemBMCs(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, SystemsPerBMC: 3})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	c := get(t, p, endpoint(b))
	ids := b.SystemIDs()
	if err := c.InsertMedia(ctx, ids[1], "http://x/a.iso"); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		slots, err := c.VirtualMedia(ctx, id)
		if err != nil || len(slots) == 0 || slots[0].OnManager {
			t.Fatalf("system %s: %v %+v", id, err, slots)
		}
		inserted := false
		for _, s := range slots {
			inserted = inserted || s.Inserted
		}
		if inserted != (i == 1) {
			t.Fatalf("system %s inserted=%v", id, inserted)
		}
	}
}

func TestBootOrder(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	c := get(t, p, endpoint(b))
	id := b.SystemIDs()[0]
	entries, err := c.BootEntries(ctx, id)
	if err != nil || len(entries) < 3 {
		t.Fatalf("boot entries %v %v", entries, err)
	}
	if err := c.SetBootOrder(ctx, id, []string{"Boot9999"}); bmc.ReasonOf(err) != bmc.ReasonInvalidConfig {
		t.Fatalf("unknown entry: %v", err)
	}
	if len(e.Records()) != 0 {
		t.Fatal("an order with an unknown entry was sent")
	}
	if err := c.SetBootOrder(ctx, id, []string{entries[2].Ref}); err != nil {
		t.Fatal(err)
	}
	st, err := c.System(ctx, id)
	if err != nil || len(st.BootOrder) != len(entries) || st.BootOrder[0] != entries[2].Ref || st.BootOrder[1] != entries[0].Ref {
		t.Fatalf("order read back %v %v", st, err)
	}
}
