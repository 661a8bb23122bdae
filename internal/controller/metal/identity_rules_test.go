package metal

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func TestNormalHost(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":             "10.0.0.1",
		" 10.0.0.1 ":           "10.0.0.1",
		"::ffff:10.0.0.1":      "10.0.0.1",
		"[2001:DB8::1]":        "2001:db8::1",
		"2001:0db8:0:0::1":     "2001:db8::1",
		"BMC-7.Rack1.Example.": "bmc-7.rack1.example",
	} {
		if got := normalHost(in); got != want {
			t.Errorf("normalHost(%q) = %q, want %q", in, got, want)
		}
	}
	// One address, three spellings of a BMC object: one key.
	inline := func(host string, port int32) *metalv1alpha1.BMC {
		return &metalv1alpha1.BMC{Spec: metalv1alpha1.BMCSpec{Access: &metalv1alpha1.InlineEndpoint{IP: host},
			Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: port}}}
	}
	a, b := bmcAddressKey(inline("::ffff:10.0.0.1", 443)), bmcAddressKey(inline("10.0.0.1", 443))
	if a != b || a != "https://10.0.0.1:443" {
		t.Errorf("keys %q and %q, want both https://10.0.0.1:443", a, b)
	}
	if c := bmcAddressKey(inline("10.0.0.1", 8443)); c == a {
		t.Errorf("another port, the same key %q", c)
	}
}

// A BMC that holds Servers registers what answers at its address only when at least one of its
// own machines is among it: otherwise the address reaches other machines.
func TestSameMachines(t *testing.T) {
	own := func(uuids ...string) []metalv1alpha1.Server {
		var out []metalv1alpha1.Server
		for _, u := range uuids {
			out = append(out, metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s-" + u}, Spec: metalv1alpha1.ServerSpec{SystemUUID: u}})
		}
		return out
	}
	sys := func(uuids ...string) []bmc.SystemSummary {
		var out []bmc.SystemSummary
		for _, u := range uuids {
			out = append(out, bmc.SystemSummary{ID: "1", ODataID: "/redfish/v1/Systems/1", UUID: u})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		own     []metalv1alpha1.Server
		systems []bmc.SystemSummary
		refused bool
	}{
		{"a new BMC registers what it finds", nil, sys("a"), false},
		{"its own machine, in another spelling", own("AAAA-1"), sys("{aaaa-1}"), false},
		{"a chassis that gained a blade", own("a"), sys("a", "b"), false},
		{"another machine at the same path", own("a"), sys("b"), true},
		{"nothing answers", own("a"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameMachines(tc.own, tc.systems)
			reason, _ := lifecycle.ReasonOf(err)
			if got := reason == metalv1alpha1.ReasonIdentityMismatch; got != tc.refused {
				t.Errorf("sameMachines: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
}
