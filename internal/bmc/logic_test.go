package bmc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestNormalizeAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.5", "https://10.0.0.5"},
		{"10.0.0.5:8443", "https://10.0.0.5:8443"},
		{"http://127.0.0.1:8000/", "http://127.0.0.1:8000"},
		{"https://bmc.example/redfish/v1/", "https://bmc.example"},
		{"[::1]:443", "https://[::1]:443"},
		{"", ""},
		{"ftp://x", ""},
		{"https://", ""},
	} {
		got, err := NormalizeAddress(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%q: got %q, %v; want InvalidConfig", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestResetTypeChoice(t *testing.T) {
	all := []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PushPowerButton", "PowerCycle"}
	noGraceful := []string{"On", "ForceOff", "ForceRestart"}
	buttonOnly := []string{"PushPowerButton", "ForceOff"}
	for _, tc := range []struct {
		action   PowerAction
		state    PowerState
		fallback bool
		allowed  []string
		want     string // "" = unsupported
	}{
		{PowerOn, PowerStateOff, false, all, "On"},
		{PowerOn, PowerStateOff, false, nil, "On"},
		{PowerOn, PowerStateOff, false, buttonOnly, "PushPowerButton"},
		{PowerOn, PowerStatePoweringOff, false, buttonOnly, ""},
		{PowerOff, PowerStateOn, false, all, "ForceOff"},
		{PowerGracefulOff, PowerStateOn, false, all, "GracefulShutdown"},
		{PowerGracefulOff, PowerStateOn, false, noGraceful, ""},
		{PowerGracefulOff, PowerStateOn, true, noGraceful, "ForceOff"},
		{PowerRestart, PowerStateOn, false, all, "GracefulRestart"},
		{PowerRestart, PowerStateOn, false, noGraceful, ""},
		{PowerRestart, PowerStateOn, true, noGraceful, "ForceRestart"},
		{PowerForceRestart, PowerStateOn, false, []string{"PowerCycle"}, "PowerCycle"},
	} {
		cands, err := resetCandidates(tc.action, tc.state, tc.fallback)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := chooseResetType(cands, tc.allowed)
		if (tc.want == "") != !ok || (ok && string(got) != tc.want) {
			t.Errorf("%s from %s (fallback %v, allowed %v): got %q/%v, want %q", tc.action, tc.state, tc.fallback, tc.allowed, got, ok, tc.want)
		}
	}
	if _, err := resetCandidates("Explode", PowerStateOn, false); err == nil {
		t.Error("unknown action accepted")
	}
}

func TestAlreadyThere(t *testing.T) {
	for _, tc := range []struct {
		a    PowerAction
		s    PowerState
		want bool
	}{
		{PowerOn, PowerStateOn, true}, {PowerOn, PowerStatePoweringOn, true}, {PowerOn, PowerStateOff, false},
		{PowerOff, PowerStateOff, true}, {PowerGracefulOff, PowerStatePoweringOff, true}, {PowerOff, PowerStateOn, false},
		{PowerRestart, PowerStateOn, false}, {PowerForceRestart, PowerStateOff, false},
	} {
		if got := alreadyThere(tc.a, tc.s); got != tc.want {
			t.Errorf("%s in %s: got %v", tc.a, tc.s, got)
		}
	}
	if !slices.Contains(PowerActions, PowerGracefulOff) {
		t.Error("PowerActions incomplete")
	}
}

func TestEndpointRedactsPassword(t *testing.T) {
	ep := Endpoint{Address: "https://x", Username: "root", Password: "hunter2"}
	for _, s := range []string{fmt.Sprint(ep), fmt.Sprintf("%v %+v %#v %s", ep, ep, ep, ep)} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("password leaked: %s", s)
		}
	}
}
