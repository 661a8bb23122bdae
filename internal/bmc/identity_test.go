package bmc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestIdentityMatches(t *testing.T) {
	const u = "4c4c4544-0042-3510-8052-b3c04f4d3332"
	for _, tc := range []struct {
		name      string
		want, got bmc.Identity
		match     bool
	}{
		{"same", bmc.Identity{UUID: u}, bmc.Identity{UUID: u}, true},
		{"case", bmc.Identity{UUID: u}, bmc.Identity{UUID: "4C4C4544-0042-3510-8052-B3C04F4D3332"}, true},
		{"braces and urn", bmc.Identity{UUID: "{" + u + "}"}, bmc.Identity{UUID: "urn:uuid:" + u}, true},
		{"no dashes", bmc.Identity{UUID: u}, bmc.Identity{UUID: "4c4c454400423510" + "8052b3c04f4d3332"}, true},
		{"other uuid", bmc.Identity{UUID: u}, bmc.Identity{UUID: "4c4c4544-0042-3510-8052-b3c04f4d3333"}, false},
		{"serial agrees", bmc.Identity{UUID: u, SerialNumber: "ABC"}, bmc.Identity{UUID: u, SerialNumber: "abc"}, true},
		{"serial differs", bmc.Identity{UUID: u, SerialNumber: "ABC"}, bmc.Identity{UUID: u, SerialNumber: "XYZ"}, false},
		{"serial known on one side only", bmc.Identity{UUID: u, SerialNumber: "ABC"}, bmc.Identity{UUID: u}, true},
		{"no uuid proves nothing", bmc.Identity{}, bmc.Identity{}, false},
		{"answer without uuid", bmc.Identity{UUID: u}, bmc.Identity{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.want.Matches(tc.got); got != tc.match {
				t.Errorf("%v.Matches(%v) = %v, want %v", tc.want, tc.got, got, tc.match)
			}
		})
	}
}

// A client bound to one machine refuses every system call on another before anything is sent,
// whatever path the call takes, and acts normally on its own.
func TestExpectRefusesAnotherMachine(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 2})
	p := pool(t, bmc.Options{})
	a, b := e.BMC(0), e.BMC(1)
	sysA, sysB := a.Systems()[0], b.Systems()[0]
	conn := get(t, p, endpoint(a))

	// A's address now answers for a Server whose system is B's: as after an address reuse.
	wrong := bmc.Expect(conn, bmc.Identity{UUID: sysB.UUID(), SerialNumber: sysB.SerialNumber()})
	id := sysA.ID()
	e.ClearRecords()
	checks := map[string]error{}
	_, checks["System"] = wrong.System(context.Background(), id)
	checks["Power"] = wrong.Power(context.Background(), id, bmc.PowerForceRestart)
	_, checks["PreparePower"] = wrong.PreparePower(context.Background(), id, bmc.PowerOff)
	checks["SetBootOnce"] = wrong.SetBootOnce(context.Background(), id, bmc.BootPxe)
	checks["SetIndicatorLED"] = wrong.SetIndicatorLED(context.Background(), id, "Lit")
	_, checks["Inventory"] = wrong.Inventory(context.Background(), id)
	_, checks["SerialConsole"] = wrong.SerialConsole(context.Background(), id)
	for call, err := range checks {
		if bmc.ReasonOf(err) != bmc.ReasonIdentityMismatch {
			t.Errorf("%s on another machine: %v, want %s", call, err, bmc.ReasonIdentityMismatch)
			continue
		}
		ie, ok := bmc.IdentityOf(err)
		if !ok || bmc.NormalizeUUID(ie.Got.UUID) != bmc.NormalizeUUID(sysA.UUID()) {
			t.Errorf("%s: the error does not name what answered: %v", call, err)
		}
		if !errors.Is(err, bmc.ErrNotSent) {
			t.Errorf("%s: a refused identity must say nothing was sent: %v", call, err)
		}
	}
	if recs := e.Records(); len(recs) != 0 {
		t.Errorf("actions reached the other machine: %+v", recs)
	}

	// Its own identity, in another spelling: everything goes through.
	right := bmc.Expect(conn, bmc.Identity{UUID: "{" + sysA.UUID() + "}", SerialNumber: sysA.SerialNumber()})
	st, err := right.System(context.Background(), id)
	if err != nil {
		t.Fatalf("System on its own machine: %v", err)
	}
	if st.SerialNumber != sysA.SerialNumber() {
		t.Errorf("serial read back %q, want %q", st.SerialNumber, sysA.SerialNumber())
	}
	if err := right.SetBootOnce(context.Background(), id, bmc.BootPxe); err != nil {
		t.Fatalf("SetBootOnce on its own machine: %v", err)
	}
	if recs := e.Records(); len(recs) != 1 {
		t.Errorf("records after one boot override: %+v", recs)
	}
}

// The locator LED goes through LocationIndicatorActive where the system has it, and Blinking,
// which only IndicatorLED can say, through that; both read back as the LED.
func TestSetIndicatorLED(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	a := e.BMC(0)
	sys := a.Systems()[0]
	conn := bmc.Expect(get(t, p, endpoint(a)), bmc.Identity{UUID: sys.UUID(), SerialNumber: sys.SerialNumber()})
	for _, led := range []string{"Lit", "Off", "Blinking", "Off"} {
		if err := conn.SetIndicatorLED(context.Background(), sys.ID(), led); err != nil {
			t.Fatalf("SetIndicatorLED %s: %v", led, err)
		}
		st, err := conn.System(context.Background(), sys.ID())
		if err != nil {
			t.Fatal(err)
		}
		if st.IndicatorLED != led {
			t.Errorf("LED read back %q after setting %s", st.IndicatorLED, led)
		}
	}
	if err := conn.SetIndicatorLED(context.Background(), sys.ID(), "Disco"); bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Errorf("an LED state Redfish does not know: %v, want %s", err, bmc.ReasonUnsupported)
	}
	var leds []string
	for _, r := range e.Records() {
		if r.Action == redfish.ActionIndicatorLED {
			leds = append(leds, r.LED)
		}
	}
	if fmt.Sprint(leds) != "[Lit Off Blinking Off]" {
		t.Errorf("LED writes recorded %v", leds)
	}
}
