package claim

import (
	"testing"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Which Server updates reach the claims: binding, claimability, labels and taints do; status
// churn of a server no claim waits on does not.
func TestClaimRelevant(t *testing.T) {
	base := metaltest.FreeServer("s", map[string]string{"rack": "r1"})
	claimedReserved := metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
	})
	claimedMaint := metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateMaintenance)
	})
	cases := []struct {
		name   string
		old    *metalv1alpha1.Server
		change func(*metalv1alpha1.Server)
		want   bool
	}{
		{"nothing", base, func(*metalv1alpha1.Server) {}, false},
		{"inventory reported", base, func(s *metalv1alpha1.Server) { s.Status.Manufacturer = "Dell Inc." }, false},
		{"claimed", base, func(s *metalv1alpha1.Server) {
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		}, true},
		{"no longer claimable (powered on)", base, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
		{"relabelled", base, func(s *metalv1alpha1.Server) { s.Labels = map[string]string{"rack": "r2"} }, true},
		{"tainted", base, func(s *metalv1alpha1.Server) {
			s.Spec.Taints = []metalv1alpha1.Taint{{Key: "k", Effect: metalv1alpha1.TaintEffectNoBind}}
		}, true},
		{"state moved", base, func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateParked)
		}, true},
		{"power of a Reserved server (the claim shows it)", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
		{"inventory of a Reserved server", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.BIOSVersion = "2.19.1" }, false},
		{"a Reserved server on its way to On (the claim shows settled power only)", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStatePoweringOn }, false},
		{"power of a claimed server in maintenance", claimedMaint, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.old.DeepCopy()
			tc.change(s)
			if got := claimRelevant(tc.old, s); got != tc.want {
				t.Errorf("claimRelevant = %v, want %v", got, tc.want)
			}
		})
	}
}
