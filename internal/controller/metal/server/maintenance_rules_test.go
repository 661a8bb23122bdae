package server

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// What counts as "the box already runs its maintenance's boot configuration".
func TestMaintenanceBooted(t *testing.T) {
	m := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fw", UID: types.UID("uid-1")}}
	moved := m.DeepCopy()
	moved.UID = "uid-copy"
	moved.Annotations = map[string]string{lifecycle.MovedFromAnnotation: "uid-1"}
	recreated := m.DeepCopy()
	recreated.UID = "uid-2"
	for _, tc := range []struct {
		name      string
		record    string
		m         *metalv1alpha1.ServerMaintenance
		on, ready bool
		want      bool
	}{
		{"no record: metalhub entered Maintenance and has not booted", "", m, true, true, false},
		{"our record", "ns/fw/uid-1", m, false, false, true},
		{"a moved copy of the maintenance", "ns/fw/uid-1", moved, true, true, true},
		{"a moved copy, box off: still booted (kept on)", "ns/fw/uid-1", moved, false, true, true},
		{"a new maintenance of the same name", "ns/fw/uid-1", recreated, true, true, false},
		{"another maintenance's record", "ns/other/uid-1", m, true, true, false},
		{"another namespace's record", "other/fw/uid-1", m, true, true, false},
		{"a record without a UID", "ns/fw/", m, true, true, false},
		{"a bare UID (older records)", "uid-1", m, true, true, true},
		{"a bare UID of another", "uid-0", m, true, true, false},
		{"adopted, on, configuration Ready: the reference booted it", maintenanceBootAdopted, m, true, true, true},
		{"adopted, off: boot it", maintenanceBootAdopted, m, false, true, false},
		{"adopted, on, configuration not Ready: not yet", maintenanceBootAdopted, m, true, false, false},
		{"adopted copy of a moved maintenance, on, Ready", maintenanceBootAdopted, moved, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maintenanceBooted(tc.record, tc.m, tc.on, tc.ready); got != tc.want {
				t.Errorf("maintenanceBooted(%q, %s, on %v, ready %v) = %v, want %v", tc.record, tc.m.UID, tc.on, tc.ready, got, tc.want)
			}
		})
	}
}

// Where a server leaves Error for: an Error of ours goes back; an Error found never rediscovers.
func TestErrorExit(t *testing.T) {
	srv := func(mutate ...func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{SystemUUID: "u"}}
		for _, f := range mutate {
			f(s)
		}
		return s
	}
	annotated := func(k, v string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) { lifecycle.SetAnnotation(s, k, v) }
	}
	discovered := func(s *metalv1alpha1.Server) {
		s.Status.NetworkInterfaces = []metalv1alpha1.NetworkInterface{{Name: "eth0", MACAddress: "aa:bb:cc:dd:ee:ff"}}
	}
	claimed := func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: "c"}
	}
	maintained := func(s *metalv1alpha1.Server) {
		s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "m"}
	}
	const stay = metalv1alpha1.ServerStateError
	for _, tc := range []struct {
		name  string
		s     *metalv1alpha1.Server
		power bmc.PowerState
		want  metalv1alpha1.ServerState // stay: it stays
	}{
		{"ours, from Available", srv(annotated(serverstate.PreviousStateAnnotation, "Available")), bmc.PowerStateOn, metalv1alpha1.ServerStateAvailable},
		{"ours, from Discovery", srv(annotated(serverstate.PreviousStateAnnotation, "Discovery")), bmc.PowerStateOff, metalv1alpha1.ServerStateDiscovery},
		{"ours, previous state unusable", srv(annotated(serverstate.PreviousStateAnnotation, "Bogus")), bmc.PowerStateOff, metalv1alpha1.ServerStateInitial},
		{"found, maintenance ref", srv(maintained, discovered), bmc.PowerStateOn, metalv1alpha1.ServerStateMaintenance},
		{"found, claim ref", srv(claimed), bmc.PowerStateOn, metalv1alpha1.ServerStateReserved},
		{"found, discovered, off", srv(discovered), bmc.PowerStateOff, metalv1alpha1.ServerStateAvailable},
		{"found, discovered, on: not powered off", srv(discovered), bmc.PowerStateOn, stay},
		{"found, discovered, powering off", srv(discovered), bmc.PowerStatePoweringOff, stay},
		{"found, undiscovered, off: not rediscovered", srv(), bmc.PowerStateOff, stay},
		{"found, no system UUID", srv(discovered, func(s *metalv1alpha1.Server) { s.Spec.SystemUUID = "" }), bmc.PowerStateOff, stay},
		{"found undiscovered, our inventory filled in since", srv(discovered, annotated(serverstate.AdoptedErrorAnnotation, "undiscovered")), bmc.PowerStateOff, stay},
		{"found discovered, as marked", srv(annotated(serverstate.AdoptedErrorAnnotation, "discovered")), bmc.PowerStateOff, metalv1alpha1.ServerStateAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, ok := errorExit(tc.s, tc.power)
			if !ok {
				got = stay
			}
			if got != tc.want {
				t.Errorf("errorExit = %s (%v, %q), want %s", got, ok, why, tc.want)
			}
		})
	}
}

// A state found (adopted or derived) is persisted with the bookkeeping metalhub would have
// written itself.
func TestRecoveredBookkeeping(t *testing.T) {
	s := &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{SystemUUID: "u"}}
	s.Status.NetworkInterfaces = []metalv1alpha1.NetworkInterface{{Name: "eth0"}}
	recoveredBookkeeping(s, metalv1alpha1.ServerStateError)
	if got := s.Annotations[serverstate.AdoptedErrorAnnotation]; got != "discovered" {
		t.Errorf("adopted Error marked %q, want discovered", got)
	}
	recoveredBookkeeping(s, metalv1alpha1.ServerStateMaintenance)
	if got := s.Annotations[serverstate.MaintenanceBootAnnotation]; got != maintenanceBootAdopted {
		t.Errorf("adopted Maintenance marked %q, want %q", got, maintenanceBootAdopted)
	}
	lifecycle.SetAnnotation(s, serverstate.MaintenanceBootAnnotation, "ns/m/uid")
	recoveredBookkeeping(s, metalv1alpha1.ServerStateMaintenance)
	if got := s.Annotations[serverstate.MaintenanceBootAnnotation]; got != "ns/m/uid" {
		t.Errorf("a record of ours was replaced by %q", got)
	}
}
