package wiring

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
)

func nic(name, mac, carrier string, neighbors ...[2]string) metalv1alpha1.NetworkInterface {
	n := metalv1alpha1.NetworkInterface{Name: name, MACAddress: mac, CarrierStatus: carrier}
	for _, nb := range neighbors {
		n.Neighbors = append(n.Neighbors, metalv1alpha1.LLDPNeighbor{SystemName: nb[0], PortID: nb[1]})
	}
	return n
}

func want(mac, carrier string, neighbors ...[2]string) readinessv1alpha1.ExpectedInterface {
	e := readinessv1alpha1.ExpectedInterface{MACAddress: mac, CarrierStatus: carrier}
	for _, nb := range neighbors {
		e.Neighbors = append(e.Neighbors, readinessv1alpha1.ExpectedNeighbor{SystemName: nb[0], PortID: nb[1]})
	}
	return e
}

type nb = [2]string

func TestCompare(t *testing.T) {
	spine11 := nb{"spine-01", "Ethernet1/1"}
	spine12 := nb{"spine-01", "Ethernet1/2"}
	spine21 := nb{"spine-02", "Ethernet1/1"}
	tests := []struct {
		name     string
		expected []readinessv1alpha1.ExpectedInterface
		seen     []metalv1alpha1.NetworkInterface
		// want are "reason|message fragment" per mismatch, in order; none: the wiring holds.
		want []string
	}{{
		name:     "matches",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine11)},
	}, {
		name:     "MAC, carrier and names compared without regard to case or separator",
		expected: []readinessv1alpha1.ExpectedInterface{want("AA-BB-CC-DD-EE-FF", "Up", nb{"SPINE-01", "ethernet1/1"})},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine11)},
	}, {
		name:     "nothing expected of carrier or neighbours",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "")},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "down")},
	}, {
		name:     "NICs not listed are not checked",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine11), nic("eno2", "aa:bb:cc:dd:ee:00", "down")},
	}, {
		name:     "server not discovered",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		want:     []string{"InterfaceMissing|reports no network interfaces"},
	}, {
		name:     "interface missing names what is seen",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:00", "up", spine11)},
		want:     []string{"InterfaceMissing|no interface with MAC aa:bb:cc:dd:ee:ff; seen: eno1 (aa:bb:cc:dd:ee:00)"},
	}, {
		name:     "carrier down, and so no neighbour",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "down")},
		want: []string{`CarrierDown|eno1: carrier expected "up", seen "down"`,
			"NeighborMismatch|eno1: expected neighbour spine-01 port Ethernet1/1 not seen; seen: no LLDP neighbour"},
	}, {
		name:     "carrier not reported",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up")},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "")},
		want:     []string{`CarrierDown|seen none reported`},
	}, {
		name:     "carrier expected down, seen up",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "down")},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up")},
		want:     []string{`CarrierMismatch|carrier expected "down", seen "up"`},
	}, {
		name:     "wrong port: one mismatch naming both ports",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "up", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine12)},
		want:     []string{"NeighborMismatch|eno1: expected neighbour spine-01 port Ethernet1/1 not seen; seen: spine-01 port Ethernet1/2"},
	}, {
		name:     "one of two expected neighbours missing",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "", spine11, spine21)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine11)},
		want:     []string{"NeighborMismatch|expected neighbour spine-02 port Ethernet1/1 not seen; seen: spine-01 port Ethernet1/1"},
	}, {
		name:     "a neighbour beside the expected one passes, as upstream",
		expected: []readinessv1alpha1.ExpectedInterface{want("aa:bb:cc:dd:ee:ff", "", spine11)},
		seen:     []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:ff", "up", spine11, spine21)},
		want:     nil,
	}, {
		name: "several interfaces, in spec order",
		expected: []readinessv1alpha1.ExpectedInterface{
			want("aa:bb:cc:dd:ee:01", "up", spine11), want("aa:bb:cc:dd:ee:02", "up", spine21), want("aa:bb:cc:dd:ee:03", "up")},
		seen: []metalv1alpha1.NetworkInterface{
			nic("eno2", "aa:bb:cc:dd:ee:02", "up", spine12), nic("eno1", "aa:bb:cc:dd:ee:01", "up", spine11)},
		want: []string{"NeighborMismatch|eno2: expected neighbour spine-02 port Ethernet1/1", "InterfaceMissing|aa:bb:cc:dd:ee:03"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(tc.expected, tc.seen)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d mismatches %+v, want %d: %v", len(got), got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				reason, frag, _ := strings.Cut(w, "|")
				if got[i].Reason != reason || !strings.Contains(got[i].Message, frag) {
					t.Errorf("mismatch %d: %s %q, want %s containing %q", i, got[i].Reason, got[i].Message, reason, frag)
				}
				if got[i].MACAddress != tc.expected[indexOf(tc.expected, got[i].MACAddress)].MACAddress {
					t.Errorf("mismatch %d names MAC %s, not as the spec writes it", i, got[i].MACAddress)
				}
			}
		})
	}
}

func indexOf(es []readinessv1alpha1.ExpectedInterface, mac string) int {
	for i, e := range es {
		if e.MACAddress == mac {
			return i
		}
	}
	return 0
}

