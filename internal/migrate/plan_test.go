package migrate

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal"
)

func TestServerActions(t *testing.T) {
	claims := map[string]*metalv1alpha1.ServerClaim{
		"ns/on": {Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn}},
	}
	maints := map[string]*metalv1alpha1.ServerMaintenance{
		"ns/off": {Spec: metalv1alpha1.ServerMaintenanceSpec{ServerPower: metalv1alpha1.PowerOff}},
	}
	srv := func(state metalv1alpha1.ServerState, power metalv1alpha1.PowerState, mutate ...func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		s.Status.State, s.Status.PowerState = state, power
		for _, m := range mutate {
			m(s)
		}
		return s
	}
	claimed := func(name string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) {
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: name}
		}
	}
	for _, tc := range []struct {
		name string
		s    *metalv1alpha1.Server
		want string // "" for none, else a substring of the one action
	}{
		{"available off", srv(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff), ""},
		{"available on is powered off", srv(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOn), "power Off"},
		{"reserved as its claim asks", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn, claimed("on")), ""},
		{"reserved off, claim wants on", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOff, claimed("on")), "power On"},
		{"reserved, claim gone", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn, claimed("gone")), "release"},
		{"no state: discovered", srv("", ""), "discover"},
		{"discovery on: waits", srv(metalv1alpha1.ServerStateDiscovery, metalv1alpha1.PowerStateOn), "none until it is Off"},
		{"discovery off: again", srv(metalv1alpha1.ServerStateDiscovery, metalv1alpha1.PowerStateOff), "discover again"},
		{"parked", srv(metalv1alpha1.ServerStateParked, metalv1alpha1.PowerStateOn, func(s *metalv1alpha1.Server) {
			s.Annotations = map[string]string{metalv1alpha1.ParkedAnnotation: "true"}
		}), ""},
		{"maintenance as asked", srv(metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOff, func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "off"}
		}), ""},
		{"maintenance, power differs", srv(metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOn, func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "off"}
		}), "power Off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, src := metal.StateOnStart(tc.s)
			got := serverActions(tc.s, state, src, claims, maints)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("actions %q, want none (state %s)", got, state)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("actions %q, want one saying %q (state %s)", got, tc.want, state)
			}
		})
	}
}

func TestFinalizerBlockers(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{
		metal.ServerFinalizer, "metal.ironcore.dev/biossettings", "example.com/other"}}}
	got := finalizerBlockers(s)
	if len(got) != 1 || !strings.Contains(got[0], "metal.ironcore.dev/biossettings") {
		t.Fatalf("blockers %q, want only the reference's biossettings finalizer", got)
	}
}
