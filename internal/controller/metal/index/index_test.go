package index

import (
	"testing"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// One spelling per host, and one address key per BMC however its object spells the address.
func TestNormalHost(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":             "10.0.0.1",
		" 10.0.0.1 ":           "10.0.0.1",
		"::ffff:10.0.0.1":      "10.0.0.1",
		"[2001:DB8::1]":        "2001:db8::1",
		"2001:0db8:0:0::1":     "2001:db8::1",
		"BMC-7.Rack1.Example.": "bmc-7.rack1.example",
	} {
		if got := NormalHost(in); got != want {
			t.Errorf("NormalHost(%q) = %q, want %q", in, got, want)
		}
	}
	// One address, three spellings of a BMC object: one key.
	inline := func(host string, port int32) *metalv1alpha1.BMC {
		return &metalv1alpha1.BMC{Spec: metalv1alpha1.BMCSpec{Access: &metalv1alpha1.InlineEndpoint{IP: host},
			Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: port}}}
	}
	a, b := BMCAddressKey(inline("::ffff:10.0.0.1", 443)), BMCAddressKey(inline("10.0.0.1", 443))
	if a != b || a != "https://10.0.0.1:443" {
		t.Errorf("keys %q and %q, want both https://10.0.0.1:443", a, b)
	}
	if c := BMCAddressKey(inline("10.0.0.1", 8443)); c == a {
		t.Errorf("another port, the same key %q", c)
	}
}