func TestGravest(t *testing.T) {
	ms := func(reasons ...string) []readinessv1alpha1.InterfaceMismatch {
		var out []readinessv1alpha1.InterfaceMismatch
		for _, r := range reasons {
			out = append(out, readinessv1alpha1.InterfaceMismatch{Reason: r})
		}
		return out
	}
	for _, tc := range []struct {
		in   []readinessv1alpha1.InterfaceMismatch
		want string
	}{
		{nil, ""},
		{ms("CarrierMismatch", "NeighborMismatch"), "CarrierMismatch"},
		{ms("NeighborMismatch", "CarrierDown", "InterfaceMissing"), "InterfaceMissing"},
		{ms("CarrierMismatch", "CarrierDown"), "CarrierDown"},
	} {
		if got := Gravest(tc.in); got != tc.want {
			t.Errorf("Gravest(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The Server's condition is every wiring naming it at once: True only when all match.
func TestServerCondition(t *testing.T) {
	s := &metalv1alpha1.Server{Status: metalv1alpha1.ServerStatus{NetworkInterfaces: []metalv1alpha1.NetworkInterface{
		nic("eno1", "aa:bb:cc:dd:ee:01", "up", nb{"leaf-01", "Ethernet1"})}}}
	w := func(ns, name string, ifs ...readinessv1alpha1.ExpectedInterface) readinessv1alpha1.ServerWiring {
		return readinessv1alpha1.ServerWiring{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: readinessv1alpha1.ServerWiringSpec{Network: readinessv1alpha1.ExpectedNetwork{Interfaces: ifs}}}
	}
	good := w("b", "good", want("aa:bb:cc:dd:ee:01", "up", nb{"leaf-01", "Ethernet1"}))
	bad := w("a", "bad", want("aa:bb:cc:dd:ee:01", "up", nb{"leaf-01", "Ethernet2"}))
	empty := w("c", "empty")
	for _, tc := range []struct {
		name    string
		wirings []readinessv1alpha1.ServerWiring
		status  metav1.ConditionStatus // "": no condition
		reason  string
		message string
	}{
		{"none", nil, "", "", ""},
		{"one matching", []readinessv1alpha1.ServerWiring{good}, metav1.ConditionTrue, "Match", "cabled as ServerWiring b/good expects"},
		{"only empty", []readinessv1alpha1.ServerWiring{empty}, metav1.ConditionTrue, "NoExpectedSpec", "c/empty"},
		{"one of two miswired", []readinessv1alpha1.ServerWiring{good, bad}, metav1.ConditionFalse, "NeighborMismatch",
			"a/bad: eno1: expected neighbour leaf-01 port Ethernet2 not seen; seen: leaf-01 port Ethernet1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ServerCondition(s, tc.wirings)
			if tc.status == "" {
				if c != nil {
					t.Fatalf("got %+v, want none", c)
				}
				return
			}
			if c == nil || c.Type != readinessv1alpha1.ConditionNetworkReady || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Fatalf("got %+v, want %s %s containing %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}

func TestNormalMAC(t *testing.T) {
	for in, want := range map[string]string{
		"AA:BB:CC:DD:EE:FF":   "aa:bb:cc:dd:ee:ff",
		"aa-bb-cc-dd-ee-ff":   "aa:bb:cc:dd:ee:ff",
		" aabb.ccdd.eeff ":    "aa:bb:cc:dd:ee:ff",
		"not-a-mac":           "not-a-mac",
		"AA:BB:CC:DD:EE:FF:G": "aa:bb:cc:dd:ee:ff:g",
	} {
		if got := NormalMAC(in); got != want {
			t.Errorf("NormalMAC(%q) = %q, want %q", in, got, want)
		}
	}
}

// Only what the comparison reads, or our condition, wakes the wirings: the server controller's
// power, state and inventory writes do not.
func TestServerChanged(t *testing.T) {
	base := &metalv1alpha1.Server{Status: metalv1alpha1.ServerStatus{
		PowerState:        metalv1alpha1.PowerStateOff,
		NetworkInterfaces: []metalv1alpha1.NetworkInterface{nic("eno1", "aa:bb:cc:dd:ee:01", "up", nb{"leaf-01", "Ethernet1"})},
		Conditions:        []metav1.Condition{{Type: readinessv1alpha1.ConditionNetworkReady, Status: metav1.ConditionTrue, Reason: "Match", Message: "m"}},
	}}
	for _, tc := range []struct {
		name   string
		change func(s *metalv1alpha1.Server)
		want   bool
	}{
		{"power", func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, false},
		{"NIC speed and IPs", func(s *metalv1alpha1.Server) {
			s.Status.NetworkInterfaces[0].SpeedMbps, s.Status.NetworkInterfaces[0].IPs = 25000, []string{"10.0.0.1"}
		}, false},
		{"another condition", func(s *metalv1alpha1.Server) {
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue})
		}, false},
		{"MAC case only", func(s *metalv1alpha1.Server) { s.Status.NetworkInterfaces[0].MACAddress = "AA:BB:CC:DD:EE:01" }, false},
		{"neighbour port", func(s *metalv1alpha1.Server) { s.Status.NetworkInterfaces[0].Neighbors[0].PortID = "Ethernet2" }, true},
		{"carrier", func(s *metalv1alpha1.Server) { s.Status.NetworkInterfaces[0].CarrierStatus = "down" }, true},
		{"NIC gone", func(s *metalv1alpha1.Server) { s.Status.NetworkInterfaces = nil }, true},
		{"our condition removed", func(s *metalv1alpha1.Server) { s.Status.Conditions = nil }, true},
		{"our condition changed", func(s *metalv1alpha1.Server) { s.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.change(n)
			if got := ServerChanged().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tc.want {
				t.Errorf("passes: %v, want %v", got, tc.want)
			}
		})
	}
}
