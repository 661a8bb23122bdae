package bmcaccess

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

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
			err := SameMachines(tc.own, tc.systems)
			reason, _ := lifecycle.ReasonOf(err)
			if got := reason == metalv1alpha1.ReasonIdentityMismatch; got != tc.refused {
				t.Errorf("SameMachines: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
}
